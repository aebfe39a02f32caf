"""Pass 1 of small traces in child processes, started before the engine loads.

A command's imports (the perfetto API, wasmtime) and its engine's start take a core while
pass 1 of a trace under ``UP_TO`` raw bytes takes the other: the command line starts the
children first, so the two overlap. A child's plan is an optimization only: when a child
fails, the loader plans in-process and reports any problem with the file itself.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .. import interrupt
from ..errors import TraceaugError
from ..job.ranks import resolve
from . import source
from .kinds import kind_of
from .nsys import is_sqlite
from .workers import Forked, can_fork, fork, recv, send, spawn

if TYPE_CHECKING:
    from .normalize import Plan

UP_TO = 48 << 20  # raw bytes: larger traces run pass 1 in worker processes anyway


class Prefetched:
    """Plans being made in child processes, one per (file, load kind)."""

    def __init__(self) -> None:
        self._children: dict[tuple[Path, str], subprocess.Popen | Forked] = {}
        atexit.register(self.close)

    def start(self, path: Path, full: bool = False, only: str | None = None,
              kind: str | None = None) -> None:
        """Plan ``path`` for a load of ``kind`` (or the older ``full`` / ``only``) in a child
        (if it is small enough and the child starts)."""
        kind = kind_of(kind, full=full, only=only).name
        key = (path.resolve(), kind)
        if key in self._children or source.raw_size_estimate(path) > UP_TO:
            return
        try:
            if can_fork():
                from . import normalize  # noqa: F401  (imported before the fork: the child has it)

                child = fork(lambda _, out: _plan_and_send(path, kind, out))
            else:
                child = spawn("traceaug.read.prefetch")
                send(child.stdin, (str(path), kind))
                child.stdin.close()
        except OSError:
            return
        interrupt.watch_child(child)  # killed at once by Ctrl-C / SIGTERM
        self._children[key] = child

    def take(self, path: Path, full: bool = False, only: str | None = None,
             kind: str | None = None) -> Plan | None:
        """The child's ``normalize.Plan`` for this load, or None (none started, or it failed)."""
        key = (Path(path).resolve(), kind_of(kind, full=full, only=only).name)
        child = self._children.pop(key, None)
        if child is None:
            return None
        try:
            kind, plan = pickle.load(child.stdout)
        except (EOFError, OSError, pickle.UnpicklingError, ValueError):
            kind, plan = "failed", None
            child.kill()
        child.stdout.close()
        child.wait()  # it ends right after sending: its memory is gone before the engine grows
        return plan if kind == "plan" else None

    def close(self) -> None:
        """Stop children whose plans were never taken."""
        for child in self._children.values():
            child.kill()
            child.stdout.close()
            child.wait()
        self._children.clear()


def start(inputs: list[Path], full: bool = False, only: str | None = None,
          kind: str | None = None) -> Prefetched:
    """Plan in children the files ``inputs`` name, when each names one file (a lone trace or
    a directory holding one rank): with more ranks, loads already run two at a time. An nsys
    export is not converted here: the command checks its outputs against it first."""
    pre = Prefetched()
    try:
        files = [resolve(p, quiet=True) for p in inputs]
    except (TraceaugError, OSError):
        return pre  # the command reports it
    if all(len(f) == 1 for f in files):
        for (tf,) in files:
            if is_sqlite(tf.path):
                continue
            try:
                pre.start(tf.path, full, only, kind)
            except OSError:
                pass  # unreadable: the loader says so
    return pre


def start_ranks(directory: Path, rank: int | None, kind: str) -> Prefetched:
    """Pass 1 of a directory's one rank (``rank``, or its only one) in a child, if under
    ``UP_TO``; several ranks run in the job's pool (``job.executor``), whose processes plan
    them."""
    from ..job.ranks import select

    pre = Prefetched()
    try:
        budget = UP_TO
        files = select(directory, rank, quiet=True)
        if len(files) > 1:
            return pre  # the ranks run in a pool (job.executor): its processes plan them
        for f in [f.path for f in files if not is_sqlite(f.path)]:
            budget -= source.raw_size_estimate(f)
            if budget < 0:
                break
            pre.start(f, kind=kind)
    except (TraceaugError, OSError):
        pass  # the loader reports it
    return pre


def _plan_and_send(path: Path, kind: str, out) -> None:
    """Send ("plan", Plan) or ("failed", reason) to ``out``."""
    from ..memory import release_free_memory, reuse_freed
    from .normalize import plan

    reuse_freed()  # a fork inherits the command's prompt return of freed memory: undo it
    try:
        result = ("plan", plan(path, kind=kind, workers=0))
    except Exception as e:  # the parent plans again in-process and reports it properly
        result = ("failed", str(e))
    release_free_memory()  # the parsed chunks' heap, while the parent takes the plan
    pickle.dump(result, out, protocol=pickle.HIGHEST_PROTOCOL)  # streamed: no second copy
    out.flush()


def main() -> None:
    """Spawned child (where fork is not safe): read (path, kind) on stdin."""
    path, kind = recv(sys.stdin.buffer)
    _plan_and_send(Path(path), kind, sys.stdout.buffer)
    os._exit(0)  # at once: unloading numpy would keep its memory alive while the parent grows


if __name__ == "__main__":
    main()
