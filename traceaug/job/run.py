"""Run one task per rank on an executor: results by rank, each failure retried, then named.

A rank whose task fails (a bad file, out of memory, a worker lost) is tried again
``retries`` times; if it still fails, its one-line error is said by rank while the others
finish, and the run then fails naming every failed rank (``fail_fast``: at the first, the
rest cancelled). Progress (ranks done / total, bytes read, the slowest rank still running)
is shown on a terminal only.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import TraceaugError
from ..progress import line, shown
from .executor import Executor, Inline, LocalPool, connect, pool_size, rank_peak

TICK_S = 1.0  # the progress line's refresh while no rank finishes


@dataclass
class JobOptions:
    """How the ranks of a job run (the CLI's job options)."""

    scheduler: str | None = None
    scheduler_file: str | None = None
    workers: int | None = None
    retries: int = 1
    fail_fast: bool = False
    skip_bad: bool = False
    progress: bool | None = None
    storage: dict = field(default_factory=dict)  # fsspec storage options for URLs
    executor: Executor | None = field(default=None, repr=False)  # one the caller owns

    def select(self, path, rank: int | None = None) -> list:
        """The job's rank files for ``path`` (and ``--rank``) as its tasks read them: with
        --skip-bad-ranks and the storage options (``job.ranks.select``)."""
        from .ranks import select

        return select(path, rank, self.skip_bad, self.storage)


def message(error: BaseException) -> str:
    """A failure in one line: a traceaug error as it is, anything else with its type."""
    if isinstance(error, TraceaugError):
        return str(error)
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _Progress:
    """``ranks: 3/8 done, 41.2 of 112.0 MB read (slowest running: rank 5, 2.1 s)`` on a
    terminal, quiet when piped. ``sizes``: bytes each rank's task reads (its files as stored);
    a rank's bytes count as read once it is done; a rank's time, from when it was first seen
    running (an executor that cannot tell: from its submission)."""

    def __init__(self, sizes: dict, enabled: bool | None) -> None:
        self.sizes, self.total, self.done, self.read = sizes, len(sizes), 0, 0
        self.whole = sum(sizes.values())
        self.enabled = shown() if enabled is None else enabled
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


def stored_size(path, storage: dict | None = None) -> int:
    """Bytes ``path`` holds as stored (on disk, or its object's): what reading it reads; 0
    when it cannot be told (reading it says why)."""
    from .storage import is_url, size

    if is_url(path):
        return size(str(path), storage)
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def executor_for(files: list, kind: str, options: JobOptions) -> Executor:
    """The executor a job's ``files`` run on: the caller's, a Dask cluster the options name,
    else a local pool sized to the machine (``pool_size``); one rank runs in this process."""
    if options.executor is not None:
        return options.executor
    asked = options.scheduler or options.scheduler_file or options.workers
    if len(files) <= 1 and not asked:  # one trace: here, as always (Dask's config not read)
        return Inline()
    dask = connect(options.scheduler, options.scheduler_file, options.workers)
    if dask is not None:
        return dask
    if len(files) <= 1:
        return Inline()
    from ..read.source import raw_size_estimate
    from .storage import is_url

    peak = max(rank_peak(stored_size(f.path, options.storage) * 20 if is_url(f.path)
                         else raw_size_estimate(f.path), kind) for f in files)
    size = pool_size(len(files), peak)
    return Inline() if size == 1 else LocalPool(size)


def run_ranks(fn: Callable, items: list[tuple[Any, tuple]], executor: Executor,
              options: JobOptions, on_result: Callable[[Any, Any], None] | None = None,
              sizes: dict | None = None) -> dict:
    """``fn(*args)`` for each ``(rank, args)``; returns {rank: result} in the items' order
    (``on_result(rank, result)`` is called as each arrives). Raises ``TraceaugError`` naming
    every rank that failed after its retries. One rank in this process runs as it is: its
    error is the command's. ``sizes``: bytes each rank reads, for the progress line."""
    if isinstance(executor, Inline) and len(items) == 1:
        rank, args = items[0]
        result = fn(*args)
        if on_result is not None:
            on_result(rank, result)
        return {rank: result}
    progress = _Progress({rank: (sizes or {}).get(rank, 0) for rank, _ in items}, options.progress)
    results: dict = {}
    failed: dict = {}
    tries = {rank: 0 for rank, _ in items}
    args = dict(items)
    owner: dict = {}
    submitted: dict = {}
    pending: list = []

    def submit(rank) -> None:
        f = executor.submit(fn, *args[rank])
        owner[id(f)] = rank
        submitted[rank] = time.monotonic()
        progress.started.pop(rank, None)
        pending.append(f)

    for rank, _ in items:
        submit(rank)
    looked = time.monotonic()  # the last look at which ranks run
    try:
        while pending:
            done = executor.wait(pending, TICK_S if progress.enabled else None)
            finished = {id(f) for f in done}
            pending[:] = [f for f in pending if id(f) not in finished]
            for f in done:
                rank = owner.pop(id(f))
                error = f.exception()
                if error is None:
                    results[rank] = f.result()
                    if on_result is not None:
                        on_result(rank, results[rank])
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
        raise _failure(failed, len(items))
    return {rank: results[rank] for rank, _ in items}


def _say(rank, text: str, progress: _Progress) -> None:
    if progress.enabled:
        line()
    print(f"traceaug: rank {rank} failed: {text}", file=sys.stderr)


def _failure(failed: dict, total: int, fail_fast: bool = False) -> TraceaugError:
    ranks = ", ".join(str(r) for r in sorted(failed, key=lambda r: (r is None, r)))
    if fail_fast:
        return TraceaugError(f"rank {ranks} failed (--fail-fast: the other ranks were stopped)")
    return TraceaugError(f"{len(failed)} of {total} ranks failed: rank(s) {ranks}; nothing "
                         "was written")
