"""The per-rank tasks: module-level functions (picklable by reference) that take a rank's
file and options, load it with this process's engine, and return plain data (``Detached``
in place of the live trace): what crosses a process or a network is tables, never an engine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .ranks import TraceFile


@dataclass(frozen=True)
class Detached:
    """What a rank's result keeps of its trace once the engine is closed: where it came
    from, its rank and its absolute time base (engine ns + ``base_ns`` = epoch ns)."""

    path: Path
    rank: int | None
    base_ns: int
    world_size: int | None = None

    @classmethod
    def of(cls, trace, rank: int | None, named=None) -> Detached:
        """``trace`` detached; ``named``: what the user named (a URL fetched to ``trace.path``)."""
        return cls(named if named is not None else trace.path,
                   trace.rank if trace.rank is not None else rank, trace.base_ns, trace.world_size)

    def absolute(self, ts: int) -> int:
        return ts + self.base_ns

    def close(self) -> None:
        """Nothing to close: results may be used as a trace was (``with``)."""

    def __enter__(self) -> Detached:
        return self

    def __exit__(self, *exc) -> None:
        pass


def load_options(options: dict) -> dict:
    """A task's ``Trace`` options: in a worker (``executor.in_worker``), pass 1 runs in this
    process (no children), with no progress and no prefetched plan."""
    from .executor import in_worker

    options = {k: v for k, v in options.items() if k != "storage"}
    if not in_worker():
        return options
    return {**{k: v for k, v in options.items() if k != "prefetched"}, "workers": 0,
            "progress": False}


@contextlib.contextmanager
def local(file: TraceFile, options: dict) -> Iterator[Path]:
    """The local file to load for ``file``: itself, or a URL's object fetched in blocks to a
    temporary file for the task's time (``storage.local_copy``; messages name the URL)."""
    from .storage import is_url, local_copy

    if not is_url(file.path):
        yield Path(file.path)
        return
    with local_copy(str(file.path), options.get("storage")) as path:
        yield path


def _named(file: TraceFile):
    """What messages and results call the file: its URL, else None (the trace's path)."""
    from .storage import is_url

    return file.path if is_url(file.path) else None


def gpu_rank(file: TraceFile, options: dict, kind: str | None = None) -> Any:
    """One rank's ``analysis.gpu_steps.GpuOps`` with its trace detached (``kind``: a load
    kind keeping less than its ``LOAD``, for analyses that read less)."""
    from ..analysis.gpu_steps import LOAD, rank_ops
    from ..trace import Trace

    with local(file, options) as path, \
            Trace(path, kind=kind or LOAD["kind"], **load_options(options)) as trace:
        ops = rank_ops(file.rank, trace)
        ops.trace = Detached.of(trace, file.rank, _named(file))
    return ops


def report_rank(file: TraceFile, options: dict) -> tuple[Any, Any]:
    """One rank's ``GpuOps`` (its trace detached) and its collective tables
    (``analysis.collective_rank.tables``) from one load: the "collectives" kind keeps every
    event the "gpu_steps" kind does, so ``report JOB`` reads each rank once (and its GPU ops
    once: the tables take them from ``rank_ops``)."""
    from ..analysis.collective_rank import LOAD, tables
    from ..analysis.gpu_steps import rank_ops
    from ..trace import Trace

    with local(file, options) as path, Trace(path, **LOAD, **load_options(options)) as trace:
        ops = rank_ops(file.rank, trace)
        found = tables(trace, ops=ops)
        ops.trace = Detached.of(trace, file.rank, _named(file))
    return ops, found


def analysis_rank(file: TraceFile, options: dict, part, job: bool, collectives: bool,
                  kind: str | None = None) -> Any:
    """One rank read as ``gpu_rank`` reads it (of ``kind``; ``collectives``: as
    ``report_rank``), then ``part(ops, job)``: its ``commands.analyses.RankPart``, small
    tables; the ops stay here."""
    from ..commands.analyses import run_part

    if collectives:
        ops, found = report_rank(file, options)
        return run_part(part, ops, job, found)
    return run_part(part, gpu_rank(file, options, kind), job)


def then_rank(file: TraceFile, options: dict, then) -> Any:
    """``then(rank, trace)`` on one rank (``traceaug.load_ranks``); a result that holds the
    trace gets it detached."""
    import dataclasses

    from ..trace import Trace

    with local(file, options) as path, Trace(path, **load_options(options)) as trace:
        out = then(file.rank, trace)
        if dataclasses.is_dataclass(out) and getattr(out, "trace", None) is trace:
            out.trace = Detached.of(trace, file.rank, _named(file))
    return out


def collectives_rank(file: TraceFile, options: dict) -> Any:
    """One rank's collective tables (``analysis.collective_rank.extract``)."""
    from ..analysis.collective_rank import extract

    with local(file, options) as path:
        return extract(path, load_options(options))


def info_rank(file: TraceFile, options: dict) -> dict:
    """One rank's ``traceaug info`` record (its file's rank when the trace records none),
    with the file's size."""
    from ..analysis.info import info
    from ..trace import Trace

    with local(file, options) as path, Trace(path, **load_options(options)) as trace:
        record = info(trace)
    if record["rank"] is None:
        record["rank"] = file.rank
    if _named(file) is not None:
        record["file"] = str(file.path)
    return record


def diff_rank(fa: TraceFile, options: dict, b: dict, compare: dict) -> Any:
    """One rank's ``commands.diff.RankDiff``: A's file and B's of the same rank (``b``, by
    rank) loaded here, compared, closed."""
    from ..analysis.diff import Side, compute, pick_steps
    from ..commands.diff import RankDiff
    from ..trace import Trace

    fb, opts = b[fa.rank], load_options(options)
    with local(fa, options) as pa, local(fb, options) as pb, \
            Trace(pa, only="ops", **opts) as ta, Trace(pb, only="ops", **opts) as tb:
        sa, sb = Side.of(ta), Side.of(tb)
        steps = pick_steps(sa, sb, compare["step"], compare["step_a"], compare["step_b"],
                           compare["step_index"])
        result = compute(sa, sb, compare["by"], compare["device"], steps, compare["threshold"])
        rank = ta.rank if ta.rank is not None else fa.rank
    return RankDiff(rank, fa.path, fb.path, result)


def job_path_rank(file: TraceFile, options: dict, scales: tuple = (), models: bool = False
                  ) -> Any:
    """One rank's part of the job's critical path and replay (``analysis.job_path.rank_part``;
    ``models``: with the replay models, ``scales``: the changes whose events it picks)."""
    from ..analysis.job_path import LOAD, rank_part
    from ..trace import Trace

    with local(file, options) as path, Trace(path, **LOAD, **load_options(options)) as trace:
        return rank_part(trace, file.rank, scales, models)
