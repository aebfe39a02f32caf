"""traceaug: GPU profiler traces via Perfetto's trace_processor; the API (``traceaug.api``) mirrors the CLI::

    with traceaug.load("trace.json.gz") as t:
        t.query("SELECT COUNT(*) FROM slice")
    traceaug.query("trace.json.gz", "SELECT ...")   # -> DataFrame
    summary, ops = traceaug.diff("a.json.gz", "b.json.gz")  # -> two DataFrames

Importing it loads nothing heavy and changes no signal handler or other global state."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, unimported: nothing loads before __main__ sets its handlers
if TYPE_CHECKING:
    from pathlib import Path

    from .errors import TraceaugError as TraceaugError
    from .trace import Trace

OWN = ("Trace", "TraceaugError", "load", "load_job", "load_ranks", "__version__")


def __getattr__(name: str):
    # The engine, pandas and the commands load on first use, so workers start light; every
    # command with an API function is one here (``traceaug.kernels``: ``api.kernels``).
    from .commands import NAMES

    if name == "__all__" or name.replace("_", "-") in NAMES:
        import traceaug.api as api

        if name == "__all__" or name in api.names():
            return [*OWN, *api.names()] if name == "__all__" else getattr(api, name)
    if name == "Trace":
        from .trace import Trace

        return Trace
    if name in ("TraceaugError", "__version__"):
        import traceaug.errors as errors
        import traceaug.version as version

        return getattr(errors if name == "TraceaugError" else version, name)
    if name == "load_job":
        from .job.loaded import load_job

        return load_job
    raise AttributeError(f"module 'traceaug' has no attribute {name!r}")


def load(path: str | Path, kind: str | None = None, **options) -> Trace:
    """Load one trace file (options: tp_bin, memory64, progress); ``kind`` (``read.kinds.KINDS``): "analysis"
    (default: the args analyses use, no flows), "full" (all, for your SQL) or a subset ("gpu"...)."""
    from .trace import Trace

    return Trace(path, kind, **options)


def load_ranks(path: str | Path, rank: int | None = None, then=None, **options) -> dict:
    """Load a file or a directory's ranks as {rank: trace}, or {rank: then(rank, trace)} closing each trace
    (detached where a result holds it; ``then`` runs in a pool process if it pickles, else a thread)."""
    import pickle

    import traceaug.runtime as runtime

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
                return run(Work(kind, parts.then, {"fn": then}, cache=False), items_of(files), job)
            finally:
                if job.executor is not None:
                    job.executor.close()
        if len(files) == 1:
            return {files[0].rank: Trace(files[0].path, kind, **options)}
        size = pool_size(len(files), rank_peak(0, kind))
        with runtime.using(progress=False, workers=1), LocalPool(size, processes=False) as pool:
            traces = list(pool.map(lambda f: Trace(f.path, kind, **options), files))
        return {f.rank: t for f, t in zip(files, traces)}
