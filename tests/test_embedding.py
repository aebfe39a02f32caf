"""traceaug inside someone else's program: importing it changes no signal handler and no
global state, so a user's package run as ``python -m mypkg`` that imports traceaug (and loads
a trace) still gets its own KeyboardInterrupt on Ctrl-C, and its ``finally`` blocks run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TESTDATA

MAIN = """
import signal, sys, time
from mypkg import BEFORE
import traceaug
print("handler kept", signal.getsignal(signal.SIGINT) is BEFORE, flush=True)
if sys.argv[1:] == ["load"]:
    with traceaug.load({trace!r}, progress=False) as t:
        t.query("SELECT COUNT(*) FROM slice")
try:
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("own KeyboardInterrupt", flush=True)
    sys.exit(7)
finally:
    print("finally ran", flush=True)
"""


@pytest.mark.parametrize("load", [False, True], ids=["import", "import-and-load"])
def test_a_package_run_with_dash_m_keeps_its_ctrl_c(tmp_path: Path, load: bool) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    # the package imports traceaug as ``python -m`` imports it: while sys.argv[0] is "-m"
    (pkg / "__init__.py").write_text("import signal\nBEFORE = signal.getsignal(signal.SIGINT)\n"
                                     "import traceaug  # noqa: F401\n")
    (pkg / "__main__.py").write_text(MAIN.format(trace=str(TESTDATA / "small_training.json")))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    # started with Ctrl-C at its default, as from a terminal (a suite run in the background, ``cmd &``,
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt)
    proc = subprocess.Popen([sys.executable, "-m", "mypkg", *(["load"] if load else [])],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        assert lines == ["handler kept True", "ready"], (lines, proc.stderr.read())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert out.split("\n")[:2] == ["own KeyboardInterrupt", "finally ran"], (out, err)
    assert proc.returncode == 7, err
