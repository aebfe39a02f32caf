"""Benchmark ``traceaug patterns`` against HTA's ``get_frequent_cuda_kernel_sequences`` on one trace.

Why: issue 16 asks ``traceaug patterns IN OUT --operator OP`` to be at least 10x faster than
HolisticTraceAnalysis's ``TraceAnalysis(trace_dir=DIR).get_frequent_cuda_kernel_sequences(OP,
OUT_DIR)`` (which parses the trace, groups whole kernel sequences under OP and writes an overlaid
trace). Each tool runs alone in a fresh process, in turn, ``--repeat`` times: wall time from this
process (the median), peak RSS of the child's process tree (sampled every 20 ms, pass-1 workers
included; at least the child's own VmHWM; the largest seen). traceaug's wall time is the CLI's
(``python -m traceaug patterns IN OUT.json.gz --operator OP``); its peak RSS comes from a child
running ``traceaug.cli.main`` in-process. traceaug also mines every sub-sequence and every
stream, which HTA does not; HTA writes its overlay uncompressed-then-gzip as it always does.

HTA's newest release (``traceinsight`` 0.6.1) runs with ``HTA_DISABLE_NS_ROUNDING=1`` (without it, it
crashes on ns-resolution traces: FIELD_NOTES §5). It runs on pandas 3 as it is: the shim HTA 0.5.0
needed (its call-stack builder gave ``np.unique(axis=0)`` an object array) is gone.

Usage: ``python bench/patterns_vs_hta.py [--trace PATH] [--operator OP] [--repeat N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counters_vs_hta import (  # noqa: E402
    MB,
    REPO_ROOT,
    bytecode_cached,
    child_script,
    ratio_line,
    run,
    run_tree,
    tagged,
    tool_line,
)

TRACE = REPO_ROOT.parent / "shared" / "traces" / "kineto" / "a100_nccl_rank0_of2.json.gz"
OPERATOR = "aten::conv2d"
TARGET_SPEED_RATIO = 10.0
TIMEOUT_S = 3600
WARM_TRACE = REPO_ROOT / "testdata" / "patterns_planted.json"

TRACEAUG_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from traceaug.cli import main
main(["patterns", sys.argv[1], sys.argv[2], "--operator", sys.argv[3], "--format", "json"],
     standalone_mode=False)
print(TAG + json.dumps({"total_s": time.perf_counter() - t0, "peak_rss_kb": peak_kb()}))
"""

# argv: IN WORKDIR OUTDIR OP. HTA reads every trace in its directory: IN is symlinked into WORKDIR.
HTA_CHILD = """
import json, os, sys, time, warnings, logging
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
t0 = time.perf_counter()
src, work, out, op = sys.argv[1:5]
os.symlink(src, os.path.join(work, os.path.basename(src)))
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=work)
df = analyzer.get_frequent_cuda_kernel_sequences(operator_name=op, output_dir=out, visualize=False)
print(TAG + json.dumps({"total_s": time.perf_counter() - t0, "peak_rss_kb": peak_kb(),
                        "counts": [int(c) for c in df["count"]], "outputs": os.listdir(out)}))
"""


def measure(trace: Path, operator: str, repeat: int) -> dict[str, Any]:
    """Median wall time and largest peak RSS of each tool over ``repeat`` runs taken in turn."""
    env = {**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"}
    os.environ.update(env)  # run_tree passes the environment on
    ta_walls, hta_walls, ta_peaks, hta_peaks = [], [], [], []
    hta_counts: list[int] = []
    ours: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with bytecode_cached():  # the wasm module and traceaug's bytecode ready before timing
            run([sys.executable, "-m", "traceaug", "patterns", str(WARM_TRACE), str(work / "warm.json")],
                TIMEOUT_S, "traceaug warm-up")
        for i in range(repeat):
            out = work / f"ta{i}.json.gz"
            with bytecode_cached():
                wall, stdout = run([sys.executable, "-m", "traceaug", "patterns", str(trace), str(out),
                                    "--operator", operator, "--format", "json"], TIMEOUT_S,
                                   "traceaug patterns")
                _, out_text, tree = run_tree([sys.executable, "-c", child_script(TRACEAUG_CHILD),
                                              str(trace), str(work / f"tb{i}.json.gz"), operator],
                                             TIMEOUT_S, "traceaug patterns (in-process)")
            ta_walls.append(wall)
            ours = [r["count"] for r in json.loads(stdout)["patterns"] if r["scope"] == "whole"]
            ta_peaks.append(max(tagged(out_text, "the traceaug child")["peak_rss_kb"], tree))
            hwork, hout = work / f"h{i}", work / f"ho{i}"
            hwork.mkdir()
            hout.mkdir()
            wall, out_text, tree = run_tree([sys.executable, "-c", child_script(HTA_CHILD), str(trace),
                                             str(hwork), str(hout), operator], TIMEOUT_S,
                                            "HTA get_frequent_cuda_kernel_sequences")
            hta_walls.append(wall)
            got = tagged(out_text, "the HTA child")
            hta_peaks.append(max(got["peak_rss_kb"], tree))
            hta_counts = got["counts"]
    import gzip

    raw = len(gzip.open(trace).read()) / MB
    ta_wall, hta_wall = statistics.median(ta_walls), statistics.median(hta_walls)
    return {"trace": str(trace), "operator": operator, "raw_mb": raw, "repeat": repeat,
            "traceaug_wall_s": ta_wall, "traceaug_walls_s": ta_walls,
            "traceaug_peak_mb": max(ta_peaks) / 1024, "hta_wall_s": hta_wall,
            "hta_walls_s": hta_walls, "hta_peak_mb": max(hta_peaks) / 1024,
            "speed_ratio": hta_wall / ta_wall, "hta_whole_counts": hta_counts,
            "traceaug_whole_counts": ours}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--operator", default=OPERATOR)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool (median wall time)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if not args.trace.exists():
        sys.exit(f"error: {args.trace} not found (../shared/traces is needed)")
    r = measure(args.trace, args.operator, max(args.repeat, 1))
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    print(f"{Path(r['trace']).name} ({r['raw_mb']:.1f} MB raw), --operator {r['operator']}; "
          f"wall = median of {r['repeat']} runs")
    print(tool_line("traceaug patterns", r, "traceaug"))
    print(tool_line("HTA frequent seqs", r, "hta"))
    print(f"whole-sequence counts: HTA {r['hta_whole_counts']} (last step dropped), "
          f"traceaug {r['traceaug_whole_counts']}")
    print(ratio_line(r["speed_ratio"], TARGET_SPEED_RATIO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
