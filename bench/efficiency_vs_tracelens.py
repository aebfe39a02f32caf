"""Benchmark ``traceaug efficiency`` against TraceLens' ``TraceLens_generate_perf_report_pytorch`` on the
same traces, and check that their GEMM FLOPs agree.

Why: issue 35 asks ``efficiency`` to answer what TraceLens' perf report answers (FLOPs, bytes, TFLOP/s,
TB/s per op from the recorded shapes) at >= 10x its speed and <= 0.5x its peak memory, on the H100 Qwen
trace and on the A100 6-stream trace scaled x10.

TraceLens is installed from its public repository (github.com/AMD-AGI/TraceLens) into a separate venv,
never the project's (``--tracelens`` names its ``TraceLens_generate_perf_report_pytorch``; default
/work/tlvenv/bin/...); the tests never use it. Each tool runs in a fresh process, one at a time, timed
from this process (start-up and imports count) with the peak RSS of its whole process tree sampled
every 20 ms (``load_throughput.run_tree``). traceaug prints its tables as CSV (no OUT), TraceLens writes
its CSVs into a temporary directory. The x10 trace comes from ``load_throughput.build_scaled_text``
(copies of the trace one after another, ids moved; cached in --out-dir).

Check: the sum over TraceLens' GEMM.csv rows of ``GFLOPS_first`` x ``name_count`` against traceaug's
gemm family FLOPs (TraceLens counts an addmm's bias as we do).

Usage::

    python bench/efficiency_vs_tracelens.py [--tracelens PATH] [--out-dir bench/out] [--skip-scaled]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_throughput import DEFAULT_OUT, MB, SHARED, build_scaled_text, run_tree  # noqa: E402

QWEN = SHARED / "traces" / "kineto" / "h100_qwen05b_inference.json.gz"
A100 = SHARED / "traces" / "kineto" / "a100_rank0_of16_6streams.json.gz"
TRACELENS = Path("/work/tlvenv/bin/TraceLens_generate_perf_report_pytorch")
TIMEOUT_S = 3 * 3600


def traceaug_run(trace: Path) -> dict:
    cmd = [sys.executable, "-m", "traceaug", "efficiency", str(trace), "--format", "csv"]
    wall, out, peak = run_tree(cmd, TIMEOUT_S, "traceaug efficiency")
    block = out.split("# families\n", 1)[1].split("\n# ", 1)[0]
    gemm = sum(float(r["flops"]) for r in csv.DictReader(io.StringIO(block)) if r["family"] == "gemm")
    return {"wall_s": wall, "peak_mb": peak * 1024 / MB, "gemm_flops": gemm}


def tracelens_run(trace: Path, tool: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wall, _, peak = run_tree([str(tool), "--profile_json_path", str(trace), "--output_csvs_dir", tmp],
                                 TIMEOUT_S, "TraceLens perf report")
        gemm_csv = Path(tmp) / "GEMM.csv"
        rows = list(csv.DictReader(gemm_csv.open())) if gemm_csv.exists() else []
    gemm = sum(float(r["GFLOPS_first"]) * 1e9 * int(r["name_count"]) for r in rows)
    return {"wall_s": wall, "peak_mb": peak * 1024 / MB, "gemm_flops": gemm}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tracelens", type=Path, default=TRACELENS)
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    p.add_argument("--skip-scaled", action="store_true")
    args = p.parse_args(argv)
    if not args.tracelens.exists():
        sys.exit(f"error: {args.tracelens}: no TraceLens (install it from github.com/AMD-AGI/TraceLens "
                 "into its own venv)")
    traces = [("H100 Qwen", QWEN), ("A100 6-stream", A100)]
    if not args.skip_scaled:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        raw = len(gzip.decompress(A100.read_bytes())) / MB
        scaled, _ = build_scaled_text(A100, 10 * raw, args.out_dir)
        traces.append(("A100 6-stream x10", scaled))
    print("| trace | raw MB | TraceLens s / MB | traceaug s / MB | faster | memory "
          "| GEMM FLOPs TraceLens / traceaug |")
    print("| --- | --: | --: | --: | --: | --: | --: |")
    for label, trace in traces:
        size = trace.stat().st_size / MB
        if trace.suffix == ".gz":
            size = len(gzip.decompress(trace.read_bytes())) / MB
        ours = traceaug_run(trace)
        theirs = tracelens_run(trace, args.tracelens)
        agree = theirs["gemm_flops"] / ours["gemm_flops"] if ours["gemm_flops"] else float("nan")
        print(f"| {label} | {size:.1f} | {theirs['wall_s']:.1f} / {theirs['peak_mb']:.0f} | "
              f"{ours['wall_s']:.1f} / {ours['peak_mb']:.0f} | {theirs['wall_s'] / ours['wall_s']:.1f}x | "
              f"{ours['peak_mb'] / theirs['peak_mb']:.2f}x | {agree:.6f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
