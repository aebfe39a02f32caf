"""Peak memory of one rank's load, by load kind and trace size: the figures behind the job
pool's size (``job.executor.ENGINE_BASE`` / ``PEAK_PER_BYTE``).

Why: the local pool runs ``min(cores, ranks, 0.8 x available RAM / a rank's expected peak)``
processes (issue 25), the peak estimated from the rank's raw size and its load kind. Too low
an estimate runs the machine out of memory on large ranks; too high a one leaves cores idle.
Each load runs in a fresh child process as a pool or Dask worker runs it (pass 1 in the
process: ``workers=0``; no progress) and then answers one query ("load"), or runs a task of that
kind (the ``compute`` of each command whose ``job.run.Work`` loads it, ``TASKS``, one rank here as in a
worker: they hold more than the load, diff two traces, the critical path its graph); its peak is
the child's VmHWM (``ru_maxrss`` would carry the parent's over exec). The base is the same child on
a 71-event trace (the engine, numpy, the wasm module), and again in a warm worker (two ranks of it
first: a worker keeps the engine's start image, ``engine.wasm_instance``, ~6 MB, and its second start
peaks higher): the pool's base covers the warm one; a kind's factor is the largest over the traces
and runs of (peak - base) / raw bytes. Traces are read as plain JSON; the A100 one also gz.
Run: ``python bench/rank_peak.py [--kinds gpu_steps,collectives] [--traces a.json.gz,...] [--json]``
(about 10 min on 2 cores for every kind).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
KINETO = REPO_ROOT.parent / "shared" / "traces" / "kineto"
TINY = KINETO / "a100_triton.json.gz"
TRACES = ("a100_nccl_rank0_of2.json.gz", "v100_ns_resolution.json.gz",
          "a100_rank0_of16_6streams.json.gz", "vllm_decode_cudagraph.json.gz",
          "h100_qwen05b_inference.json.gz")
MB = 1_000_000

# The commands whose work loads each kind (the job runner's ``Work`` as the command declares it, its CLI
# defaults; OUT a file in the run's directory): "task N" runs the N-th one's ``compute`` as a pool worker
# would; none for a kind no command's task loads alone (full, capture). A name: that ``WORKS`` task on
# its own, where the command refuses one file (job_path) or runs other work beside it (report, diff).
TASKS = {"analysis": (["info", "IN"],), "gpu_steps": (["breakdown", "IN"],), "gpu_ops": (["kernels", "IN"],),
         "collectives": (["collectives", "IN"],), "job_path": ("job_path",),
         "sync": (["critical-path", "IN", "OUT"],), "ops": ("ops",),
         "patterns": (["patterns", "IN", "OUT"],),
         "gpu": (["counters", "IN", "OUT"], ["serving", "IN", "OUT"]),
         "cupti": (["cupti", "IN"],), "capture": (),
         "sync_shapes": (["efficiency", "--replay", "IN"], ["critical-path", "--roofline", "IN", "OUT"],
                         ["whatif", "--roofline", "50", "IN"]),
         "efficiency": (["efficiency", "IN", "OUT"],), "efficiency_tables": (["efficiency", "IN"],),
         "report": (["report", "IN"],), "diff": ("diff",)}
OWN_TRACES = {"capture": ("inference/vllm_decode_full/capture_traces/"
                          "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",)}  # a kind's own


def works(path: Path) -> dict:
    """The tasks ``TASKS`` names, as ``critical-path --job`` / ``diff --explain``, ``report`` and ``diff``
    give each rank (CLI defaults)."""
    from traceaug.cli import main
    from traceaug.commands.diff import COMPARE, diff_rank
    from traceaug.job import parts
    from traceaug.job.run import Work

    given = main.get_command(None, "diff").make_context("diff", [str(path), str(path)]).params
    compare = {k: given[k] for k in COMPARE} | {"top": 10}
    views = {"trace": None, "pair": None, "top": 10}
    return {"job_path": Work("job_path", parts.job_path, {"scales": ()}),
            "ops": Work("ops", diff_rank, {"compare": compare, "views": views}, parts.open_pair),
            "diff": Work("diff", diff_rank, {"compare": compare, "views": views}, parts.open_pair)}


KINDS = ("full", *TASKS)


def child(path: Path, kind: str, mode: str, out: Path, warm: bool) -> int:
    """In a fresh process started as a pool worker: ``kind``'s load of ``path`` and one query ("load"),
    or the task of ``TASKS[kind][N]`` ("task N"); after two ranks of ``path`` if ``warm``; its VmHWM."""
    import traceaug.processes as processes
    import traceaug.runtime as runtime
    from traceaug.cli import main
    from traceaug.commands import load
    from traceaug.commands.declare import Call
    from traceaug.errors import TraceaugError
    from traceaug.job.run import JobOptions
    from traceaug.trace import Trace

    processes.child_start(runtime.Runtime().for_worker())

    def run(argv: list[str] | str) -> None:
        if isinstance(argv, str):
            from traceaug.job.run import Item, task
            from traceaug.read.ranks import TraceFile

            task(works(path)[argv], Item(0, TraceFile(path, 0), other=TraceFile(path, 0)), runtime.current())
            return
        name, *args = [{"IN": str(path), "OUT": str(out / path.name)}.get(a, a) for a in argv]
        ctx = main.get_command(None, name).make_context(name, args)
        try:
            load(name).compute(Call(load(name), ctx.params, JobOptions(no_cache=True, progress=False)))
        except TraceaugError as e:  # the command's verdict on the rank's result (no collectives)
            print(f"{name}: {e}", file=sys.stderr)

    for _ in range(2 if warm else 0):  # a warm worker: two ranks done (it keeps the engine's start image)
        run(TASKS["collectives"][0])
    if mode == "load":
        with Trace(path, kind=kind, workers=0, progress=False) as t:
            t.columns("SELECT COUNT(*) AS n FROM slice")
    else:
        run(TASKS[kind][int(mode.split()[1])])
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
                if line.startswith("VmHWM:"))


GZ_TOO = "a100_rank0_of16_6streams.json.gz"  # the job bench's rank: loaded gz as well


def peak(path: Path, kind: str, mode: str = "load", work: Path | None = None,
         warm: bool = False) -> int:
    """Bytes: the child's peak RSS loading ``path`` with ``kind`` (``mode`` "task": running
    the job's task for that kind; ``work``: where a rewriter writes; ``warm``: after two ranks
    of ``path``, as a pool worker that has run some)."""
    out = subprocess.run([sys.executable, __file__, "--child", str(path), kind, mode, str(work)]
                         + ["warm"] * warm, cwd=REPO_ROOT, capture_output=True, text=True,
                         env={**os.environ, "TRACEAUG_NO_CACHE": "1"})
    if out.returncode:
        raise RuntimeError(f"{path} {kind} {mode}: {out.stderr[-2000:]}")
    return int(out.stdout.split()[-1])


def measure(kinds: tuple[str, ...], work: Path, traces: tuple[str, ...] = TRACES) -> dict:
    base = peak(TINY, "analysis")
    warm = peak(TINY, "analysis", warm=True)
    rows = []
    for name in (*traces, *(t for k in kinds for t in OWN_TRACES.get(k, ()))):
        gz = KINETO / name
        if not gz.exists():
            continue
        raw = work / Path(name).name.removesuffix(".gz")
        raw.write_bytes(gzip.open(gz).read())
        size = raw.stat().st_size
        for kind in (k for k in kinds if name in traces or name in OWN_TRACES.get(k, ())):
            runs = [(raw, "load"), *((raw, f"task {i}") for i in range(len(TASKS.get(kind, ()))))]
            for path, mode in runs + ([(gz, "load")] if name == GZ_TOO else []):
                out = work / "out"
                out.mkdir(exist_ok=True)
                p = peak(path, kind, mode, out)
                shutil.rmtree(out)
                task = TASKS[kind][int(mode.split()[1])] if mode != "load" else "load"
                rows.append({"trace": name, "input": "gz" if path == gz else "raw", "kind": kind,
                             "mode": task if isinstance(task, str) else task[0], "raw_mb": size / MB,
                             "file_mb": path.stat().st_size / MB, "peak_mb": p / MB,
                             "per_raw_byte": (p - base) / size})
        raw.unlink()
    factors = {k: max(r["per_raw_byte"] for r in rows if r["kind"] == k) for k in kinds}
    return {"base_mb": base / MB, "warm_base_mb": warm / MB, "rows": rows, "factors": factors}


def render(found: dict) -> str:
    lines = [f"base (engine, 71-event trace): {found['base_mb']:.0f} MB; in a warm worker "
             f"(two ranks before, its engine image kept): {found['warm_base_mb']:.0f} MB", "",
             f"{'trace':34} {'input':5} {'kind':17} {'run':13} {'raw_MB':>6} {'file_MB':>7} "
             f"{'peak_MB':>7} {'(peak-base)/raw':>15}"]
    for r in found["rows"]:
        lines.append(f"{r['trace']:34} {r['input']:5} {r['kind']:17} {r['mode']:13} "
                     f"{r['raw_mb']:6.1f} {r['file_mb']:7.1f} {r['peak_mb']:7.0f} "
                     f"{r['per_raw_byte']:15.2f}")
    lines += ["", "factor per kind (largest (peak - base) / raw byte, load or task): " +
              ", ".join(f"{k} {v:.2f}" for k, v in found["factors"].items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if sys.argv[1:2] == ["--child"]:
        path, kind, mode, out, *warm = sys.argv[2:]
        print(child(Path(path), kind, mode, Path(out), warm == ["warm"]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--traces", default=",".join(TRACES), help="Of kineto/ in the shared traces.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        found = measure(tuple(args.kinds.split(",")), Path(work), tuple(args.traces.split(",")))
    print(json.dumps(found, indent=1) if args.json else render(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
