"""Benchmark ``traceaug diff`` against HTA's ``TraceDiff.compare_traces`` on the A100-vs-V100 pair.

Why: issue 4 asks traceaug diff to be at least 5x faster than HTA's TraceDiff. Each tool runs
alone in a fresh process; wall time is measured from here, peak RSS over the child's process
tree (sampled every 20 ms, worker processes included; at least the child's own VmHWM).
Wall time is the median of ``--repeat`` runs of each tool (3 by default), taken in turn.
Run: ``python bench/diff_vs_hta.py [--repeat N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
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
    warm_up,
)

PAIR = REPO_ROOT.parent / "shared" / "traces" / "kineto" / "diff" / "a100_vs_v100"
TARGET_SPEED_RATIO = 5.0
TIMEOUT_S = 3600

TRACEAUG_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from traceaug.cli import main
main(["diff", sys.argv[1], sys.argv[2], "--format", "csv"], standalone_mode=False)
print(TAG + json.dumps({"total_s": time.perf_counter() - t0, "peak_rss_kb": peak_kb()}))
"""

# HTA reads every trace in a directory: give each side its own directory of symlinks.
HTA_CHILD = """
import json, logging, os, sys, time, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_diff import LabeledTrace, TraceDiff
sides = []
for label, src, work in (("c", sys.argv[1], sys.argv[3]), ("t", sys.argv[2], sys.argv[4])):
    for name in os.listdir(src):
        os.symlink(os.path.join(src, name), os.path.join(work, name))
    sides.append(LabeledTrace(label, trace_dir=work))
comp = TraceDiff.compare_traces(sides[0], sides[1])
print(TAG + json.dumps({"total_s": time.perf_counter() - t0, "peak_rss_kb": peak_kb(), "rows": len(comp)}))
"""


def measure(repeat: int) -> dict[str, Any]:
    """Wall time (median of ``repeat`` runs of each tool, taken in turn) and peak RSS (the
    largest seen) of both tools on the pair."""
    a, b = PAIR / "control", PAIR / "test"
    ta_walls, hta_walls, ta_peaks, hta_peaks = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        warm_up(work)
        for i in range(repeat):
            with bytecode_cached():
                wall, _ = run([sys.executable, "-m", "traceaug", "diff", str(a), str(b), "--format",
                               "csv"], TIMEOUT_S, "traceaug diff")
                _, out, tree = run_tree([sys.executable, "-c", child_script(TRACEAUG_CHILD), str(a),
                                         str(b)], TIMEOUT_S, "traceaug diff (in-process)")
            ta_walls.append(wall)
            ta_peaks.append(max(tagged(out, "the traceaug child")["peak_rss_kb"], tree))
            sides = (work / f"c{i}", work / f"t{i}")  # HTA reads every trace in its directories
            for side in sides:
                side.mkdir()
            wall, out, tree = run_tree([sys.executable, "-c", child_script(HTA_CHILD), str(a), str(b),
                                        *map(str, sides)], TIMEOUT_S, "HTA TraceDiff")
            hta_walls.append(wall)
            hta_peaks.append(max(tagged(out, "the HTA child")["peak_rss_kb"], tree))
    raw = sum(len(__import__("gzip").open(p).read()) for p in (*a.iterdir(), *b.iterdir())) / MB
    ta_wall, hta_wall = statistics.median(ta_walls), statistics.median(hta_walls)
    return {"raw_mb": raw, "repeat": repeat, "traceaug_wall_s": ta_wall, "traceaug_walls_s": ta_walls,
            "traceaug_peak_mb": max(ta_peaks) / 1024,
            "hta_wall_s": hta_wall, "hta_walls_s": hta_walls, "hta_peak_mb": max(hta_peaks) / 1024,
            "speed_ratio": hta_wall / ta_wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool (median wall time)")
    args = parser.parse_args()
    if not PAIR.exists():
        sys.exit(f"error: {PAIR} not found (../shared/traces is needed)")
    r = measure(max(args.repeat, 1))
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    print(f"A100-vs-V100 pair, {r['raw_mb']:.1f} MB raw JSON in all; wall = median of {r['repeat']} runs")
    print(tool_line("traceaug diff", r, "traceaug"))
    print(tool_line("HTA TraceDiff", r, "hta"))
    print(ratio_line(r["speed_ratio"], TARGET_SPEED_RATIO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
