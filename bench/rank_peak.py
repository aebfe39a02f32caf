"""Peak memory of one rank's load, by load kind and trace size: the figures behind the job
pool's size (``job.executor.ENGINE_BASE`` / ``PEAK_PER_BYTE``).

Why: the local pool runs ``min(cores, ranks, 0.8 x available RAM / a rank's expected peak)``
processes (issue 25), the peak estimated from the rank's raw size and its load kind. Too low
an estimate runs the machine out of memory on large ranks; too high a one leaves cores idle.
Each load runs in a fresh child process as a pool or Dask worker runs it (pass 1 in the
process: ``workers=0``; no progress) and then answers one query ("load"), or runs the job's
task for that kind ("task": ``job.tasks`` / a rewriter's rank, which hold more than the load:
diff two traces, the critical path its graph); its peak is the child's VmHWM (``ru_maxrss``
would carry the parent's over exec). The base is the same child on a 71-event trace (the
engine, numpy, the wasm module), and again in a warm worker (two ranks of it first: a worker
keeps the engine's start image, ``engine.wasm_instance``, ~6 MB, and its second start peaks
higher): the pool's base covers the warm one; a kind's factor is the largest over the traces and runs of
(peak - base) / raw bytes. Traces are read as plain JSON; the A100 one also gz.
Run: ``python bench/rank_peak.py [--kinds gpu_steps,collectives] [--json]`` (about 2 min on
2 cores).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
KINETO = REPO_ROOT.parent / "shared" / "traces" / "kineto"
TINY = KINETO / "a100_triton.json.gz"
TRACES = ("a100_nccl_rank0_of2.json.gz", "v100_ns_resolution.json.gz",
          "a100_rank0_of16_6streams.json.gz", "vllm_decode_cudagraph.json.gz")
KINDS = ("full", "analysis", "sync", "ops", "patterns", "gpu", "gpu_steps", "collectives",
         "job_path")
MB = 1_000_000

CHILD = """
import os, sys
from pathlib import Path
path, kind, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
if sys.argv[5:] == ["warm"]:  # a warm worker: two ranks done (it keeps the engine's start image)
    os.environ["TRACEAUG_POOL_WORKER"] = "1"
    from traceaug.job import tasks as warm
    from traceaug.read.ranks import TraceFile as WarmFile
    for _ in range(2):
        warm.collectives_rank(WarmFile(path, 0), {})
if mode == "load":
    from traceaug.trace import Trace
    with Trace(path, kind=kind, workers=0, progress=False) as t:
        t.columns("SELECT COUNT(*) AS n FROM slice")
else:  # the job's task for this kind, as a pool worker runs it (embedded: pass 1 here)
    os.environ["TRACEAUG_POOL_WORKER"] = "1"
    from traceaug.job import tasks
    from traceaug.read.ranks import TraceFile
    f = TraceFile(path, 0)
    if kind in TASKS:
        getattr(tasks, TASKS[kind])(f, {})
    elif kind == "ops":  # diff: A's rank and B's, both loaded in the task
        tasks.diff_rank(f, {}, b={0: f}, compare={"by": "name", "device": "all", "step": None,
                        "step_a": None, "step_b": None, "step_index": None, "threshold": 5.0})
    else:  # a rewriter's rank: load, compute, write its copy
        import importlib
        from traceaug.rewrite import pipeline
        (module, name), options = REWRITERS[kind]
        rewriter = getattr(importlib.import_module(f"traceaug.commands.{module}"), name)
        pipeline._task(rewriter, pipeline.Target(f, Path(sys.argv[4]) / path.name), options,
                       None, False)
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print(int(line.split()[1]) * 1024)
"""
# The task each kind's job runs (``job.tasks``, ``rewrite.pipeline``), with the CLI's defaults.
TASKS = {"gpu_steps": "gpu_rank", "collectives": "report_rank", "analysis": "info_rank",
         "job_path": "job_path_rank"}
REWRITERS = {
    "gpu": (("counters", "COUNTERS"), {"series": ["bandwidth", "queue"], "style": "traceaug"}),
    "sync": (("critical_path", "CRITICAL_PATH"), {"step": None, "annotation": None, "instance": 0,
                                             "all_edges": False, "hta_weights": False,
                                             "max_gap_us": 1500, "top": 10}),
    "patterns": (("patterns", "PATTERNS"), {"operator": None, "min_len": 3, "top_k": 5}),
}
GZ_TOO = "a100_rank0_of16_6streams.json.gz"  # the job bench's rank: loaded gz as well


def peak(path: Path, kind: str, mode: str = "load", work: Path | None = None,
         warm: bool = False) -> int:
    """Bytes: the child's peak RSS loading ``path`` with ``kind`` (``mode`` "task": running
    the job's task for that kind; ``work``: where a rewriter writes; ``warm``: after two ranks
    of ``path``, as a pool worker that has run some)."""
    child = f"TASKS = {TASKS!r}\nREWRITERS = {REWRITERS!r}\n" + CHILD
    out = subprocess.run([sys.executable, "-c", child, str(path), kind, mode, str(work)]
                         + ["warm"] * warm, cwd=REPO_ROOT, capture_output=True, text=True,
                         check=True)
    return int(out.stdout.split()[-1])


def measure(kinds: tuple[str, ...], work: Path) -> dict:
    base = peak(TINY, "analysis")
    warm = peak(TINY, "analysis", warm=True)
    rows = []
    for name in TRACES:
        gz = KINETO / name
        if not gz.exists():
            continue
        raw = work / name.removesuffix(".gz")
        raw.write_bytes(gzip.open(gz).read())
        size = raw.stat().st_size
        runs = [(raw, "load"), (raw, "task")] + ([(gz, "load")] if name == GZ_TOO else [])
        for kind in kinds:
            for path, mode in runs:
                if mode == "task" and kind == "full":
                    continue  # no job task loads everything
                out = work / "out"
                out.mkdir(exist_ok=True)
                p = peak(path, kind, mode, out)
                shutil.rmtree(out)
                rows.append({"trace": name, "input": "gz" if path == gz else "raw", "kind": kind,
                             "mode": mode, "raw_mb": size / MB, "file_mb": path.stat().st_size / MB,
                             "peak_mb": p / MB, "per_raw_byte": (p - base) / size})
        raw.unlink()
    factors = {k: max(r["per_raw_byte"] for r in rows if r["kind"] == k) for k in kinds}
    return {"base_mb": base / MB, "warm_base_mb": warm / MB, "rows": rows, "factors": factors}


def render(found: dict) -> str:
    lines = [f"base (engine, 71-event trace): {found['base_mb']:.0f} MB; in a warm worker "
             f"(two ranks before, its engine image kept): {found['warm_base_mb']:.0f} MB", "",
             f"{'trace':34} {'input':5} {'kind':11} {'run':4} {'raw_MB':>6} {'file_MB':>7} "
             f"{'peak_MB':>7} {'(peak-base)/raw':>15}"]
    for r in found["rows"]:
        lines.append(f"{r['trace']:34} {r['input']:5} {r['kind']:11} {r['mode']:4} "
                     f"{r['raw_mb']:6.1f} {r['file_mb']:7.1f} {r['peak_mb']:7.0f} "
                     f"{r['per_raw_byte']:15.2f}")
    lines += ["", "factor per kind (largest (peak - base) / raw byte, load or task): " +
              ", ".join(f"{k} {v:.2f}" for k, v in found["factors"].items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        found = measure(tuple(args.kinds.split(",")), Path(work))
    print(json.dumps(found, indent=1) if args.json else render(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
