"""Benchmark ``traceaug critical-path`` against HTA's critical path analysis and overlay.

Why: ``traceaug critical-path IN OUT`` replaces HolisticTraceAnalysis's
``TraceAnalysis.critical_path_analysis(rank, annotation="", instance_id=None)`` followed by
``overlay_critical_path_analysis(...)`` (the path drawn on a copy of the trace). Targets, on
the A100 6-stream trace scaled x10: HTA wall time / traceaug wall time >= 10x and traceaug peak
RSS / HTA peak RSS <= 0.5x. The simple_add trace (HTA's own critical path example) is
measured too.

Each measurement runs in a fresh Python subprocess, one at a time (bench/counters_vs_hta.py's
helpers): traceaug's wall time is ``python -m traceaug critical-path IN OUT.json.gz`` seen
from this process, its peak RSS that of a child running the CLI in-process (whole process
tree, pass-1 workers included); HTA runs in a child on a directory holding only a symlink to
IN (HTA reads every trace of its ``trace_dir``) and reports its own VmHWM and phase times.
Each child also reports its CPU seconds (its own and its workers'), which other work on a
shared machine disturbs less than wall time.

HTA is its newest release (``traceinsight`` 0.6.1), which runs on pandas 3 as it is (0.5.0 needed
a ``DataFrame.drop`` shim). The HTA child prints the path length it found, so the run is checked
against HTA's known answer on simple_add: 41,435,012 us with 0.6.1, whose kernel -> next kernel
edge has the gap bound traceaug uses (0.5.0, without it, gave 41,435,234 us).

Both outputs are gzip JSON. The scaled trace comes from bench/load_throughput.py's
``build_scaled`` (uncompressed .json in --out-dir, reused when present), ``--copies`` copies
of the input laid end to end.

Usage::

    python bench/critical_path_vs_hta.py [--copies 10] [--out-dir bench/out] [--json]
                                         [--skip-scaled] [--skip-hta-scaled]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counters_vs_hta import bytecode_cached, child_script, run, table, tagged, warm_up  # noqa: E402
from load_throughput import DEFAULT_OUT, MB, SHARED, build_scaled, run_tree  # noqa: E402

SIMPLE = SHARED / "traces" / "kineto" / "a100_simple_add_cuda_sync.json.gz"
SIX_STREAMS = SHARED / "traces" / "kineto" / "a100_rank0_of16_6streams.json.gz"
TARGET_SPEED_RATIO = 10.0
TARGET_RSS_RATIO = 0.5
TIMEOUT_S = 4 * 3600
# CPU seconds of the child and the children it waited for: a figure the other work on a
# shared machine disturbs less than wall time.
CPU_S = """
def cpu_s():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
"""

TRACEAUG_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from traceaug.cli import main
main(["critical-path", sys.argv[1], sys.argv[2]], standalone_mode=False)
print(TAG + json.dumps({"total_s": time.perf_counter() - t0, "peak_rss_kb": peak_kb(),
                        "cpu_s": cpu_s()}))
"""

# argv: IN WORKDIR. HTA on a directory holding only IN; pandas 3's drop(axis=1, columns=) patched.
HTA_CHILD = """
import json, os, sys, time
t0 = time.perf_counter()
src, work = sys.argv[1], sys.argv[2]
os.symlink(src, os.path.join(work, os.path.basename(src)))
from hta.trace_analysis import TraceAnalysis
t_import = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=work)
t_parse = time.perf_counter()
rank = sorted(analyzer.t.traces)[0]
cp, ok = analyzer.critical_path_analysis(rank=rank, annotation="", instance_id=None)
t_path = time.perf_counter()
length = sum(cp.edges[u, v]["weight"] for u, v in zip(cp.critical_path_nodes, cp.critical_path_nodes[1:]))
out = analyzer.overlay_critical_path_analysis(rank, cp, output_dir=os.path.join(work, "out"),
                                              only_show_critical_events=False, show_all_edges=False)
t_done = time.perf_counter()
print(TAG + json.dumps({"import_s": t_import - t0, "parse_s": t_parse - t_import,
                        "path_s": t_path - t_parse, "overlay_s": t_done - t_path,
                        "total_s": t_done - t0, "peak_rss_kb": peak_kb(), "ok": bool(ok),
                        "cpu_s": cpu_s(),
                        "length_us": float(length), "out": out}))
"""


@bytecode_cached()
def measure_traceaug(src: Path, work: Path) -> dict[str, Any]:
    out = work / "traceaug_out.json.gz"
    wall, stdout = run([sys.executable, "-m", "traceaug", "critical-path", str(src), str(out)],
                       TIMEOUT_S, f"traceaug critical-path on {src.name}")
    length = next((line for line in stdout.splitlines() if line.startswith("critical path")), "")
    _, stdout, tree_kb = run_tree([sys.executable, "-c", child_script(CPU_S + TRACEAUG_CHILD), str(src),
                                   str(work / "traceaug_rss.json.gz")], TIMEOUT_S,
                                  f"traceaug (in-process) on {src.name}")
    child = tagged(stdout, "the traceaug child")
    return {"wall_s": wall, "peak_rss_mb": max(child["peak_rss_kb"], tree_kb) * 1024 / MB,
            "cpu_s": child["cpu_s"], "summary": length, "out_gz_mb": out.stat().st_size / MB}


def measure_hta(src: Path, work: Path) -> dict[str, Any]:
    work.mkdir()
    wall, stdout, tree_kb = run_tree([sys.executable, "-c", child_script(CPU_S + HTA_CHILD), str(src),
                                      str(work)], TIMEOUT_S, f"HTA on {src.name}")
    child = tagged(stdout, "the HTA child")
    return {"wall_s": wall, "peak_rss_mb": max(child["peak_rss_kb"], tree_kb) * 1024 / MB,
            **{k: child[k] for k in ("import_s", "parse_s", "path_s", "overlay_s", "ok",
                                     "length_us", "cpu_s")},
            "out_gz_mb": Path(child["out"]).stat().st_size / MB if child["out"] else 0.0}


def compare(label: str, src: Path, hta: bool, progress) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="critical_path_vs_hta_") as tmp:
        print(f"  {label}: traceaug ...", file=progress, flush=True)
        ta = measure_traceaug(src, Path(tmp))
        print(f"  {label}: HTA ... (traceaug took {ta['wall_s']:.1f} s)", file=progress, flush=True)
        h = measure_hta(src, Path(tmp) / "hta") if hta else None
    out: dict[str, Any] = {"trace": label, "path": str(src), "raw_mb": _raw_mb(src), "traceaug": ta,
                           "hta": h}
    if h is not None:
        out["speed_ratio"] = h["wall_s"] / ta["wall_s"]
        out["rss_ratio"] = ta["peak_rss_mb"] / h["peak_rss_mb"]
        out["cpu_ratio"] = h["cpu_s"] / ta["cpu_s"]
        out["pass"] = {"speed": out["speed_ratio"] >= TARGET_SPEED_RATIO,
                       "rss": out["rss_ratio"] <= TARGET_RSS_RATIO}
    return out


def _raw_mb(path: Path) -> float:
    import gzip

    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    size = 0
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
        while chunk := f.read(16 * MB):
            size += len(chunk)
    return size / MB


def report(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        h = r["hta"]
        rows.append([r["trace"], f"{r['raw_mb']:.1f}", f"{r['traceaug']['wall_s']:.2f}",
                     f"{h['wall_s']:.2f}" if h else "-",
                     f"{r['speed_ratio']:.1f}x" if h else "-",
                     ("PASS" if r["pass"]["speed"] else "MISS") if h else "-",
                     f"{r['traceaug']['peak_rss_mb']:.0f}", f"{h['peak_rss_mb']:.0f}" if h else "-",
                     f"{r['rss_ratio']:.2f}x" if h else "-",
                     ("PASS" if r["pass"]["rss"] else "MISS") if h else "-"])
    lines = table(["trace", "raw MB", "traceaug s", "HTA s", "speed HTA/ta",
                   f">={TARGET_SPEED_RATIO:g}x", "traceaug RSS MB", "HTA RSS MB", "RSS ta/HTA",
                   f"<={TARGET_RSS_RATIO:g}x"], rows)
    lines.append("")
    for r in results:
        cpu = (f"; CPU s: traceaug {r['traceaug']['cpu_s']:.2f}, HTA {r['hta']['cpu_s']:.2f} "
               f"({r['cpu_ratio']:.1f}x)" if r["hta"] else "")
        lines.append(f"{r['trace']}: traceaug {r['traceaug']['summary']}{cpu}")
        if r["hta"]:
            h = r["hta"]
            lines.append(f"{r['trace']}: HTA path {h['length_us']:,.0f} us (ok={h['ok']}); "
                         f"import {h['import_s']:.1f} s, parse {h['parse_s']:.1f} s, path "
                         f"{h['path_s']:.1f} s, overlay {h['overlay_s']:.1f} s")
    lines.append(f"wall = process start to exit seen from the parent; RSS = peak of the child's "
                 f"process tree; python {sys.version.split()[0]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=10, help="copies of the 6-stream trace")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="where the scaled trace goes")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--skip-scaled", action="store_true", help="only the simple_add trace")
    parser.add_argument("--skip-hta-scaled", action="store_true",
                        help="traceaug alone on the scaled trace (HTA takes a minute or more)")
    args = parser.parse_args(argv)
    for path in (SIMPLE, SIX_STREAMS):
        if not path.is_file():
            sys.exit(f"error: input trace not found: {path}")
    progress = sys.stderr if args.json else sys.stdout
    inputs = [("simple_add", SIMPLE, True)]
    if not args.skip_scaled:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        print(f"preparing the 6-stream trace x{args.copies} ...", file=progress, flush=True)
        one = _raw_mb(SIX_STREAMS)
        scaled, meta = None, {"copies": 0}
        target = one * args.copies
        for _ in range(4):  # build_scaled rounds to whole copies of its re-serialized events
            scaled, meta, _trace = build_scaled(SIX_STREAMS, None, target, args.out_dir)
            if meta["copies"] == args.copies:
                break
            target *= args.copies / meta["copies"]
        inputs.append((f"6streams x{meta['copies']}", scaled.resolve(), not args.skip_hta_scaled))
    with tempfile.TemporaryDirectory(prefix="critical_path_vs_hta_warm_") as tmp:
        warm_up(Path(tmp))
    print("measuring, each tool in a fresh subprocess, one at a time ...", file=progress, flush=True)
    results = [compare(label, path, hta, progress) for label, path, hta in inputs]
    if args.json:
        print(json.dumps({"results": results}, indent=1))
    else:
        print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
