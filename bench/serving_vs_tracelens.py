"""Benchmark ``traceaug report --capture`` against TraceLens' inference perf report on serving traces.

TraceLens (github:AMD-AGI/TraceLens, MIT; not on PyPI) is installed apart, in its own venv, and run as
``TraceLens.Reporting.generate_perf_report_pytorch_inference --profile_json_path T --capture_folder C
--output_xlsx_path X``: its report merges the graph capture into the replay trace, as ``--capture`` does.
Inputs: the shared vLLM (MI300X, one decode step, 421 graph-replayed kernels) and SGLang (Qwen3-8B decode)
traces with their ``capture_traces/``, and the vLLM decode step concatenated ``--copies`` times (20 by
default: each copy shifted past the one before, correlation / external / flow ids offset), written to
``--out-dir`` once. Each tool runs alone in a fresh process, measured as ``bench/job_scale.py`` measures
(wall time, peak RSS of the process tree sampled every 20 ms), one run each.
Why: issue 36 asks ``report`` on these inputs to be >= 10x faster than TraceLens. Measured on 2 idle cores
(2026-11-29, one run each, bytecode compiled; wall s / peak MB of the process tree, its prefetch children
included): vLLM step 0.27 / 136 vs 4.01 / 424 (15.0x), SGLang step 0.27 / 112 vs 2.39 / 265 (8.9x), vLLM x20
0.53 / 158 vs 35.48 / 2301 (67.0x): on one step, start-up (interpreter, numpy, engine) is most of traceaug's
time. On a machine loaded by other work the ratios fall (the prefetch children get no core of their own).
Run: ``python bench/serving_vs_tracelens.py --tracelens-python VENV/bin/python --tracelens-path DIR
[--copies 20] [--out-dir DIR] [--json]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from job_scale import run_measured  # noqa: E402
from load_throughput import SHARED  # noqa: E402

INFERENCE = SHARED / "traces" / "kineto" / "inference"
VLLM = (INFERENCE / "vllm_decode_full" / "graph_execution.json.gz",
        INFERENCE / "vllm_decode_full" / "capture_traces")
SGLANG = (INFERENCE / "sglang_decode" / "sglang_Qwen3-8B_decode.json.gz",
          INFERENCE / "sglang_decode" / "capture_traces")


def concatenated(src: Path, copies: int, out_dir: Path) -> Path:
    """``src``'s events ``copies`` times end to end (ids offset per copy), reused when written."""
    out = out_dir / f"{src.name.split('.')[0]}_x{copies}.json"
    if out.exists():
        return out
    data = orjson.loads(gzip.decompress(src.read_bytes()))
    events = data["traceEvents"]
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    span = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed) - min(float(e["ts"]) for e in timed)
    shift = span + 100.0
    merged = [e for e in events if e.get("ph") == "M"]
    for k in range(copies):
        for e in timed:
            e = dict(e, ts=round(float(e["ts"]) + k * shift, 3))
            if "id" in e:
                e["id"] = e["id"] + k * 10_000_000 if isinstance(e["id"], int) else e["id"]
            args = e.get("args")
            if args:
                args = dict(args)
                for key, step in (("correlation", 10_000_000), ("External id", 100_000_000)):
                    if isinstance(args.get(key), int):
                        args[key] += k * step
                e["args"] = args
            merged.append(e)
    partial = out.with_suffix(".partial")
    partial.write_bytes(orjson.dumps({**data, "traceEvents": merged}))
    partial.rename(out)
    return out


TRACELENS = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
             "runpy.run_module('TraceLens.Reporting.generate_perf_report_pytorch_inference', "
             "run_name='__main__')")


def measure(cases: list[tuple[str, Path, Path]], tl_python: str, tl_path: str) -> list[dict]:
    """Each case's run of both tools; both keep their compiled bytecode under a temporary prefix (a warm-up
    run of each first), as an installed package has it, whatever PYTHONDONTWRITEBYTECODE says."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")

        def ours(trace: Path, capture: Path) -> dict:
            return run_measured([sys.executable, "-m", "traceaug", "report", str(trace), "--capture",
                                 str(capture)])

        def theirs(trace: Path, capture: Path) -> dict:
            return run_measured([tl_python, "-c", TRACELENS, tl_path, "--profile_json_path", str(trace),
                                 "--capture_folder", str(capture), "--output_xlsx_path",
                                 str(Path(tmp) / "report.xlsx")])

        ours(*cases[0][1:]), theirs(*cases[0][1:])  # warm-up: bytecode compiled
        for label, trace, capture in cases:
            ours_r, theirs_r = ours(trace, capture), theirs(trace, capture)
            rows.append({"input": label, "traceaug_s": ours_r["wall_s"], "tracelens_s": theirs_r["wall_s"],
                         "speedup": theirs_r["wall_s"] / ours_r["wall_s"], "traceaug_mb": ours_r["tree_mb"],
                         "tracelens_mb": theirs_r["tree_mb"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracelens-python", required=True, help="The python of TraceLens' own venv.")
    ap.add_argument("--tracelens-path", required=True, help="TraceLens' source tree (its PYTHONPATH).")
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--out-dir", type=Path, default=Path(tempfile.gettempdir()) / "traceaug_serving_bench")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    cases = [("vLLM decode, 1 step", *VLLM), ("SGLang Qwen3-8B decode, 1 step", *SGLANG),
             (f"vLLM decode x{a.copies}", concatenated(VLLM[0], a.copies, a.out_dir), VLLM[1])]
    rows = measure(cases, a.tracelens_python, a.tracelens_path)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'input':34} {'traceaug s':>10} {'TraceLens s':>11} {'speedup':>8} {'traceaug MB':>11} "
          f"{'TraceLens MB':>12}")
    for r in rows:
        print(f"{r['input']:34} {r['traceaug_s']:10.2f} {r['tracelens_s']:11.2f} {r['speedup']:7.1f}x "
              f"{r['traceaug_mb']:11.0f} {r['tracelens_mb']:12.0f}")


if __name__ == "__main__":
    main()
