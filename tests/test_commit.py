"""A run's outputs are put in place all together (``atomic.all_or_none``): when a later output
fails at the commit, or a signal lands during it, the files the commit already replaced are
put back as they were (issue 24.1), never deleted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kineto_gen
from click.testing import CliRunner

from traceaug import atomic
from traceaug.cli import main

ROOT = Path(atomic.__file__).parents[1]  # the traceaug under test
OLD = b"OLD output, kept unless the run succeeds\n"


def inputs(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "in"
    src.mkdir()
    a = kineto_gen.write(src / "a.json", kineto_gen.trace())
    return a, kineto_gen.write(src / "b.json", kineto_gen.trace())


def fault_at_commit(monkeypatch, target: Path) -> None:
    """Just before the commit, ``target`` (an output not yet in place) becomes a directory, as
    another process could make it: renaming the output over it fails (a real fault)."""
    real = atomic._commit

    def commit(pending, *said):
        if target.exists():
            target.unlink()
        target.mkdir()
        return real(pending, *said)

    monkeypatch.setattr(atomic, "_commit", commit)


def test_diff_second_output_failing_puts_the_first_back(tmp_path: Path, monkeypatch) -> None:
    """issue 24.1's run: ``keep.html`` existed, ``m.json`` became a directory during the run:
    exit 1 naming m.json, and keep.html still holds its old bytes."""
    a, b = inputs(tmp_path)
    keep, merged = tmp_path / "keep.html", tmp_path / "m.json"
    keep.write_bytes(OLD)
    fault_at_commit(monkeypatch, merged)
    res = CliRunner().invoke(main, ["diff", str(a), str(b), "--html", str(keep), "--trace", str(merged)])
    assert res.exit_code == 1 and "m.json" in res.stderr and "Is a directory" in res.stderr, res.output
    assert keep.read_bytes() == OLD
    assert merged.is_dir() and not any(merged.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "keep.html", "m.json"]  # no temp


def test_rank_directory_output_failing_puts_the_others_back(tmp_path: Path, monkeypatch) -> None:
    """counters DIR OUT/: rank 1's output cannot be renamed into place; rank 0's old output
    (replaced first) is put back, and the other ranks' files are as they were."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in range(3):
        kineto_gen.write(ranks / f"rank{r}.json",
                         kineto_gen.trace(distributedInfo={"rank": r, "world_size": 3}))
    out = tmp_path / "out"
    first = CliRunner().invoke(main, ["counters", str(ranks), str(out)])
    assert first.exit_code == 0, first.output
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 3
    for i, name in enumerate(names):
        (out / name).write_bytes(OLD + bytes([48 + i]))
    fault_at_commit(monkeypatch, out / names[1])
    res = CliRunner().invoke(main, ["counters", str(ranks), str(out)])
    assert res.exit_code == 1 and names[1] in res.stderr, res.output
    assert (out / names[0]).read_bytes() == OLD + b"0" and (out / names[2]).read_bytes() == OLD + b"2"
    assert sorted(p.name for p in out.iterdir()) == names  # no temporary or set-aside file


# Ctrl-C lands during the commit: a real SIGINT, sent by the process to itself as the second
# output is renamed into place (the only moment the test cannot reach otherwise).
SIGNAL_IN_COMMIT = """
import os, signal, sys
from traceaug import atomic
real, calls = os.replace, []
def replace(src, dst):
    if str(src).endswith(".tmp"):
        calls.append(dst)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
    return real(src, dst)
atomic.os.replace = replace
sys.argv = ["traceaug", *sys.argv[1:]]
from traceaug.__main__ import main
main()
"""


def test_ctrl_c_during_the_commit_puts_every_old_output_back(tmp_path: Path) -> None:
    a, b = inputs(tmp_path)
    keep, merged = tmp_path / "keep.html", tmp_path / "m.json"
    keep.write_bytes(OLD)
    merged.write_bytes(OLD + b"m")
    run = subprocess.run([sys.executable, "-c", SIGNAL_IN_COMMIT, "diff", str(a), str(b),
                          "--html", str(keep), "--trace", str(merged)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (run.returncode, run.stderr) == (130, "traceaug: interrupted\n"), run.stderr
    assert keep.read_bytes() == OLD and merged.read_bytes() == OLD + b"m"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "keep.html", "m.json"]


def test_a_committed_run_replaces_the_old_outputs(tmp_path: Path) -> None:
    """The set-aside old files go once the commit succeeds."""
    a, b = inputs(tmp_path)
    keep, merged = tmp_path / "keep.html", tmp_path / "m.json"
    keep.write_bytes(OLD)
    merged.write_bytes(OLD)
    res = CliRunner().invoke(main, ["diff", str(a), str(b), "--html", str(keep), "--trace", str(merged)])
    assert res.exit_code == 0, res.output
    assert keep.read_text().rstrip().endswith("</html>") and json.loads(merged.read_bytes())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "keep.html", "m.json"]
