"""Run one task per rank on an executor: results by rank, each failure retried, then named.

A rank whose task fails (a bad file, out of memory, a worker lost) is tried again
``retries`` times; if it still fails, its one-line error is said by rank while the others
finish, and the run then fails naming every failed rank (``fail_fast``: at the first, the
rest cancelled). Progress (ranks done / total, the rank longest unfinished) is shown on a
terminal only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import TraceaugError
from ..progress import line, shown
from .executor import Executor, Inline, LocalPool, connect, pool_size, rank_peak


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


def message(error: BaseException) -> str:
    """A failure in one line: a traceaug error as it is, anything else with its type."""
    if isinstance(error, TraceaugError):
        return str(error)
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _Progress:
    """``ranks: 3/8 done (longest unfinished: rank 5, 2.1 s)`` on a terminal, quiet when piped."""

    def __init__(self, total: int, enabled: bool | None) -> None:

        self.total, self.done = total, 0
        self.enabled = shown() if enabled is None else enabled
        self.started: dict[Any, float] = {}

    def show(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        slow = min(self.started.items(), key=lambda kv: kv[1], default=None)
        tail = f" (longest unfinished: rank {slow[0]}, {now - slow[1]:.1f} s)" if slow else ""
        line(f"ranks: {self.done}/{self.total} done{tail}")

    def close(self) -> None:
        if self.enabled:
            line()


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
    from .storage import is_url, size

    peak = max(rank_peak(size(f.path, options.storage) * 20 if is_url(f.path)
                         else raw_size_estimate(f.path), kind) for f in files)
    size = pool_size(len(files), peak)
    return Inline() if size == 1 else LocalPool(size)


def run_ranks(fn: Callable, items: list[tuple[Any, tuple]], executor: Executor,
              options: JobOptions, on_result: Callable[[Any, Any], None] | None = None) -> dict:
    """``fn(*args)`` for each ``(rank, args)``; returns {rank: result} in the items' order
    (``on_result(rank, result)`` is called as each arrives). Raises ``TraceaugError`` naming
    every rank that failed after its retries. One rank in this process runs as it is: its
    error is the command's."""
    if isinstance(executor, Inline) and len(items) == 1:
        rank, args = items[0]
        result = fn(*args)
        if on_result is not None:
            on_result(rank, result)
        return {rank: result}
    progress = _Progress(len(items), options.progress)
    results: dict = {}
    failed: dict = {}
    tries = {rank: 0 for rank, _ in items}
    args = dict(items)
    owner: dict = {}
    pending = []
    for rank, a in items:
        f = executor.submit(fn, *a)
        owner[id(f)] = rank
        progress.started[rank] = time.monotonic()
        pending.append(f)
    try:
        while pending:
            batch, pending = pending, []
            for f in executor.as_completed(batch):
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
                    g = executor.submit(fn, *args[rank])
                    owner[id(g)] = rank
                    pending.append(g)
                    continue
                else:
                    failed[rank] = message(error)
                    _say(rank, failed[rank], progress)
                    if options.fail_fast:
                        executor.cancel([x for x in batch + pending if not x.done()])
                        raise _failure(failed, len(items), fail_fast=True)
                progress.started.pop(rank, None)
                progress.done += 1
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
