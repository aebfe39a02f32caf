"""Pass 1 of small traces (``FROM`` to ``UP_TO`` raw bytes) in child processes, overlapping the engine's
start; a load takes the plan (``take``). Only an optimization: on failure the load plans again in-process."""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import TYPE_CHECKING

import traceaug.processes as processes

from . import source
from .kinds import kind_of
from .nsys import is_sqlite

if TYPE_CHECKING:
    from .normalize import Plan

UP_TO = 48 << 20  # raw bytes: larger traces run pass 1 in worker processes anyway
FROM = 1 << 20  # raw bytes: a smaller trace's pass 1 (~8 ms a MB) costs less than a child's start
_pending: dict[tuple[Path, str], tuple[processes.Pool, object]] = {}  # its child, its plan


def _key(path: Path, kind: str | None) -> tuple[Path, str]:
    return Path(path).resolve(), kind_of(kind).name


def _preload() -> None:
    from . import normalize  # noqa: F401  (imported before the fork: the child has it)


def start(files: list[Path], kind: str) -> None:
    """Plan each of ``files`` (local trace files; an nsys export is left to the command, which
    checks its outputs against it first) for a load of ``kind``, each in a child of its own."""
    for path in files:
        key = _key(path, kind)
        try:
            if key in _pending or is_sqlite(path) or not FROM <= source.raw_size_estimate(path) <= UP_TO:
                continue
            child = processes.Pool(1, _preload, spawn=True, reuse_heap=True)
            _pending[key] = child, child.submit(_plan, path, key[1])
        except (OSError, processes.WorkerFailed):
            continue  # unreadable: the load says so


def _plan(path: Path, kind: str) -> tuple[str, Plan | str]:
    """("plan", Plan) or ("failed", reason), the chunks' heap released before it is sent."""
    from .normalize import plan

    try:
        result = ("plan", plan(path, kind=kind, workers=0))
    except Exception as e:  # the load plans again in-process and reports it properly
        result = ("failed", str(e))
    processes.release_free_memory()
    return result


def pending(path: Path, kind: str | None) -> bool:
    """Whether a child is planning ``path`` for a load of ``kind``."""
    return _key(path, kind) in _pending


def take(path: Path, kind: str | None) -> Plan | None:
    """The child's plan of ``path`` for ``kind``, or None (none started, or it failed); its
    child ends before the engine grows."""
    child, planned = _pending.pop(_key(path, kind), (None, None))
    if child is None:
        return None
    try:
        what, plan = planned.result()
    except processes.WorkerFailed:
        what, plan = "failed", None
    child.shutdown()  # it ends now: its memory is gone before the engine grows
    return plan if what == "plan" else None


def close() -> None:
    """Stop children whose plans were never taken."""
    while _pending:
        child, _ = _pending.popitem()[1]
        child.kill()
        child.shutdown()


atexit.register(close)
