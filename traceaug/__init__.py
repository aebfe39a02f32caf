"""traceaug: GPU profiler traces through Perfetto's own trace_processor.

The Python API mirrors the CLI, one function per command (``traceaug.api``)::

    import traceaug
    with traceaug.load("trace.json.gz") as t:
        t.query("SELECT COUNT(*) FROM slice")
    traceaug.query("trace.json.gz", "SELECT ...")   # -> DataFrame
    traceaug.info("traces/")                         # -> list of dicts, one per rank
    steps, changes = traceaug.whatif("t.json.gz", scale=["comp=0.5"])  # -> two DataFrames
    summary, ops = traceaug.diff("a.json.gz", "b.json.gz")  # -> two DataFrames

Importing it loads nothing heavy and changes no signal handler or other global state.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, unimported: nothing loads before __main__ sets its handlers
if TYPE_CHECKING:
    from pathlib import Path

    from .errors import TraceaugError
    from .trace import Trace

API = ("info", "query", "counters", "patterns", "critical_path", "diff", "whatif", "kernels",
       "gaps", "breakdown", "launches", "report", "collectives", "stragglers", "merge", "summary",
       "convert")
__all__ = ["Trace", "TraceaugError", "load", "load_job", "load_ranks", *API, "__version__"]


def __getattr__(name: str):
    # The engine, pandas and the commands load on first use, so workers start light.
    if name == "Trace":
        from .trace import Trace

        return Trace
    if name in ("TraceaugError", "__version__"):
        from . import errors, version

        return getattr(errors if name == "TraceaugError" else version, name)
    if name in API:
        from . import api

        return getattr(api, name)
    if name == "load_job":
        from .job.loaded import load_job

        return load_job
    raise AttributeError(f"module 'traceaug' has no attribute {name!r}")


def load(path: str | Path, kind: str | None = None, **options) -> Trace:
    """Load one trace file (options: tp_bin, memory64, progress).

    ``kind`` (``traceaug.read.kinds.KINDS``) says what is kept. By default ("analysis") only
    the args traceaug's analyses use, and no flow events (as HTA's parser keeps a minimal arg
    set); "full" keeps everything for your SQL; "gpu" (GPU ops, launches, steps), "gpu_steps"
    (the same, the other events cut unparsed: ``read.skim``), "gpu_ops" (the GPU ops alone,
    skimmed), "ops" (CPU ops too), "patterns" (as "ops", fewer calls and args), "sync"
    (annotations, every runtime call and ``cuda_sync`` events too) and "collectives" keep
    less. ``full=True`` and ``only="gpu"|"ops"`` are the older names of "full", "gpu", "ops"."""
    from .trace import Trace

    return Trace(path, kind, **options)


def load_ranks(path: str | Path, rank: int | None = None, then=None, **options) -> dict:
    """Load a file or every rank of a directory; keyed by rank. With ``then``, each trace goes
    to ``then(rank, trace)`` (in a pool process when it pickles; else, as a lambda, in a
    thread here) and is closed right after; its result is kept instead of the trace (a result
    holding the trace gets it detached). Without, the traces stay loaded (in this process, a
    few at a time)."""
    import pickle

    from . import runtime
    from .job import parts
    from .job.executor import LocalPool, pool_size, rank_peak
    from .job.run import JobOptions, Work, items_of, run
    from .read.ranks import select
    from .trace import Trace

    kind = options.pop("kind", None) or "analysis"
    files = select(path, rank)
    with runtime.using(**{k: options.pop(k) for k in ("tp_bin", "progress", "workers")
                          if k in options}):
        if then is not None:
            job = JobOptions(progress=False)
            try:
                pickle.dumps(then)
            except (pickle.PicklingError, AttributeError, TypeError):  # a lambda: threads here
                job.executor = LocalPool(pool_size(len(files), rank_peak(0, kind)),
                                         processes=False)
            try:
                return run(Work(kind, parts.then, {"fn": then}), items_of(files), job)
            finally:
                if job.executor is not None:
                    job.executor.close()
        if len(files) == 1:
            return {files[0].rank: Trace(files[0].path, kind, **options)}
        size = pool_size(len(files), rank_peak(0, kind))
        with runtime.using(progress=False, workers=1), LocalPool(size, processes=False) as pool:
            traces = list(pool.map(lambda f: Trace(f.path, kind, **options), files))
        return {f.rank: t for f, t in zip(files, traces)}
