"""Benchmark ``traceaug report --html`` against HTA computing the same analyses on the A100
6-stream trace (kernel breakdown, temporal breakdown, idle breakdown with interval stats,
comm/comp overlap, launch stats; HTA writes no page, so its side has no HTML to render).

Why: issue 17 asks the report to be at least 10x faster than HTA. Each tool runs alone in a
fresh process; wall time is measured from here (median of ``--repeat`` runs, taken in turn,
each a plain wait for the process), peak RSS in a separate run over the child's process tree
(sampled every 20 ms, pass-1 worker processes included; at least the child's own VmHWM), and
CPU seconds (user + sys of the child and every
process it waited for, pass-1 children included): on a shared machine wall time follows the
load, CPU seconds much less.
Python bytecode: HTA's modules come compiled (site-packages); when PYTHONDONTWRITEBYTECODE is
set, traceaug's would be compiled again on every run, so traceaug's children keep theirs under
the temporary directory (PYTHONPYCACHEPREFIX; warm-up runs compile them first) while HTA's
children run in the environment as it is.
The directory of per-rank traces (``--trace DIR``) and the trace scaled xN (``--scaled N``: N
copies end to end, reused from ``--out-dir``) show how the ratio moves when fixed costs
(start-up, imports, the engine's start) matter more or less. The copies keep the profiler's
own text (``--layout kineto``, bench/load_throughput.py's ``build_scaled_text``), as a larger
real trace would have it, which traceaug's skim reads; ``--layout compact`` re-serializes them
with orjson (``build_scaled``, the other benches' scaled traces), where the skim finds nothing.
``--phases`` prints instead where one run spends its time (wall since the process started and
CPU at each phase: imports, the pass-1 child, engine start, waiting, parse, queries, analyses,
page).
Run: ``python bench/report_vs_hta.py [--repeat N] [--json] [--trace PATH|DIR ...] [--scaled N
[--layout kineto|compact] [--out-dir DIR]] [--phases]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counters_vs_hta import (  # noqa: E402
    MB,
    REPO_ROOT,
    WARM_TRACE,
    bytecode_cached,
    child_script,
    ratio_line,
    run,
    run_tree,
    runs_text,
    tagged,
    tool_line,
    warm_up,
)
from load_throughput import DEFAULT_OUT, build_scaled, build_scaled_text, first_run  # noqa: E402

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

# HTA reads every trace in a directory: give it a directory holding a symlink to the trace (or
# to each trace of a directory of ranks).
HTA_CHILD = """
import json, logging, os, sys, time, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
src = sys.argv[1]
files = [os.path.join(src, f) for f in sorted(os.listdir(src))] if os.path.isdir(src) else [src]
for f in files:
    os.symlink(f, os.path.join(sys.argv[2], os.path.basename(f)))
a = TraceAnalysis(trace_dir=sys.argv[2])
ranks = sorted(a.t.traces)  # every rank, as traceaug's report (HTA's default is rank 0 only)
a.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(ranks=ranks, visualize=False, show_idle_interval_stats=True)
a.get_comm_comp_overlap(visualize=False)
a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
print(TAG + json.dumps({"total_s": time.perf_counter() - t0, "peak_rss_kb": peak_kb()}))
"""


# argv: TRACE PAGE. One report run in this process, with a timestamp (wall since the process
# started, CPU of this process) at each phase, and each pass-1 child's span of pass 1 (it then
# waits for the parent to read its plan): one JSON line.
PHASES_CHILD = """
import json, os, sys, time
def up():  # seconds since this process started (/proc), so that Python's own start counts
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        return float(f.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
START = time.time() - up()
marks = [("python started", time.time() - START, time.process_time())]
def mark(name):
    marks.append((name, time.time() - START, time.process_time()))
def timed(owner, attr, name):
    f = getattr(owner, attr)
    def w(*a, **k):
        mark(name + " start")
        try:
            return f(*a, **k)
        finally:
            mark(name + " end")
    setattr(owner, attr, w)
import traceaug.cli as cli
mark("cli imported")
from traceaug.read import normalize, prefetch
PARENT, plan = os.getpid(), normalize.plan
def child_plan(*a, **k):  # pass 1 in a forked child (it inherits this): its span, to a pipe
    if os.getpid() == PARENT:
        return plan(*a, **k)
    t, c = time.time(), time.process_time()
    out = plan(*a, **k)  # then the child waits until the parent reads the plan
    span = [t - START, time.time() - START, time.process_time() - c]
    os.write(CHILD_FD, json.dumps(span).encode() + b"\\n")
    return out
normalize.plan = child_plan
CHILD_READ, CHILD_FD = os.pipe()
def started(start_children):
    def w(*a, **k):
        mark("pass-1 children to start")
        out = start_children(*a, **k)
        mark("perfetto API imported")
        from traceaug.analysis import gpu_steps
        from traceaug.engine import loader
        from traceaug.render import analyses_html
        mark("engine and analyses imported")
        timed(loader, "_early_engine", "engine start")
        timed(prefetch.Prefetched, "take", "wait for the child")
        timed(loader, "_load_once", "engine parse")
        timed(gpu_steps, "gpu_ops", "queries")
        timed(analyses_html, "analyses", "analyses")
        timed(analyses_html, "write_report", "page")
        return out
    return w
cli._prefetch = started(cli._prefetch)  # a lone trace or a directory of ranks
cli.main(["report", sys.argv[1], "--html", sys.argv[2]], standalone_mode=False)
mark("done")
os.close(CHILD_FD)
kids = [json.loads(line) for line in os.fdopen(CHILD_READ).read().splitlines()]
print(TAG + json.dumps({"marks": marks, "children": kids}))
"""


def children_cpu_s() -> float:
    """User + sys seconds of every child this process has waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], what: str) -> float:
    """Wall seconds of ``cmd`` run to its end (no sampling loop beside it, so that the 20 ms
    polling of ``run_tree`` neither rounds a sub-second run nor takes a core from it)."""
    with first_run() as env:
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              timeout=TIMEOUT_S, env=env)
        wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stderr.decode(errors="replace")[-4000:])
        sys.exit(f"error: {what} failed (exit {done.returncode})")
    return wall


def raw_mb(trace: Path) -> float:
    """Raw JSON megabytes of a trace file or of every file of a directory."""
    files = sorted(trace.iterdir()) if trace.is_dir() else [trace]
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        with (gzip.open(f, "rb") if gz else open(f, "rb")) as fh:
            while chunk := fh.read(16 * MB):
                total += len(chunk)
    return total / MB


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
                ta_walls.append(timed([sys.executable, "-m", "traceaug", "report", str(trace),
                                       "--html", str(page)], "traceaug report"))
                ta_cpus.append(children_cpu_s() - cpu)
                _, out, tree = run_tree([sys.executable, "-c", child_script(TRACEAUG_CHILD), str(trace),
                                         str(page)], TIMEOUT_S, "traceaug report (in-process)")
            ta_peaks.append(max(tagged(out, "the traceaug child")["peak_rss_kb"], tree))
            d = work / f"hta{i}"
            d.mkdir()
            cpu = children_cpu_s()
            hta_walls.append(timed([sys.executable, "-c", child_script(HTA_CHILD), str(trace), str(d)],
                                   "HTA analyses"))
            hta_cpus.append(children_cpu_s() - cpu)
            d = work / f"hta{i}_rss"
            d.mkdir()
            _, out, tree = run_tree([sys.executable, "-c", child_script(HTA_CHILD), str(trace), str(d)],
                                    TIMEOUT_S, "HTA analyses (memory)")
            hta_peaks.append(max(tagged(out, "the HTA child")["peak_rss_kb"], tree))
        page_mb = (work / "report0.html").stat().st_size / MB
    ta_wall, hta_wall = statistics.median(ta_walls), statistics.median(hta_walls)
    return {"trace": str(trace), "raw_mb": raw_mb(trace), "repeat": repeat, "page_mb": page_mb,
            "traceaug_wall_s": ta_wall, "traceaug_walls_s": ta_walls,
            "traceaug_peak_mb": max(ta_peaks) / 1024, "hta_wall_s": hta_wall, "hta_walls_s": hta_walls,
            "hta_peak_mb": max(hta_peaks) / 1024, "speed_ratio": hta_wall / ta_wall,
            "traceaug_cpu_s": statistics.median(ta_cpus), "traceaug_cpus_s": ta_cpus,
            "hta_cpu_s": statistics.median(hta_cpus), "hta_cpus_s": hta_cpus,
            "cpu_ratio": statistics.median(hta_cpus) / statistics.median(ta_cpus),
            "load_average": os.getloadavg()[0]}


def phases(trace: Path) -> str:
    """One report run's phases (a lone trace: the pass-1 child's span is shown), as text."""
    with tempfile.TemporaryDirectory() as tmp, bytecode_cached(Path(tmp)):
        page = str(Path(tmp) / "page.html")
        run([sys.executable, "-c", child_script(PHASES_CHILD), str(trace), page], TIMEOUT_S,
            "report phases (warm-up)")
        _, out = run([sys.executable, "-c", child_script(PHASES_CHILD), str(trace), page], TIMEOUT_S,
                     "report phases")
    got = tagged(out, "the phases child")
    lines = [f"{Path(trace).name}: wall s since the process started, CPU s of the parent"]
    lines += [f"{wall:7.3f}  cpu {cpu:6.3f}  {name}" for name, wall, cpu in got["marks"]]
    lines += [f"pass-1 child: {a:.3f} -> {b:.3f} s, {cpu:.3f} CPU s" for a, b, cpu in got["children"]]
    return "\n".join(lines)


def scaled(copies: int, out_dir: Path, layout: str = "kineto") -> Path:
    """The A100 6-stream trace ``copies`` times end to end (built once into ``out_dir``), in
    its own text (``layout`` "kineto") or re-serialized compactly ("compact")."""
    src = TRACE.resolve()  # the cache key names it: the same as the other benches' from any tree
    target = raw_mb(src) * copies
    path, meta = None, {"copies": 0}
    for _ in range(4):  # the builders round to whole copies of their events' text
        if layout == "kineto":
            path, meta = build_scaled_text(src, target, out_dir)
        else:
            path, meta, _trace = build_scaled(src, None, target, out_dir)
        if meta["copies"] == copies:
            break
        target *= copies / meta["copies"]
    return path.resolve()


def summary(r: dict[str, Any]) -> str:
    """The figures of one input as text."""
    return "\n".join([
        f"{Path(r['trace']).name}, {r['raw_mb']:.1f} MB raw JSON; wall = median of {r['repeat']} "
        f"runs; page {r['page_mb']:.2f} MB",
        f"{tool_line('traceaug report', r, 'traceaug')}   CPU {r['traceaug_cpu_s']:.2f} s"
        f" (runs: {runs_text(r['traceaug_cpus_s'])})",
        f"{tool_line('HTA analyses', r, 'hta')}   CPU {r['hta_cpu_s']:.2f} s"
        f" (runs: {runs_text(r['hta_cpus_s'])})",
        f"{ratio_line(r['speed_ratio'], TARGET_SPEED_RATIO, ' wall')}; {r['cpu_ratio']:.2f}x in CPU "
        f"seconds; load average {r['load_average']:.1f}"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool (median wall time)")
    parser.add_argument("--trace", type=Path, action="append",
                        help="a trace or a directory of ranks; repeatable (default: A100 6 streams)")
    parser.add_argument("--scaled", type=int, metavar="N",
                        help="also the A100 6-stream trace N times end to end (run once)")
    parser.add_argument("--layout", choices=("kineto", "compact"), default="kineto",
                        help="the scaled trace's text: the profiler's own, or orjson's compact")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT,
                        help="where the scaled trace is built (and reused)")
    parser.add_argument("--phases", action="store_true",
                        help="only print where one report run spends its time, per phase")
    args = parser.parse_args()
    inputs = [(t, max(args.repeat, 1)) for t in args.trace or [TRACE]]
    for trace, _ in inputs:
        if not trace.exists():
            sys.exit(f"error: {trace} not found (../shared/traces is needed)")
    if args.phases:
        print("\n\n".join(phases(trace) for trace, _ in inputs))
        return 0
    if args.scaled:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        inputs.append((scaled(args.scaled, args.out_dir, args.layout), 1))
    results = [measure(trace, repeat) for trace, repeat in inputs]
    if args.json:
        print(json.dumps(results if len(results) > 1 else results[0], indent=1))
        return 0
    print("\n\n".join(summary(r) for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
