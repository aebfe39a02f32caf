"""``merge`` writes the job rank by rank (issue 39 item 19): each rank's own text with new values spliced
in, so its peak memory follows the largest rank, not the number of ranks; the events stay the ranks'."""

from __future__ import annotations

import collections
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import shared_trace
from jobgen import copy_job, write

import traceaug
from traceaug.cli import main

JOB = "kineto/jobs/dlrm_v100_8ranks"
ARGS = re.compile(rb'[{,](\n      "[^{}]*\})')  # Kineto's args as written (after any lane args put first)
PEAK = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
        "capture_output=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def peak_mb(job: Path, out: Path) -> float:
    """The largest process's peak RSS of ``traceaug merge job out`` (a fresh process tree)."""
    env = {**os.environ, "PYTHONPATH": str(Path(traceaug.__file__).resolve().parents[1])}  # the code tested
    p = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "traceaug", "merge", str(job),
                        str(out)], capture_output=True, text=True, env=env, check=True)
    return int(p.stdout) / 1024


def test_merge_peak_memory_follows_the_largest_rank_not_the_job(tmp_path: Path) -> None:
    """Many more ranks (each ~0.9 MB) take no more memory than a few ranks' worth (at 24x the job's
    size, as before, 14 more ranks took ~200 MB more)."""
    base = shared_trace(JOB)
    small, large = (write(tmp_path / f"job{n}", copy_job(base, n)) for n in (2, 16))
    largest = max(f.stat().st_size for f in large.iterdir()) / 1e6
    grown = peak_mb(large, tmp_path / "large.json.gz") - peak_mb(small, tmp_path / "small.json.gz")
    assert grown < 3 * largest + 30, f"{grown:.0f} MB more for 14 more ranks"


def _key(e: dict) -> tuple:
    return e.get("ph"), e.get("cat"), e.get("name"), e.get("dur"), json.dumps(
        {k: v for k, v in (e.get("args") or {}).items() if not k.startswith("traceaug_")}, sort_keys=True)


def test_merge_splices_every_rank_s_own_text(tmp_path: Path) -> None:
    """Every event of every rank is in the merged trace (but metadata, written again), and with the
    ranks' own text: each multi-line ``args`` block Kineto wrote is there as written (``merge`` wrote
    every event again: ``"External id":1034,"Ev Idx":9``)."""
    from click.testing import CliRunner

    job = shared_trace(JOB)
    out = tmp_path / "merged.json.gz"
    result = CliRunner().invoke(main, ["merge", str(job), str(out)])
    assert result.exit_code == 0, result.output
    text = gzip.open(out).read()
    merged = json.loads(text)["traceEvents"]
    want: collections.Counter = collections.Counter()
    blocks: collections.Counter = collections.Counter()
    for f in sorted(job.iterdir()):
        raw = gzip.open(f).read()
        want.update(_key(e) for e in json.loads(raw)["traceEvents"] if e.get("ph") != "M")
        blocks.update(ARGS.findall(raw))
    got = collections.Counter(_key(e) for e in merged  # but the arrows and marks merge adds
                              if e.get("ph") != "M" and e.get("cat") not in ("collective", "straggler"))
    assert got == want
    assert len(blocks) > 1000
    new = (b'"name":', b'"sort_index":')  # process names and order: written anew
    kept = collections.Counter(ARGS.findall(text))
    missing = [b for b, n in blocks.items() if kept[b] < n and not any(k in b for k in new)]
    assert not missing, missing[:3]
