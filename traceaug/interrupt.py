"""Ctrl-C and SIGTERM: stop promptly, and never by raising inside the wasm engine.

A ``KeyboardInterrupt`` raised in a host function the engine called (through ctypes)
cannot unwind the wasm stack: wasmtime reports it as ignored and may crash. So the handler
never raises while the main thread is inside the engine: it bumps the epoch of every
wasmtime engine (their stores trap at the next function entry or loop), kills the pass-1
worker processes, and the engine call raises ``Interrupted`` once it has returned.
Everywhere else it raises ``Interrupted`` at once. Other threads stop at their next
``check()`` (every block read, every engine call). Exit codes: 130 (SIGINT), 143 (SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import weakref
from collections.abc import Iterator

_engines: weakref.WeakSet = weakref.WeakSet()
_children: weakref.WeakSet = weakref.WeakSet()  # subprocess.Popen of pass-1 workers
_requested: list[int] = []  # the signal received, once
_in_engine = 0  # how deep the main thread is inside engine calls


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: the command stops, exit code 128 + signal number."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


def requested() -> bool:
    """True once a signal asked this process to stop."""
    return bool(_requested)


def check() -> None:
    """Raise ``Interrupted`` when a signal asked to stop (for loops in any thread)."""
    if _requested:
        raise Interrupted(_requested[0])


def watch_engine(engine) -> None:
    """A wasmtime Engine whose stores trap when a signal arrives (epoch interruption)."""
    _engines.add(engine)
    if _requested:
        engine.increment_epoch()


def watch_child(proc) -> None:
    """A worker process killed when a signal arrives (it only serves this one)."""
    _children.add(proc)


def _stop_work() -> None:
    for engine in list(_engines):
        engine.increment_epoch()
    for proc in list(_children):
        with contextlib.suppress(OSError):
            proc.kill()  # never reaps (the owner waits for it): safe in a handler


def _handler(signum: int, frame) -> None:
    if not _requested:
        _requested.append(signum)
    _stop_work()
    if _in_engine == 0:
        raise Interrupted(_requested[0])
    # inside the engine: it traps at its next check; engine_call raises on the way out


@contextlib.contextmanager
def engine_call() -> Iterator[None]:
    """Wrap every call into the wasm engine: no signal raises inside it; afterwards an
    interrupted call raises ``Interrupted``."""
    global _in_engine
    main = threading.current_thread() is threading.main_thread()
    if main:
        _in_engine += 1
    try:
        yield
    finally:
        if main:
            _in_engine -= 1
    check()


def install(command_line: bool = False) -> None:
    """Use the handler for SIGINT where Python's default one is set (a library user's own
    handler stays); the command line takes SIGINT and SIGTERM whatever was set. Only the
    main thread can set handlers; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        return
    if command_line or signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _handler)
        _watch_wakeups()
    if command_line:
        signal.signal(signal.SIGTERM, _handler)


_watcher: list[threading.Thread] = []


def _watch_wakeups() -> None:
    """Python runs a signal handler in the main thread between bytecodes, so not while that
    thread runs a long engine call (a recursive query): a thread woken by the signal itself
    (``signal.set_wakeup_fd``) stops the engine meanwhile. Skipped when the fd is taken."""
    if _watcher:
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:  # not the main thread of the main interpreter
        os.close(read)
        os.close(write)
        return
    if previous != -1:  # someone else's (an event loop): leave it to them
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)
        return

    def watch() -> None:
        while data := os.read(read, 64):
            for signum in data:
                if signum in (signal.SIGINT, signal.SIGTERM) and \
                        signal.getsignal(signum) is _handler:
                    if not _requested:
                        _requested.append(signum)
                    _stop_work()

    thread = threading.Thread(target=watch, name="traceaug-signals", daemon=True)
    thread.start()
    _watcher.append(thread)


def is_watcher(thread: threading.Thread) -> bool:
    """The signal-watching thread: blocked in a read, holding no lock, safe across a fork."""
    return thread in _watcher


def reset_in_child() -> None:
    """In a forked child: default signal actions, no inherited stop request."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)  # the parent's watcher reads that pipe, not this process
    _requested.clear()


def new_work() -> None:
    """A new top-level job starts (a load called from the main thread): a stop request its
    caller has already handled (Ctrl-C in a notebook, then another load) is forgotten."""
    if threading.current_thread() is threading.main_thread() and _in_engine == 0:
        _requested.clear()

