"""Benchmark a job of many ranks: traceaug's ``kernels``, ``breakdown`` and ``report`` over a
generated directory of N ranks of the 25.8 MB A100 trace, on the local pool and on a 2-worker
Dask LocalCluster (``--workers 2``), against HTA (``traceinsight``, ``import hta``)
``TraceAnalysis(trace_dir)`` and the same analyses on the same directory.

Why: issue 25 asks >= 10x HTA's wall time and <= 0.25x its peak memory on 64 ranks, and
traceaug's peak memory independent of the number of ranks (it grows with the largest rank
and the pool size). Each run is a fresh process; wall time from here; memory sampled every
20 ms over the whole process tree (pool / Dask worker processes included): the largest single
process and the tree's sum.
The ranks are the A100 trace with its ``distributedInfo.rank`` set and its timestamps shifted
by whole µs per rank (a plain JSON file each, ``rank-K.json``), reused from ``--out-dir``.
Run: ``python bench/job_scale.py [--ranks 64] [--out-dir DIR] [--skip-hta] [--json]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_throughput import REPO_ROOT, first_run, run_sampled  # noqa: E402

TRACE = REPO_ROOT.parent / "shared" / "traces" / "kineto" / "a100_rank0_of16_6streams.json.gz"
COMMANDS = ("kernels", "breakdown", "report")
TARGET_SPEED_RATIO = 10.0
TARGET_RSS_RATIO = 0.25
TIMEOUT_S = 4 * 3600

HTA_CHILD = """
import logging, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
ranks = sorted(a.t.traces)
command = sys.argv[2]
if command in ("kernels", "report"):
    a.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
if command in ("breakdown", "report"):
    a.get_temporal_breakdown(visualize=False)
    a.get_idle_time_breakdown(ranks=ranks, visualize=False, show_idle_interval_stats=True)
if command == "report":
    a.get_comm_comp_overlap(visualize=False)
    a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
"""


def generate(ranks: int, out_dir: Path) -> Path:
    """``ranks`` copies of the A100 trace as rank-K.json, each with its rank (of ``ranks``) and shifted ts."""
    job = out_dir / f"job_{ranks}"
    if job.is_dir() and len(list(job.glob("rank-*.json"))) == ranks:
        return job
    job.mkdir(parents=True, exist_ok=True)
    text = gzip.open(TRACE).read()
    dist = re.search(rb'"distributedInfo"\s*:\s*\{[^{}]*\}', text)
    ts = re.compile(rb'("ts"\s*:\s*)(\d+)')
    for r in range(ranks):
        info = re.sub(rb'("rank"\s*:\s*)\d+', rb"\g<1>%d" % r, dist.group(0))
        info = re.sub(rb'("world_size"\s*:\s*)\d+', rb"\g<1>%d" % ranks, info)
        body = text[:dist.start()] + info + text[dist.end():]
        body = ts.sub(lambda m, r=r: m.group(1) + str(int(m.group(2)) + 1000 * r).encode(), body)
        (job / f"rank-{r}.json").write_bytes(body)
    return job


def run_measured(cmd: list[str]) -> dict[str, Any]:
    """Wall time, the largest process's and the tree's peak RSS (MB) of ``cmd``, run first (``first_run``)."""
    with tempfile.TemporaryFile("w+") as err, first_run() as env:
        run = run_sampled(cmd, env, stdout=subprocess.DEVNULL, stderr=err, timeout=TIMEOUT_S)
        if run.late:
            sys.exit(f"error: {cmd[:4]} took more than {TIMEOUT_S} s")
        if run.code != 0:
            err.seek(0)
            sys.exit(f"error: {cmd[:4]} failed: {err.read()[-2000:]}")
    return {"wall_s": run.wall_s, "largest_mb": run.largest_kb / 1024, "tree_mb": run.tree_kb / 1024}


def measure(job: Path, ranks: int, skip_hta: bool) -> list[dict[str, Any]]:
    rows = []
    for command in COMMANDS:
        for label, extra in (("traceaug pool", []), ("traceaug dask-2", ["--workers", "2"])):
            r = run_measured([sys.executable, "-m", "traceaug", command, str(job), "--format",
                              "csv", *extra])
            rows.append({"tool": label, "command": command, **r, "ranks_per_s": ranks / r["wall_s"]})
        if not skip_hta:
            r = run_measured([sys.executable, "-c", HTA_CHILD, str(job), command])
            rows.append({"tool": "HTA", "command": command, **r, "ranks_per_s": ranks / r["wall_s"]})
    return rows


def report(rows: list[dict[str, Any]], ranks: int) -> str:
    lines = [f"job of {ranks} ranks of {TRACE.name} (25.8 MB raw each)",
             f"{'tool':<16} {'command':<10} {'wall s':>8} {'ranks/s':>8} {'largest MB':>11} "
             f"{'tree MB':>9}"]
    for r in rows:
        lines.append(f"{r['tool']:<16} {r['command']:<10} {r['wall_s']:>8.2f} "
                     f"{r['ranks_per_s']:>8.2f} {r['largest_mb']:>11.0f} {r['tree_mb']:>9.0f}")
    for command in COMMANDS:
        hta = next((r for r in rows if r["tool"] == "HTA" and r["command"] == command), None)
        pool = next(r for r in rows if r["tool"] == "traceaug pool" and r["command"] == command)
        if hta:
            speed, mem = hta["wall_s"] / pool["wall_s"], pool["tree_mb"] / hta["tree_mb"]
            lines.append(f"{command}: {speed:.1f}x HTA's speed (target >= {TARGET_SPEED_RATIO:g}x), "
                         f"{mem:.2f}x its peak memory (target <= {TARGET_RSS_RATIO:g}x)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--out-dir", type=Path, default=Path(tempfile.gettempdir()) / "traceaug-jobs")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    job = generate(args.ranks, args.out_dir)
    rows = measure(job, args.ranks, args.skip_hta)
    print(json.dumps(rows, indent=2) if args.json else report(rows, args.ranks), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
