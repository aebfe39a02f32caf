"""Load one trace file into a trace processor exactly, with clear errors: Chrome JSON via the normalizer,
other formats as is, fed from a worker thread; a trace too large for the 32-bit build retries on memory64."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import traceaug.interrupt as interrupt
import traceaug.runtime as runtime

from ..errors import EngineError, EngineOutOfMemory, TraceaugError
from ..processes import release_free_memory
from ..progress import Progress
from ..read import chunks, normalize, pass1, prefetch, source
from .backend import TraceProcessor

MEMORY64_ABOVE = 1_500_000_000  # raw JSON bytes beyond which the 32-bit heap is too small
# Bytes per parse call. Small: the engine copies each call's bytes into its receive buffer and the
# wasm heap never shrinks; 1 MB costs no throughput and lowers a full load's peak memory.
FEED = 1 << 20


@dataclass
class Loaded:
    """A loaded engine plus what the normalizer learned about the file."""

    tp: TraceProcessor
    plan: normalize.Plan | None
    memory64: bool


def _coalesce(pieces: Iterator[bytes]) -> Iterator[list[bytes]]:
    """Pieces grouped into parse calls of about ``FEED`` bytes (not joined: the wasm backend
    copies each piece straight into its heap)."""
    buf: list[bytes] = []
    n = 0
    for p in pieces:
        buf.append(p)
        n += len(p)
        if n >= FEED:
            yield buf
            buf, n = [], 0
    if buf:
        yield buf


def _feed(tp: TraceProcessor, pieces: Iterator[bytes], path: Path) -> None:
    """Parse pieces in a worker thread while the caller's generator makes the next."""
    q: queue.Queue = queue.Queue(maxsize=2)
    failure: list[BaseException] = []

    def work() -> None:
        while True:
            piece = q.get()
            if piece is None:
                return
            if failure:
                continue
            try:
                result = tp.backend.parse(piece)
                if result is not None and result.error:
                    failure.append(TraceaugError(f"{path}: {result.error}"))
            except BaseException as e:  # handed to the caller's thread
                failure.append(e)

    worker = threading.Thread(target=work, name="traceaug-feed", daemon=True)
    try:
        interrupt.started(worker)
        for piece in _coalesce(pieces):
            if failure:
                break
            q.put(piece)
    finally:
        # No signal may cut this wait short: the engine is closed after it, and closed under a parse still
        # running, the worker writes into freed memory (SIGSEGV). Its parse traps on the signal's epoch bump.
        with interrupt.held():
            q.put(None)
            if worker.is_alive():  # (not started: nothing to wait for)
                worker.join()
    interrupt.check()  # a signal held above
    if failure:
        raise failure[0]


INCOMPLETE = "JSON trace file is incomplete"


def _finalize(tp: TraceProcessor, path: Path, parsed: bool) -> None:
    """Perfetto's verdict at the end of the load; ``parsed``: pass 1 read the whole file as
    JSON, so "incomplete" would be untrue: an event Perfetto could not take is the cause."""
    error = tp.backend.notify_eof()
    if isinstance(error, str) and error:
        error = error.splitlines()[0]
        if parsed and error.startswith(INCOMPLETE):
            error = ("Perfetto could not read an event, though the JSON is complete (a value "
                     "of the wrong type, such as a ts that is not a number, or a duplicate key)")
        raise TraceaugError(f"{path}: {error}")


def _load_once(path: Path, plan: normalize.Plan | None, tp: TraceProcessor,
               report: Callable[[int], None]) -> TraceProcessor:
    """Feed and finalize the engine ``tp`` (``report``: bytes fed so far); closed on failure."""
    try:
        _feed(tp, normalize.engine_stream(plan, report) if plan is not None
              else source.iter_blocks(path, report), path)
        _finalize(tp, path, plan is not None)
        return tp
    except BaseException:
        tp.close()
        raise


def _early_engine(memory64: bool, bin_path: str | None) -> TraceProcessor | None:
    """An engine made while a child plans; None if that fails (it fails again, with the
    trace's name, when the loader makes its own)."""
    try:
        return TraceProcessor(memory64=memory64, bin_path=bin_path)
    except EngineError:
        return None


def load(path: Path, kind: str = "analysis", memory64: bool | None = None,
         label: str | None = None, on_plan: Callable[[normalize.Plan], None] | None = None
         ) -> Loaded:
    """Load ``path`` as the runtime says, or raise ``TraceaugError`` with a one-line reason. ``kind``: what
    the engine gets (``read.kinds.KINDS``); ``label``: progress name; ``on_plan(plan)`` runs after pass 1."""
    path = Path(path)
    rt = runtime.current()
    bin_path, workers = rt.tp_bin, rt.workers
    interrupt.new_work()
    source.check_readable(path)
    stored = source.stored_size(path)
    if memory64 is None:
        memory64 = source.raw_size_estimate(path) > MEMORY64_ABOVE
    progress = Progress(f"loading {label or path.name}", 2 * stored, rt.shows_progress())
    try:
        not_chrome = None
        prefetched = prefetch.pending(path, kind)
        early = _early_engine(memory64, bin_path) if prefetched else None
        try:
            plan = prefetch.take(path, kind) if prefetched else None
            if plan is None:
                plan = normalize.plan(path, progress.update, kind=kind, workers=workers)
            if on_plan is not None:
                on_plan(plan)
            release_free_memory()  # pass 1's freed JSON, before the engine grows
        except chunks.NotChromeJson as e:
            plan, not_chrome = None, e  # not Chrome JSON we can split: let Perfetto judge it
        except BaseException as e:
            if early is not None:
                early.close()
            if isinstance(e, (chunks.MalformedJson, pass1.BadValue)):  # every command's verdict, at once
                raise TraceaugError(f"{path}: {e}") from None
            raise
        def report(n: int) -> None:
            progress.update(stored + n)

        try:
            tp = _load_once(path, plan, early or TraceProcessor(memory64, bin_path), report)
        except EngineOutOfMemory:
            if memory64 or bin_path:
                raise TraceaugError(f"{path}: the trace processor ran out of memory") from None
            memory64 = True
            if plan is not None and plan.held is not None:  # fed and freed: read it again
                plan = normalize.plan(path, kind=kind, workers=workers)
            tp = _load_once(path, plan, TraceProcessor(memory64, bin_path), report)
        except EngineError as e:
            raise TraceaugError(f"{path}: {e}") from None
        except TraceaugError as e:  # Perfetto's bare "Unknown trace type": say what the file is not
            if not_chrome is None:
                raise
            raise TraceaugError(f"{path}: not a trace ({not_chrome}; nor a format Perfetto reads: "
                                f"{str(e).removeprefix(f'{path}: ')})") from None
    finally:
        progress.close()
    if not_chrome is not None and _is_empty(tp):
        tp.close()
        raise TraceaugError(f"{path}: not a trace ({not_chrome}; Perfetto imported no events)")
    return Loaded(tp=tp, plan=plan, memory64=memory64)


def _is_empty(tp: TraceProcessor) -> bool:
    n = tp.query("SELECT (SELECT COUNT(*) FROM slice) + (SELECT COUNT(*) FROM counter) "
                 "+ (SELECT COUNT(*) FROM thread WHERE tid > 0) AS n")
    return next(iter(n)).n == 0
