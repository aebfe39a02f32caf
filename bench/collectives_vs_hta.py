"""Benchmark traceaug collectives / stragglers against HTA on a generated job of N ranks.

``traceaug collectives`` and ``traceaug stragglers`` against HTA (``traceinsight``, ``import
hta``) ``TraceAnalysis(trace_dir).get_potential_stragglers()`` on the same directory.

Why: issue 26 asks, on a generated 64-rank job, >= 10x HTA's wall time and <= 0.25x its peak
memory. The job is built from a real one (``--base``: by default the 8-rank DLRM job, ~0.9 MB
a rank; or one rank's trace, e.g. the 9.8 MB ``a100_nccl_rank0_of2.json.gz``): rank r is its
rank r % n, ``distributedInfo`` saying r of N, with the planted stragglers of the tests
(``tests/jobgen.py``): a CPU-side delay, a GPU-side one and a rank's clock 300 µs off;
written as plain JSON (``rank-{r}.json``) into ``--out-dir`` and reused from there. Each run
is a fresh process, measured as ``bench/job_scale.py`` measures (wall time; the largest
process's and the whole tree's peak RSS, sampled every 20 ms).
Run: ``python bench/collectives_vs_hta.py [--ranks 64] [--base DIR|FILE] [--out-dir DIR]
[--skip-hta] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from job_scale import TARGET_RSS_RATIO, TARGET_SPEED_RATIO, run_measured  # noqa: E402
from load_throughput import REPO_ROOT, SHARED  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "tests"))
from jobgen import copy_job, plant_cpu, plant_gpu, shift_clock, write  # noqa: E402

BASE = SHARED / "traces" / "kineto" / "jobs" / "dlrm_v100_8ranks"
COMMANDS = ("collectives", "stragglers")

HTA_CHILD = """
import logging, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
print(TraceAnalysis(trace_dir=sys.argv[1]).get_potential_stragglers())
"""


def generate(ranks: int, out_dir: Path, base: Path = BASE) -> Path:
    """The job of ``ranks`` ranks from ``base`` with its planted stragglers (reused when
    complete)."""
    job = out_dir / f"collectives_{base.name.split('.')[0]}_{ranks}"
    if job.is_dir() and len(list(job.glob("rank-*.json"))) == ranks:
        return job
    raw = copy_job(base, ranks)
    plant_cpu(raw, rank=ranks - 5, c=3, d_us=2000)
    plant_gpu(raw, rank=2, c=5, d_us=3000)
    shift_clock(raw[ranks - 2], 300)
    partial = job.with_name(job.name + ".partial")
    if partial.exists():  # a run killed while writing
        for f in partial.iterdir():
            f.unlink()
        partial.rmdir()
    write(partial, raw)
    partial.rename(job)
    return job


def measure(job: Path, skip_hta: bool) -> list[dict[str, Any]]:
    """Each traceaug command, then HTA, on ``job``: one fresh process each."""
    rows = []
    for command in COMMANDS:
        r = run_measured([sys.executable, "-m", "traceaug", command, str(job), "--format", "csv"])
        rows.append({"tool": "traceaug", "command": command, **r})
    if not skip_hta:
        r = run_measured([sys.executable, "-c", HTA_CHILD, str(job)])
        rows.append({"tool": "HTA", "command": "get_potential_stragglers", **r})
    return rows


def report(rows: list[dict[str, Any]], ranks: int, job: Path, base: Path) -> str:
    size = sum(f.stat().st_size for f in job.iterdir()) / 1e6
    lines = [f"job of {ranks} ranks from {base.name} with planted stragglers ({size:.0f} MB of JSON)",
             f"{'tool':<9} {'command':<25} {'wall s':>8} {'largest MB':>11} {'tree MB':>9}"]
    for r in rows:
        lines.append(f"{r['tool']:<9} {r['command']:<25} {r['wall_s']:>8.2f} "
                     f"{r['largest_mb']:>11.0f} {r['tree_mb']:>9.0f}")
    hta = next((r for r in rows if r["tool"] == "HTA"), None)
    for r in rows:
        if hta and r["tool"] == "traceaug":
            lines.append(
                f"{r['command']}: {hta['wall_s'] / r['wall_s']:.1f}x HTA's speed (target >= "
                f"{TARGET_SPEED_RATIO:g}x), {r['tree_mb'] / hta['tree_mb']:.2f}x its peak memory "
                f"over the tree, {r['largest_mb'] / hta['largest_mb']:.2f}x in the largest process "
                f"(target <= {TARGET_RSS_RATIO:g}x)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--base", type=Path, default=BASE,
                        help="a real job's directory or one rank's trace to build the job from")
    parser.add_argument("--out-dir", type=Path, default=Path(tempfile.gettempdir()) / "traceaug-jobs")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.ranks < 8:
        parser.error("--ranks: at least 8 (the planted stragglers need them)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    job = generate(args.ranks, args.out_dir, args.base)
    rows = measure(job, args.skip_hta)
    print(json.dumps(rows, indent=2) if args.json else report(rows, args.ranks, job, args.base), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
