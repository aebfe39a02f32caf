"""Pass 1 of small traces in child processes, started before the engine and pandas load.

A command's imports (pandas, the perfetto API, wasmtime) take about a third of a second
of one core, and pass 1 of a trace under ``UP_TO`` raw bytes takes about as long on the
other: the command line starts the children first, so the two overlap. A child's plan is
an optimization only: when a child fails, the loader plans in-process and reports any
problem with the file itself.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TraceaugError
from . import source
from .inputs import resolve
from .workers import recv, send, spawn

if TYPE_CHECKING:
    from .normalize import Plan

UP_TO = 48 << 20  # raw bytes: larger traces run pass 1 in worker processes anyway


class Prefetched:
    """Plans being made in child processes, one per (file, load kind)."""

    def __init__(self) -> None:
        self._children: dict[tuple[Path, bool, bool], subprocess.Popen] = {}
        atexit.register(self.close)

    def start(self, path: Path, full: bool, gpu_only: bool) -> None:
        """Plan ``path`` in a child (if it is small enough and the child starts)."""
        key = (path.resolve(), full, gpu_only)
        if key in self._children or source.raw_size_estimate(path) > UP_TO:
            return
        try:
            child = spawn("traceaug.read.prefetch")
            send(child.stdin, (str(path), full, gpu_only))
            child.stdin.close()
        except OSError:
            return
        self._children[key] = child

    def take(self, path: Path, full: bool, gpu_only: bool) -> Plan | None:
        """The child's ``normalize.Plan`` for this load, or None (none started, or it failed)."""
        child = self._children.pop((Path(path).resolve(), full, gpu_only), None)
        if child is None:
            return None
        try:
            kind, plan = pickle.load(child.stdout)  # streamed: no second copy of the held bytes
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


def start(inputs: list[Path], full: bool = False, gpu_only: bool = False) -> Prefetched:
    """Plan in children the files ``inputs`` name, when each names one file (a lone trace or
    a directory holding one rank): with more ranks, loads already run two at a time."""
    pre = Prefetched()
    try:
        files = [resolve(p) for p in inputs]
    except (TraceaugError, OSError):
        return pre  # the command reports it
    if all(len(f) == 1 for f in files):
        for (tf,) in files:
            try:
                pre.start(tf.path, full, gpu_only)
            except OSError:
                pass  # unreadable: the loader says so
    return pre


def main() -> None:
    """Child: read (path, full, gpu_only), send back ("plan", Plan) or ("failed", reason)."""
    from ..memory import release_free_memory, return_freed_promptly
    from .normalize import plan

    return_freed_promptly()  # its peak adds to the parent's: keep it low, as the CLI does
    path, full, gpu_only = recv(sys.stdin.buffer)
    try:
        result = ("plan", plan(Path(path), full=full, gpu_only=gpu_only, workers=0))
    except Exception as e:  # the parent plans again in-process and reports it properly
        result = ("failed", str(e))
    release_free_memory()  # the parsed chunks' heap, while the parent takes the plan
    pickle.dump(result, sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.flush()
    os._exit(0)  # at once: unloading numpy would keep its memory alive while the parent grows


if __name__ == "__main__":
    main()
