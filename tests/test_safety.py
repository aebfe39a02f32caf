"""README's "Safety" promises that no other test proves: a bind mount of an input is refused
as an output, a directory input stands for every file in it, and process substitution or a
FIFO with a writer is read once (the right answer, nothing left in $TMPDIR)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import kineto_gen
import pytest
from conftest import ROOT

STEPS = 3  # kineto_gen.trace(): 3 ProfilerSteps, 3 kernels


def cli(*args: str, cwd: Path, tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run([sys.executable, "-m", "traceaug", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_bind_mount_of_the_input_is_refused(tmp_path: Path) -> None:
    """The input seen through a bind mount (its own mount namespace: nothing leaks out) is the
    same device and inode: refused in one line, the input unchanged, nothing written."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode:
        pytest.skip("no unprivileged mount namespace here (unshare -rm)")
    src_dir, view = tmp_path / "src", tmp_path / "view"
    src_dir.mkdir()
    view.mkdir()
    src = kineto_gen.write(src_dir / "t.json", kineto_gen.trace())
    before = src.read_bytes()
    script = (f'mount --bind "{src_dir}" "{view}" && exec "{sys.executable}" -m traceaug '
              f'counters "{src}" "{view}/t.json"')
    res = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert res.returncode == 1, res.stderr
    assert res.stderr == (f"traceaug: error: {view}/t.json: is the input file {src} (another "
                          "name for it); choose another output\n")
    assert src.read_bytes() == before and os.listdir(src_dir) == ["t.json"]
    assert os.listdir(view) == []  # the mount was the namespace's own


def test_a_directory_input_stands_for_every_file_in_it(tmp_path: Path) -> None:
    """An output that is any file of an input directory is refused, whichever rank is read."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for rank in (0, 1):
        kineto_gen.write_large(ranks / f"rank-{rank}.json", 5, rank)
    other = kineto_gen.write(tmp_path / "b.json", kineto_gen.trace())
    before = {p.name: p.read_bytes() for p in ranks.iterdir()}
    for args in (["report", "ranks", "--html", "ranks/rank-1.json"],
                 ["diff", "ranks", "b.json", "--rank", "0", "--trace", "ranks/rank-1.json"],
                 ["counters", "ranks", "ranks/"]):
        res = cli(*args, cwd=tmp_path)
        assert res.returncode == 1 and res.stderr.count("\n") == 1, (args, res.stderr)
        assert "is the input" in res.stderr, (args, res.stderr)
        assert {p.name: p.read_bytes() for p in ranks.iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == ["b.json", "ranks"] and other.exists()


def test_process_substitution_and_a_fifo_are_read_once(tmp_path: Path) -> None:
    """``<(zcat t.json.gz)`` and a FIFO with a writer: the right counts; the spool is gone."""
    kineto_gen.write(tmp_path / "t.json.gz", kineto_gen.trace())
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)}
    res = subprocess.run(["bash", "-c", f'"{sys.executable}" -m traceaug info --format json '
                          '<(gzip -dc t.json.gz)'], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert (info["profiler_steps"], info["kernels"]) == (STEPS, STEPS)
    assert os.listdir(temp) == []

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    data = json.dumps(kineto_gen.trace()).encode()

    def write() -> None:
        with open(fifo, "wb") as f:  # blocks until the command opens the FIFO to read
            f.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    res = cli("info", "--format", "json", "fifo.json", cwd=tmp_path, tmpdir=temp)
    writer.join(timeout=10)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert (info["profiler_steps"], info["kernels"]) == (STEPS, STEPS)
    assert os.listdir(temp) == []
