"""The optional native engine (``--tp-bin``): the same answers as the embedded one.

Runs with a real ``trace_processor_shell``: the one ``TRACEAUG_TEST_TP_BIN`` names, else one
on PATH. None can be downloaded on an offline machine, so without one these tests skip.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from conftest import TESTDATA, run_cli, shared_trace
from rawjson import KINDS, events_by_kind
from test_errors import make_bad
from test_fidelity import engine_events

import traceaug


def native_shell() -> str:
    path = os.environ.get("TRACEAUG_TEST_TP_BIN") or shutil.which("trace_processor_shell")
    if not path:
        pytest.skip("no trace_processor_shell (set TRACEAUG_TEST_TP_BIN or put one on PATH)")
    return path


@pytest.mark.parametrize("rel", ["kineto/b200_rank0_of8_allgather.json.gz",
                                 "kineto/v100_ns_resolution.json.gz"])
def test_native_engine_every_event_exact(rel: str) -> None:
    """Overlap lanes and exact rebasing work the same through a native shell."""
    path = shared_trace(rel)
    expected = events_by_kind(path)
    with traceaug.load(path, tp_bin=native_shell(), progress=False) as trace:
        got = engine_events(trace)
    assert sum(len(v) for v in expected.values()) > 4000
    for kind in KINDS:
        assert got.get(kind, []) == expected.get(kind, []), kind


def test_native_and_embedded_counters_write_the_same_bytes(tmp_path: Path) -> None:
    shell = native_shell()
    src = TESTDATA / "small_training.json.gz"
    outs = []
    for engine in ((), ("--tp-bin", shell)):
        out = tmp_path / f"out{len(outs)}.json"
        result = run_cli(*engine, "counters", str(src), str(out), "--format", "json")
        assert result.returncode == 0, result.stderr
        outs.append((out.read_bytes(), result.stdout.replace(str(out), "OUT")))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("name", ["truncated", "garbage", "not_a_trace"])
def test_native_engine_bad_input_one_line(tmp_path: Path, name: str) -> None:
    """Errors Perfetto reports while parsing or finalizing reach the user through the shell too."""
    path, reason = make_bad(tmp_path)[name]
    result = run_cli("--tp-bin", native_shell(), "info", str(path))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and reason in lines[0], result.stderr


DIES_MID_LOAD = """#!{python}
import os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # /status: upstream waits for it before it connects
        self.send_response(200)
        self.end_headers()

    def do_POST(self):  # the first /rpc request (loading): the shell dies
        os._exit(1)

port = int(sys.argv[sys.argv.index("--http-port") + 1])
HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def test_shell_that_dies_while_loading_is_a_clean_error(tmp_path: Path) -> None:
    """A crash is provoked with a stand-in shell that answers /status, then exits (no real
    shell can be made to die on cue); the user gets one line, not a traceback."""
    shell = tmp_path / "trace_processor_shell"
    shell.write_text(DIES_MID_LOAD.format(python=sys.executable))
    shell.chmod(0o755)
    trace = TESTDATA / "small_training.json"
    result = run_cli("--tp-bin", str(shell), "info", str(trace))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(trace) in lines[0] and "trace_processor_shell stopped answering" in lines[0]


def test_shell_that_dies_after_loading_fails_queries_cleanly() -> None:
    with traceaug.load(TESTDATA / "small_training.json", tp_bin=native_shell(), progress=False) as t:
        assert t.query("SELECT COUNT(*) AS n FROM slice")["n"][0] > 0
        t.tp.backend.subprocess.kill()
        t.tp.backend.subprocess.wait()
        with pytest.raises(traceaug.TraceaugError, match="trace_processor_shell stopped answering"):
            t.query("SELECT COUNT(*) AS n FROM slice")
