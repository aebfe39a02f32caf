"""traceaug: GPU profiler traces through Perfetto's own trace_processor.

The Python API mirrors the CLI::

    import traceaug
    with traceaug.load("trace.json.gz") as t:
        t.query("SELECT COUNT(*) FROM slice")
    traceaug.query("trace.json.gz", "SELECT ...")   # -> DataFrame
    traceaug.info("traces/")                         # -> list of dicts, one per rank
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import TraceaugError

if TYPE_CHECKING:
    import pandas as pd

    from .trace import Trace

__version__ = "0.1.0"
__all__ = ["Trace", "TraceaugError", "info", "load", "load_ranks", "query", "__version__"]


def __getattr__(name: str):
    # The engine and pandas load on first use, so pass-1 worker processes start light.
    if name == "Trace":
        from .trace import Trace

        return Trace
    raise AttributeError(f"module 'traceaug' has no attribute {name!r}")


def load(path: str | Path, kind: str | None = None, **options) -> Trace:
    """Load one trace file (options: tp_bin, memory64, progress).

    ``kind`` (``traceaug.read.kinds.KINDS``) says what is kept. By default ("analysis") only
    the args traceaug's analyses use, and no flow events (as HTA's parser keeps a minimal arg
    set); "full" keeps everything for your SQL; "gpu" (GPU ops, launches, steps), "ops" (CPU
    ops too) and "sync" (annotations, every runtime call and ``cuda_sync`` events too) keep
    less. ``full=True`` and ``only="gpu"|"ops"`` are the older names of "full", "gpu", "ops"."""
    from .trace import Trace

    return Trace(path, kind=kind, **options)


def load_ranks(path: str | Path, rank: int | None = None, **options) -> dict[int | None, Trace]:
    """Load a file or every rank of a directory, two at a time; keyed by rank."""
    from .read.inputs import select
    from .trace import Trace

    files = select(path, rank)
    if len(files) == 1:
        return {files[0].rank: Trace(files[0].path, **options)}
    options.setdefault("progress", False)
    options.setdefault("workers", 1)  # two loads at once: one pass-1 worker process each
    with ThreadPoolExecutor(max_workers=2) as pool:
        traces = list(pool.map(lambda f: Trace(f.path, **options), files))
    return {f.rank: t for f, t in zip(files, traces)}


def query(path: str | Path, sql: str, **options) -> pd.DataFrame:
    """Run PerfettoSQL on one trace file and return a DataFrame."""
    from .trace import Trace

    with Trace(path, **options) as trace:
        return trace.query(sql)


def info(path: str | Path, rank: int | None = None, **options) -> list[dict]:
    """``traceaug info`` as data: one dict per trace (rank)."""
    from .analysis.info import info as trace_info

    out = []
    for r, trace in load_ranks(path, rank=rank, **options).items():
        with trace:
            record = trace_info(trace)
            if record["rank"] is None:
                record["rank"] = r
            out.append(record)
    return out
