"""Benchmark ``traceaug report --html`` against HTA computing the same analyses on the A100
6-stream trace (kernel breakdown, temporal breakdown, idle breakdown with interval stats,
comm/comp overlap, launch stats; HTA writes no page, so its side has no HTML to render).

Why: issue 17 asks the report to be at least 10x faster than HTA. Each tool runs alone in a
fresh process; wall time is measured from here (median of ``--repeat`` runs, taken in turn),
peak RSS over the child's process tree (sampled every 20 ms, pass-1 worker processes
included; at least the child's own VmHWM), and CPU seconds (user + sys of the child and every
process it waited for, pass-1 children included): on a shared machine wall time follows the
load, CPU seconds much less.
Python bytecode: HTA's modules come compiled (site-packages); when PYTHONDONTWRITEBYTECODE is
set, traceaug's would be compiled again on every run, so traceaug's children keep theirs under
the temporary directory (PYTHONPYCACHEPREFIX; warm-up runs compile them first) while HTA's
children run in the environment as it is.
Run: ``python bench/report_vs_hta.py [--repeat N] [--json] [--trace PATH]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counters_vs_hta import (  # noqa: E402
    MB,
    REPO_ROOT,
    WARM_TRACE,
    child_script,
    run,
    run_tree,
    tagged,
    warm_up,
)

TRACE = REPO_ROOT.parent / "shared" / "traces" / "kineto" / "a100_rank0_of16_6streams.json.gz"
TARGET_SPEED_RATIO = 10.0
TIMEOUT_S = 3600

TRACEAUG_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from traceaug.cli import main
main(["report", sys.argv[1], "--html", sys.argv[2]], standalone_mode=False)
print(TAG + json.dumps({"total_s": time.perf_counter() - t0, "peak_rss_kb": peak_kb()}))
"""

# HTA reads every trace in a directory: give it a directory holding a symlink to the trace.
HTA_CHILD = """
import json, logging, os, sys, time, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
os.symlink(sys.argv[1], os.path.join(sys.argv[2], "rank-0.json.gz"))
a = TraceAnalysis(trace_dir=sys.argv[2])
a.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(visualize=False, show_idle_interval_stats=True)
a.get_comm_comp_overlap(visualize=False)
a.get_cuda_kernel_launch_stats(visualize=False)
print(TAG + json.dumps({"total_s": time.perf_counter() - t0, "peak_rss_kb": peak_kb()}))
"""


def children_cpu_s() -> float:
    """User + sys seconds of every child this process has waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@contextlib.contextmanager
def bytecode_cached(work: Path):
    """Children keep compiled bytecode under ``work`` even if PYTHONDONTWRITEBYTECODE is set."""
    saved = {k: os.environ.get(k) for k in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if saved["PYTHONDONTWRITEBYTECODE"]:
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def measure(trace: Path, repeat: int) -> dict[str, Any]:
    """Wall time and CPU seconds (median of ``repeat`` runs of each tool, taken in turn) and
    peak RSS."""
    ta_walls, hta_walls, ta_peaks, hta_peaks, ta_cpus, hta_cpus = [], [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with bytecode_cached(work):  # HTA's children read site-packages' bytecode as it is
            warm_up(work)
            run([sys.executable, "-m", "traceaug", "report", str(WARM_TRACE), "--html",
                 str(work / "warm.html")], TIMEOUT_S, "traceaug report warm-up")
        for i in range(repeat):
            page = work / f"report{i}.html"
            with bytecode_cached(work):
                cpu = children_cpu_s()
                wall, _ = run([sys.executable, "-m", "traceaug", "report", str(trace), "--html",
                               str(page)], TIMEOUT_S, "traceaug report")
                ta_cpus.append(children_cpu_s() - cpu)
                ta_walls.append(wall)
                _, out, tree = run_tree([sys.executable, "-c", child_script(TRACEAUG_CHILD), str(trace),
                                         str(page)], TIMEOUT_S, "traceaug report (in-process)")
            ta_peaks.append(max(tagged(out, "the traceaug child")["peak_rss_kb"], tree))
            d = work / f"hta{i}"
            d.mkdir()
            cpu = children_cpu_s()
            wall, out, tree = run_tree([sys.executable, "-c", child_script(HTA_CHILD), str(trace), str(d)],
                                       TIMEOUT_S, "HTA analyses")
            hta_cpus.append(children_cpu_s() - cpu)
            hta_walls.append(wall)
            hta_peaks.append(max(tagged(out, "the HTA child")["peak_rss_kb"], tree))
        page_mb = (work / "report0.html").stat().st_size / MB
    ta_wall, hta_wall = statistics.median(ta_walls), statistics.median(hta_walls)
    raw = len(__import__("gzip").open(trace).read()) / MB
    return {"trace": str(trace), "raw_mb": raw, "repeat": repeat, "page_mb": page_mb,
            "traceaug_wall_s": ta_wall, "traceaug_walls_s": ta_walls,
            "traceaug_peak_mb": max(ta_peaks) / 1024, "hta_wall_s": hta_wall, "hta_walls_s": hta_walls,
            "hta_peak_mb": max(hta_peaks) / 1024, "speed_ratio": hta_wall / ta_wall,
            "traceaug_cpu_s": statistics.median(ta_cpus), "traceaug_cpus_s": ta_cpus,
            "hta_cpu_s": statistics.median(hta_cpus), "hta_cpus_s": hta_cpus,
            "cpu_ratio": statistics.median(hta_cpus) / statistics.median(ta_cpus),
            "load_average": os.getloadavg()[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool (median wall time)")
    parser.add_argument("--trace", type=Path, default=TRACE, help="the trace (default: A100 6 streams)")
    args = parser.parse_args()
    if not args.trace.exists():
        sys.exit(f"error: {args.trace} not found (../shared/traces is needed)")
    r = measure(args.trace, max(args.repeat, 1))
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    verdict = "PASS" if r["speed_ratio"] >= TARGET_SPEED_RATIO else "MISS"

    def runs(walls: list[float]) -> str:
        return ", ".join(f"{w:.2f}" for w in walls)

    print(f"{Path(r['trace']).name}, {r['raw_mb']:.1f} MB raw JSON; wall = median of {r['repeat']} runs; "
          f"page {r['page_mb']:.2f} MB")
    print(f"traceaug report   {r['traceaug_wall_s']:6.2f} s   peak RSS {r['traceaug_peak_mb']:7.0f} MB"
          f"   (runs: {runs(r['traceaug_walls_s'])})   CPU {r['traceaug_cpu_s']:.2f} s"
          f" (runs: {runs(r['traceaug_cpus_s'])})")
    print(f"HTA analyses      {r['hta_wall_s']:6.2f} s   peak RSS {r['hta_peak_mb']:7.0f} MB"
          f"   (runs: {runs(r['hta_walls_s'])})   CPU {r['hta_cpu_s']:.2f} s"
          f" (runs: {runs(r['hta_cpus_s'])})")
    print(f"speed ratio HTA/traceaug {r['speed_ratio']:.2f}x wall (target >= {TARGET_SPEED_RATIO:g}x): "
          f"{verdict}; {r['cpu_ratio']:.2f}x in CPU seconds; load average {r['load_average']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
