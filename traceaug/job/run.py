"""The one runner: a command's per-rank work on every rank of its input (a file: one rank), here,
on a local pool or Dask; a failing rank is retried, then named while the others finish."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import traceaug.runtime as runtime

from ..errors import TraceaugError
from ..progress import line
from ..read.ranks import TraceFile, select
from ..read.storage import is_url
from .executor import CLUSTER_TIMEOUT_S, Executor, Inline, LocalPool, connect, limits, rank_peak

TICK_S = 1.0  # the progress line's refresh while no rank finishes


@dataclass
class JobOptions:
    """Where a job's ranks run and what a failing rank does; ``executor``: one the caller owns."""

    scheduler: str | None = None
    scheduler_file: str | None = None
    workers: int | None = None
    retries: int = 1
    fail_fast: bool = False
    skip_bad: bool = False
    progress: bool | None = None
    executor: Executor | None = field(default=None, repr=False)
    cluster_timeout: float = CLUSTER_TIMEOUT_S
    cache: str | None = None  # the table cache's place (``job.cache.where``)
    no_cache: bool = False

    @classmethod
    def of(cls, given: dict, progress: bool | None = None) -> JobOptions:
        """From the options by their command-line names (``skip_bad_ranks``), missing ones default."""
        return cls(given.get("scheduler"), given.get("scheduler_file"), given.get("workers"),
                   given.get("retries", 1), bool(given.get("fail_fast")),
                   bool(given.get("skip_bad_ranks")), progress,
                   cluster_timeout=given.get("cluster_timeout") or CLUSTER_TIMEOUT_S,
                   cache=given.get("cache"), no_cache=bool(given.get("no_cache")))

    def connect(self, fit: dict | None = None) -> Executor | None:
        """The Dask cluster these options name (``executor.connect``), else None."""
        return connect(self.scheduler, self.scheduler_file, self.workers, self.cluster_timeout, fit)

    def select(self, path: str | Path, rank: int | None = None) -> list[TraceFile]:
        """The job's rank files for ``path`` (and ``--rank``): the one discovery of a command."""
        return select(path, rank, self.skip_bad, runtime.current().storage)


@dataclass(frozen=True)
class Item:
    """One rank's input: its file, B's file of the same rank (``diff``), a rewriter's output."""

    rank: int | None
    file: TraceFile
    other: TraceFile | None = None
    out: Path | None = None

    def named(self, file: TraceFile | None = None) -> str | Path | None:
        """What messages call ``file`` (default: this rank's): its URL, else None (its path)."""
        path = (file or self.file).path
        return path if is_url(path) else None


@dataclass(frozen=True)
class Work:
    """Each rank's task opens ``opens(item, kind)`` (default: its trace) and returns
    ``per_rank(opened, item, **params)``, plain data; both module-level functions (picklable).
    ``cache``: False for a caller's own function (its code is not in the cache's key)."""

    kind: str
    per_rank: Callable[..., Any]
    params: dict = field(default_factory=dict)
    opens: Callable[[Item, str], contextlib.AbstractContextManager] | None = None
    cache: bool = True


@contextlib.contextmanager
def local(file: TraceFile) -> Iterator[Path]:
    """The local file to load for ``file``: itself, or a URL's object fetched to a temporary file
    for the task's time."""
    if not is_url(file.path):
        yield Path(file.path)
        return
    from ..read.storage import local_copy

    with local_copy(str(file.path), runtime.current().storage) as path:
        yield path


@contextlib.contextmanager
def local_files(files: list[TraceFile]) -> Iterator[list[TraceFile]]:
    """``files`` as local files for the block (a writer of the whole job reads every rank here)."""
    with contextlib.ExitStack() as stack:
        yield [replace(f, path=stack.enter_context(local(f))) for f in files]


@contextlib.contextmanager
def open_trace(item: Item, kind: str) -> Iterator[Any]:
    """A rank's trace, loaded as ``kind`` and closed after its task."""
    from ..trace import Trace

    with local(item.file) as path, Trace(path, kind) as trace:
        yield trace


def task(work: Work, item: Item, rt: runtime.Runtime, entries: tuple = (None, None)) -> Any:
    """One rank's task, wherever it runs: ``work`` on ``item`` with the runtime ``rt``; ``entries``:
    the table cache's for what it opens (read if there, else filled) and for its result (filled)."""
    opened_entry, result_entry = entries
    with runtime.using(rt):
        found, value = opened_entry.get() if opened_entry is not None else (False, None)
        if found:
            result = work.per_rank(value, item, **work.params)
        else:
            with (work.opens or open_trace)(item, work.kind) as opened:
                if opened_entry is not None:
                    opened_entry.put(opened)  # before the work, which may add to it
                result = work.per_rank(opened, item, **work.params)
    if result_entry is not None:
        result_entry.put(result)
    return result


def cached(work: Work, items: list[Item], options: JobOptions) -> tuple[Work, dict]:
    """The table cache's part in ``run``: the work to run (on a job, ``parts.widened``: one read of each
    rank, made by report / stragglers / critical-path --job, answers every command) and each rank's entries
    (``task``; ``run`` reads the results they hold)."""
    from ..read.kinds import READ_AS_ONE
    from .cache import where

    store = where(options.cache, options.no_cache)
    if store is None:
        return work, {i.rank: (None, None) for i in items}
    held: dict = {}
    ids = None
    if len(items) > 1:  # (what the task opens or computes says how: ``parts.widened``)
        ids = store.file_ids([f.path for i in items for f in (i.file, i.other) if f is not None])
        widen = next((w for w in (getattr(getattr(f, "func", f), "widened", None)
                                  for f in (work.opens, work.per_rank)) if w), None)
        wide = widen(work) if widen else work
        # A command reading less than the whole (kernels) reads it only where it is kept already: read
        # whole, its first run would cost as much as report's (25.7 s vs 5.5 s for kernels on 64 ranks)
        if wide.kind == work.kind or work.kind in READ_AS_ONE:
            work = wide
        elif wide is not work:
            held = {i.rank: store.entries(wide, i, ids) for i in items}
            if all(any(e is not None and e.exists() for e in held[i.rank]) for i in items):
                work = wide
            else:
                held = {}
    return work, {i.rank: held.get(i.rank) or store.entries(work, i, ids) for i in items}


def items_of(files: list[TraceFile]) -> list[Item]:
    return [Item(f.rank, f) for f in files]


def stored_size(path: str | Path) -> int:
    """Bytes ``path`` holds as stored (on disk, or its object's); 0 when it cannot be told."""
    if is_url(path):
        from ..read.storage import size

        return size(str(path), runtime.current().storage)
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def fit(items: list[Item], kind: str) -> dict:
    """What bounds the processes worth starting for ``items`` (``executor.limits``)."""
    from ..read.source import raw_size_estimate

    if not items:
        return {}
    peak = max(rank_peak(stored_size(i.file.path) * 20 if is_url(i.file.path)
                         else raw_size_estimate(i.file.path), kind) for i in items)
    return limits(len(items), peak)


def choose(items: list[Item], kind: str, options: JobOptions) -> Executor:
    """A Dask cluster the options name, else a pool sized to the machine; one rank runs here."""
    asked = options.scheduler or options.scheduler_file or options.workers
    if len(items) <= 1 and not asked:  # one trace: here, as always (Dask's config not read)
        return Inline()
    bounds = fit(items, kind)
    dask = options.connect(bounds)
    if dask is not None:
        return dask
    size = max(1, min(bounds.values(), default=1))
    return Inline() if size == 1 else LocalPool(size)


def absolute(item: Item) -> Item:
    """``item`` with its local paths absolute: a worker elsewhere (another directory, another
    machine sharing the files) reads what this process names."""
    def whole(path):
        return path if path is None or is_url(path) else Path(path).absolute()

    other = item.other and replace(item.other, path=whole(item.other.path))
    return replace(item, file=replace(item.file, path=whole(item.file.path)), other=other,
                   out=whole(item.out))


def run(work: Work, items: list[Item], options: JobOptions | None = None,
        on_result: Callable[[Any, Any], None] | None = None) -> dict:
    """``work`` on each of ``items``: {rank: result} in their order, ``on_result(rank, result)`` as
    each arrives, what it returns (if not None: the part of the result its caller reads) held in its
    place; ranks the table cache holds are answered from it, one read at a time, the others fill it.
    One rank here raises its own error; several fail naming every failed rank."""
    options = options or JobOptions()
    work, entries = cached(work, items, options)
    hits: dict = {}
    for i in items:
        found, value = entries[i.rank][1].get() if entries[i.rank][1] else (False, None)
        if found:
            hits[i.rank] = arrived(on_result, i.rank, value)
            del entries[i.rank]
    opened = sum(1 for e, _ in entries.values() if e is not None and e.exists())
    shown = runtime.current().shows_progress() if options.progress is None else options.progress
    if shown and (hits or opened or len(items) > 1 and any(any(e) for e in entries.values())):
        line(f"ranks from the cache: {len(hits) + opened} of {len(items)}\n")
    rest = [i for i in items if i.rank not in hits]
    if rest:
        hits.update(_compute(work, rest, options, on_result, entries))
        if any(any(e) for e in entries.values()):
            from .cache import where

            where(options.cache, options.no_cache).trim()
    return {i.rank: hits[i.rank] for i in items}


def _compute(work: Work, items: list[Item], options: JobOptions, on_result: Callable | None,
             entries: dict) -> dict:
    """``run``'s ranks the cache did not answer, each task filling its ``entries[rank]``."""
    executor = options.executor or choose(items, work.kind, options)
    if not isinstance(executor, Inline):
        from ..read import prefetch

        prefetch.close()  # children planning for this process: the workers plan their ranks
    if executor.remote:
        items = [absolute(i) for i in items]
    rt = runtime.current()
    if isinstance(executor, LocalPool) and not executor.processes:
        rt = replace(rt, progress=False, workers=1)  # threads here: one pass-1 child each
    elif not isinstance(executor, Inline):
        rt = rt.for_worker()
    try:
        if isinstance(executor, Inline) and len(items) == 1:
            rank = items[0].rank
            done = {rank: arrived(on_result, rank, task(work, items[0], rt, entries[rank]))}
        else:
            done = _run_ranks(lambda item: (task, work, item, rt, entries[item.rank]), items,
                              executor, options, on_result)
    except BaseException:  # a failure, Ctrl-C: running ranks stopped, pending ones cancelled
        if executor is not options.executor:
            executor.close(cancel=True)
        raise
    if executor is not options.executor:
        executor.close()
    return done


def arrived(on_result: Callable | None, rank: Any, result: Any) -> Any:
    """What ``run`` holds of a rank's ``result``: ``on_result``'s answer if it gives one, else the result."""
    kept = on_result(rank, result) if on_result is not None else None
    return result if kept is None else kept


def message(error: BaseException) -> str:
    """A failure in one line: a traceaug error as it is, anything else with its type."""
    if isinstance(error, TraceaugError):
        return str(error)
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _Progress:
    """``ranks: 3/8 done, 41.2 of 112.0 MB read (slowest running: rank 5, 2.1 s)`` on a terminal;
    ``sizes``: bytes each rank reads, counted once it is done."""

    def __init__(self, sizes: dict, enabled: bool) -> None:
        self.sizes, self.total, self.done, self.read = sizes, len(sizes), 0, 0
        self.whole = sum(sizes.values())
        self.enabled = enabled
        self.started: dict[Any, float] = {}

    def finished(self, rank) -> None:
        self.started.pop(rank, None)
        self.done += 1
        self.read += self.sizes.get(rank, 0)

    def show(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        slow = min(self.started.items(), key=lambda kv: kv[1], default=None)
        tail = f" (slowest running: rank {slow[0]}, {now - slow[1]:.1f} s)" if slow else ""
        read = f", {_amount(self.read, self.whole)} read" if self.whole else ""
        line(f"ranks: {self.done}/{self.total} done{read}{tail}")

    def close(self) -> None:
        if self.enabled:
            line()


def _amount(part: int, whole: int) -> str:
    """``41.2 of 112.0 MB`` (GB from 1 GB up), both in the whole's unit."""
    unit, scale = ("GB", 1e9) if whole >= 1e9 else ("MB", 1e6)
    return f"{part / scale:.1f} of {whole / scale:.1f} {unit}"


def _run_ranks(task_of: Callable[[Item], tuple], items: list[Item], executor: Executor,
               options: JobOptions, on_result: Callable | None) -> dict:
    """Each item's task (``task_of(item)``: the function and its arguments) on ``executor``."""
    shown = runtime.current().shows_progress() if options.progress is None else options.progress
    sizes = {i.rank: stored_size(i.file.path) + (stored_size(i.other.path) if i.other else 0)
             for i in items}
    progress = _Progress(sizes, shown)
    results: dict = {}
    failed: dict = {}
    tries = {i.rank: 0 for i in items}
    by_rank = {i.rank: i for i in items}
    owner: dict = {}
    submitted: dict = {}
    pending: list = []

    def submit(rank) -> None:
        f = executor.submit(*task_of(by_rank[rank]))
        owner[id(f)] = rank
        submitted[rank] = time.monotonic()
        progress.started.pop(rank, None)
        pending.append(f)

    for i in items:
        submit(i.rank)
    looked = time.monotonic()  # the last look at which ranks run
    try:
        while pending:
            done = executor.wait(pending, TICK_S if progress.enabled else None)
            finished = {id(f) for f in done}
            pending[:] = [f for f in pending if id(f) not in finished]
            for f in done:
                rank = owner.pop(id(f))
                error, result = executor.outcome(f)
                if error is None:
                    results[rank] = arrived(on_result, rank, result)
                elif isinstance(error, KeyboardInterrupt):
                    raise error
                elif tries[rank] < options.retries and not options.fail_fast:
                    tries[rank] += 1
                    submit(rank)
                    continue
                else:
                    failed[rank] = message(error)
                    _say(rank, failed[rank], progress)
                    if options.fail_fast:
                        executor.cancel([x for x in pending if not x.done()])
                        raise _failure(failed, len(items), fail_fast=True)
                progress.finished(rank)
            if progress.enabled:  # a rank first seen running started after the last look
                for f in executor.running(pending):
                    r = owner[id(f)]
                    progress.started.setdefault(r, max(submitted[r], looked))
                looked = time.monotonic()
                progress.show()
    finally:
        progress.close()
    if failed:
        raise _failure(failed, len(items), writes=any(i.out is not None for i in items))
    return {i.rank: results[i.rank] for i in items}


def _say(rank, text: str, progress: _Progress) -> None:
    if progress.enabled:
        line()
    print(f"traceaug: rank {rank} failed: {text}", file=sys.stderr)


def _failure(failed: dict, total: int, fail_fast: bool = False, writes: bool = False
             ) -> TraceaugError:
    """The run's closing line; ``writes``: the ranks had outputs, none of which is left."""
    ranks = ", ".join(str(r) for r in sorted(failed, key=lambda r: (r is None, r)))
    if fail_fast:
        return TraceaugError(f"rank {ranks} failed (--fail-fast: the other ranks were stopped)")
    return TraceaugError(f"{len(failed)} of {total} ranks failed: rank(s) {ranks}"
                         f"{'; nothing was written' if writes else ''}")
