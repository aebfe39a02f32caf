"""Benchmark the job's critical path against ``traceaug collectives`` on the same job.

Why: issue 27 asks that ``critical-path JOB --job`` (every rank's graph, joined at each
collective) run within 2x the time of ``collectives`` on the generated 64-rank job. The job
is ``collectives_vs_hta``'s (the DLRM ranks with planted stragglers) where that bench
exists, else (or ``--job a100``) ``job_scale``'s (N copies of the A100 trace, each with its
rank and shifted clock); each command runs as a fresh process (wall time and peak memory of
its process tree, as ``job_scale`` measures them), ``--summary-only``: no merged trace.
Run: ``python bench/job_path.py [--ranks 64] [--job collectives|a100] [--out-dir DIR] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from job_scale import generate as generate_a100  # noqa: E402
from job_scale import run_measured  # noqa: E402

try:  # issue 26's generated job (the DLRM ranks, planted stragglers), where its bench exists
    from collectives_vs_hta import generate as generate_dlrm
except ImportError:
    generate_dlrm = None

TARGET_RATIO = 2.0


def measure(job: Path) -> dict:
    """Both commands on ``job``: wall time (s) and peak memory (MB) each, and the ratio."""
    py = [sys.executable, "-m", "traceaug"]
    coll = run_measured([*py, "collectives", str(job)])
    path = run_measured([*py, "critical-path", str(job), "--job", "--summary-only"])
    return {"collectives": coll, "critical_path_job": path,
            "ratio": path["wall_s"] / coll["wall_s"] if coll["wall_s"] else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--out-dir", type=Path, default=Path(tempfile.gettempdir()) / "traceaug-jobs")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--job", choices=("collectives", "a100"), default=None,
                        help="collectives: bench/collectives_vs_hta.py's job (the default where "
                             "it exists); a100: bench/job_scale.py's")
    args = parser.parse_args(argv)
    kind = args.job or ("collectives" if generate_dlrm is not None else "a100")
    if kind == "collectives" and generate_dlrm is None:
        parser.error("bench/collectives_vs_hta.py is missing: --job a100")
    make = generate_dlrm if kind == "collectives" else generate_a100
    job = make(args.ranks, args.out_dir)
    row = {"ranks": args.ranks, "job": kind, **measure(job)}
    if args.json:
        print(json.dumps(row, indent=2))
    else:
        for name in ("collectives", "critical_path_job"):
            r = row[name]
            print(f"{name:>18}: {r['wall_s']:.1f} s, largest process {r['largest_mb']:.0f} MB, "
                  f"tree {r['tree_mb']:.0f} MB")
        ratio = row["ratio"]
        print(f"critical-path --job / collectives: {ratio:.2f}x (target <= {TARGET_RATIO:.0f}x): "
              f"{'met' if ratio is not None and ratio <= TARGET_RATIO else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
