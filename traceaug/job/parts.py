"""What a rank's task opens (``Work.opens``) and the per-rank functions the commands share:
module-level (picklable), each turning a rank's trace into plain data, never an engine."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..errors import TraceaugError
from ..processes import Threads
from .run import Item, Work, local, open_trace


@contextlib.contextmanager
def local_file(item: Item, kind: str) -> Iterator[Any]:
    """The rank's file as a local path (a URL's object fetched): its task loads it itself."""
    with local(item.file) as path:
        yield path


@dataclass
class Ops:
    """A rank's GPU ops (``GpuOps``, their trace detached) and, when asked, its collective tables and its
    part of a job verdict's replay (``job_path.replay_part``; of a whole read, ``job_path.whole_part``)."""

    ops: Any
    tables: Any = None
    path: Any = None
    sections: dict | None = None  # report's efficiency and memory from the same read (``sections``)


# the load kinds that keep what ``sections`` reads (``read.kinds``: report's and report JOB's, the CPU ops'
# shapes and the [memory] events)
SECTION_KINDS = frozenset({"report", "job_path"})


def sections(trace: Any, g: Any) -> dict:
    """A rank's efficiency (``efficiency.part``) and memory of every step (``memory.compute``), from the
    read its report makes of it: none is read again for them."""
    from ..analysis import efficiency, memory

    return {"efficiency": efficiency.part(trace, g),
            "memory": memory.every_step(trace) if memory.recorded(trace) else memory.NO_EVENTS}


@contextlib.contextmanager
def open_ops(item: Item, kind: str, tables: bool = False, step: int | None = None,
             whole: bool = False) -> Iterator[Ops]:
    """A rank's ``Ops`` (with ``tables``: of ``step``'s replay, None: every step's; ``whole``: with every
    step's ``job_path.whole_part``), its engine closed before the task computes on them."""
    from ..analysis.gpu_steps import rank_ops

    with open_trace(item, kind) as trace:
        ops = rank_ops(item.rank, trace)
        found = path = None
        if tables or whole:  # (a job's: one trace imports none of their modules)
            from ..analysis.collective_rank import tables as collective_tables
            from ..analysis.job_path import replay_part, whole_part

            found = collective_tables(trace, ops=ops)
            # (a copy of the tables, sharing their frames: the replay keys them by the ops' rank)
            path = whole_part(trace, dataclasses.replace(found)) if whole else \
                replay_part(trace, dataclasses.replace(found), step)
        more = sections(trace, ops) if kind in SECTION_KINDS else None
        ops.trace = trace.detached(item.rank, item.named())
    yield Ops(ops, found, path, more)


@contextlib.contextmanager
def open_ops_and_tables(item: Item, kind: str, step: int | None = None) -> Iterator[Ops]:
    """``open_ops`` with the rank's collective tables and verdict replay part (``report JOB``: one read
    per rank, of kind ``job_path``)."""
    with open_ops(item, kind, True, step) as opened:
        yield opened


@contextlib.contextmanager
def open_whole(item: Item, kind: str) -> Iterator[Ops]:
    """``open_ops`` with the tables and every step's whole part: the one read of a rank that answers
    each command of a job with the table cache on (``widened``)."""
    with open_ops(item, kind, whole=True) as opened:
        yield opened


# what these open is plain data (no engine): the table cache keeps it, whatever work runs on it
open_ops.plain = open_ops_and_tables.plain = open_whole.plain = True


def widened(work: Work) -> Work:
    """``work`` on the one read of a rank (``open_whole``, of kind ``kinds.ONE_READ``) narrowed to what
    ``work`` reads: its ``Ops`` (``narrowed``), its critical path part without scales (``job_path_of``);
    ``work`` itself when it reads anything else (a trace, a pair, scaled events)."""
    from ..read.kinds import ANSWERED_BY_ONE, ONE_READ

    if work.kind not in ANSWERED_BY_ONE:
        return work
    if work.per_rank is job_path and work.opens is None and work.params.get("scales") in ((), None):
        return Work(ONE_READ, job_path_of, work.params, open_whole)
    opens = getattr(work.opens, "func", work.opens)
    if opens not in (open_ops, open_ops_and_tables):
        return work
    step = work.opens.keywords.get("step") if isinstance(work.opens, partial) else None
    return Work(ONE_READ, narrowed, {"of": (work.per_rank, work.kind, opens is open_ops_and_tables, step),
                                     **work.params}, open_whole)


def narrowed(opened: Ops, item: Item, of: tuple, **params: Any) -> Any:
    """``per_rank(view, item, **params)`` for ``of`` = (per_rank, kind, tables, step): ``view`` what its
    own read would have opened, from the rank's whole one: the tables and replay part (of ``step``) only
    with ``tables``, for kind ``gpu_ops`` the GPU ops without their launches."""
    from ..analysis.job_path import as_replay_part

    per_rank, kind, tables, step = of
    ops = without_launches(opened.ops) if kind == "gpu_ops" else opened.ops
    view = Ops(ops, opened.tables, as_replay_part(opened.path, step), opened.sections) if tables else \
        Ops(ops, sections=opened.sections)
    return per_rank(view, item, **params)


def without_launches(g: Any) -> Any:
    """``g`` (``GpuOps``) as a load of kind ``gpu_ops`` gives what ``kernels`` reads of it: no op
    launched, no graph replay known (no launch call read)."""
    import numpy as np

    ops = dict(g.ops)
    n = len(ops["ts"])
    ops["launched"] = np.zeros(n, bool)
    for k in ("launch_ts", "launch_dur", "launch_end"):
        ops[k] = np.zeros(n, np.int64)
    ops["launch_name"] = np.full(n, None, object)
    return dataclasses.replace(g, ops=ops, replays=None)


def job_path_of(opened: Ops, item: Item, scales: tuple | None = None) -> Any:
    """``job_path`` (with no scales) from the rank's whole read (``widened``)."""
    from ..analysis.job_path import as_rank_part

    return as_rank_part(opened.path, item.rank, scales is not None)


def _both(item: Item, kind: str, make: Callable) -> Iterator[tuple]:
    """``make(trace)`` of a rank of A and the same rank of B: here both at once, in a worker in turn."""
    import traceaug.runtime as runtime

    from ..trace import Trace

    worker = runtime.current().worker
    with contextlib.ExitStack() as stack:
        paths = [stack.enter_context(local(f)) for f in (item.file, item.other)]

        def load(path) -> Any:
            trace = Trace(path, kind) if worker else Trace(path, kind, workers=1)
            stack.callback(trace.close)
            return make(trace)

        if worker:
            yield tuple(load(p) for p in paths)
            return
        with Threads(2) as pool:
            both = tuple(pool.map(load, paths))
        yield both


@contextlib.contextmanager
def open_both(item: Item, kind: str) -> Iterator[tuple]:
    """A rank of A and the same rank of B (``diff --explain``), as traces."""
    yield from _both(item, kind, lambda trace: trace)


@contextlib.contextmanager
def open_pair(item: Item, kind: str) -> Iterator[tuple]:
    """A rank of A and the same rank of B (``diff``), as ``analysis.diff.Side``s."""
    from ..analysis.diff import Side

    yield from _both(item, kind, Side.of)


def ops(opened: Ops, item: Item) -> Any:
    """A rank's GPU ops (``traceaug.load_job``'s, ``traceaug.analyses``')."""
    return opened.ops


def info(trace: Any, item: Item) -> dict:
    """A rank's ``traceaug info`` record (the file's rank when the trace records none)."""
    from ..analysis.info import info as trace_info

    record = trace_info(trace)
    if record["rank"] is None:
        record["rank"] = item.rank
    if item.named() is not None:
        record["file"] = str(item.file.path)
    return record


def query(trace: Any, item: Item, sql: str) -> dict:
    """``sql``'s result columns, the traceaug modules it names included (``traceaug query``)."""
    trace.include_for(sql)
    return trace.columns(sql)


def apply(opened: Any, item: Item, fn: Callable, **params: Any) -> Any:
    """``fn(opened, **params)``: an analysis needing nothing else of the rank."""
    return fn(opened, **params)


def job_path(trace: Any, item: Item, scales: tuple | None = None) -> Any:
    """A rank's part of the job's critical path, with the replay models for ``scales`` (None: none)."""
    from ..analysis.job_path import rank_part

    return rank_part(trace, item.rank, None if scales is None else tuple(scales))


# a job's work opening or computing these is answered from the one whole read with the table cache on
open_ops.widened = open_ops_and_tables.widened = job_path.widened = widened


def then(trace: Any, item: Item, fn: Callable) -> Any:
    """``fn(rank, trace)`` (``load_ranks``); a result holding the trace gets it detached."""
    out = fn(item.rank, trace)
    if dataclasses.is_dataclass(out) and getattr(out, "trace", None) is trace:
        out.trace = trace.detached(item.rank, item.named())
    return out


@dataclass
class RankPart:
    """One rank's share of an analysis command: its small tables, never its ops; ``error``: the
    analysis's user error (a step the rank lacks), raised by the main process in rank order."""

    rank: int | None
    ops: int  # the rank's GPU ops (a job with none on any rank is an error)
    tables: dict
    collectives: Any = None  # report JOB: the rank's collective tables from the same read
    error: TraceaugError | None = None
    path: Any = None  # report JOB: the rank's ``job_path.RankPart`` (replay models) from the same read
    notes: list = field(default_factory=list)  # what its figures cannot tell (``GpuOps.notes``)
    op_times: dict = field(default_factory=dict)  # GPU time per attributed op (``GpuOps.op_times``)
    sections: dict | None = None  # report: its efficiency and memory from the same read (``Ops.sections``)


def part(opened: Ops, item: Item, fn: Callable, in_job: bool, **params: Any) -> RankPart:
    """``fn(ops, in_job, **params)`` on a rank's ``Ops`` (``in_job``: one rank of several)."""
    g = opened.ops
    try:
        return RankPart(g.rank, len(g.ops["ts"]), fn(g, in_job, **params), opened.tables,
                        path=opened.path, notes=g.notes, sections=opened.sections,
                        op_times=g.op_times(params.get("step")))
    except TraceaugError as e:
        return RankPart(g.rank, len(g.ops["ts"]), {}, opened.tables, e, opened.path,
                        notes=g.notes, sections=opened.sections)
