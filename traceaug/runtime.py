"""How this process runs traceaug: one value, made at each entry (the command line, a library
call, a job's worker), read where it matters instead of sniffing argv or the environment."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Runtime:
    """How this process runs traceaug. A ``worker`` (a job's, in a pool or Dask) is stopped by its parent:
    no children, no progress, no signal handlers, no epoch checks."""

    command_line: bool = False  # the CLI owns the process (its signals end the command)
    worker: bool = False
    progress: bool | None = None  # progress lines on stderr (None: on a terminal)
    tp_bin: str | None = None  # a native trace_processor_shell
    workers: int | None = None  # pass-1 worker processes of one load (None: by its size)
    storage: dict = field(default_factory=dict, hash=False)  # fsspec options for URLs
    scratch: str | None = None  # a directory the run removes when it ends, killed workers' files too
    wide: bool = False  # terminal tables as wide as their cells, nothing cut (``--wide``)
    step_pattern: str | None = None  # a regex naming the serving steps' annotations (``--step-pattern``)
    capture: str | None = None  # a graph capture's trace or directory (``--capture``)

    @property
    def interruptible(self) -> bool:
        """Whether a signal can stop this process's engine calls (a worker's parent kills it)."""
        return not self.worker

    def shows_progress(self) -> bool:
        """Progress lines and notes on stderr: as asked, else when it is a terminal."""
        if self.worker:
            return False
        if self.progress is not None:
            return self.progress
        return sys.stderr.isatty() and not os.environ.get("TRACEAUG_NO_PROGRESS")

    def for_worker(self) -> Runtime:
        """This runtime as a job's worker runs it (what the parent sends with each task)."""
        return replace(self, command_line=False, worker=True, progress=False, workers=0)


_process = Runtime()
_call: ContextVar[Runtime | None] = ContextVar("traceaug_runtime", default=None)


def current() -> Runtime:
    """The runtime in effect: a library call's own, else the process's."""
    return _call.get() or _process


def enter(runtime: Runtime) -> None:
    """Set the process's runtime (an entry: the command line, a worker process starting)."""
    global _process
    _process = runtime


@contextlib.contextmanager
def using(rt: Runtime | None = None, **changes) -> Iterator[Runtime]:
    """``rt`` (default: the current runtime) with ``changes`` (those not None) for the block,
    in this thread (threads traceaug starts inside it inherit it: ``processes.Threads``)."""
    given = {k: v for k, v in changes.items() if v is not None}
    token = _call.set(replace(rt or current(), **given))
    try:
        yield current()
    finally:
        _call.reset(token)


def update(**changes) -> None:
    """Change the current runtime for the rest of the enclosing ``using`` block (the command
    line's options, read as it parses them)."""
    _call.set(replace(current(), **changes))
