"""Ctrl-C / SIGTERM: stop promptly (exit 130 / 143), never by raising inside the wasm engine (it cannot unwind
through ctypes and may crash): the engine traps on an epoch bump and the call raises after."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import threading
import weakref
from collections.abc import Iterator

_engines: weakref.WeakSet = weakref.WeakSet()
_children: weakref.WeakSet = weakref.WeakSet()  # subprocess.Popen of pass-1 workers
_requested: list[int] = []  # the signal received, once
_raised: list[int] = []  # Interrupted made since (a signal held back need not come again)
_in_engine = 0  # how deep the main thread is inside engine calls
_holding = 0  # inside ``held``: a signal raises when it ends


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: the command stops, exit code 128 + signal number."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum
        _raised.append(signum)


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


REDELIVER_S = 0.02  # a signal that landed inside an import comes back this much later


def _wasmtime_dir() -> str:
    spec = importlib.util.find_spec("wasmtime")
    return os.path.dirname(spec.origin) + os.sep if spec and spec.origin else "\0"


_WASMTIME = _wasmtime_dir()


def _cannot_raise(frame) -> bool:
    """Whether the main thread is where an exception would be swallowed or changed: the import machinery
    ("Exception ignored in ... _ModuleLock", ``RuntimeError: Error calling __set_name__``) or wasmtime's own
    Python code, which the engine calls back through ctypes (a finalizer run by the garbage collector prints
    "Exception ignored on calling ctypes callback function" and goes on)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib") or name.startswith(_WASMTIME):
            return True
        frame = frame.f_back
    return False


def _again(signum: int) -> None:
    """The signal once more, unless the command is stopping already (its ``Interrupted``
    raised meanwhile, by ``check`` in a loop): raised twice, click would say "Aborted!"."""
    if not _raised:
        os.kill(os.getpid(), signum)


def _handler(signum: int, frame) -> None:
    if not _requested:
        _requested.append(signum)
    _stop_work()
    if _in_engine or _holding:
        return  # inside the engine (it traps at its next check) or held: raised after
    if _cannot_raise(frame):  # let the import or callback finish; the signal comes back to raise after it
        _raised.clear()
        timer = threading.Timer(REDELIVER_S, _again, (signum,))
        timer.daemon = True
        timer.start()
        return
    raise Interrupted(_requested[0])


_previous_unraisable: list = []


def _unraisable(unraisable) -> None:
    """An ``Interrupted`` raised where Python cannot pass it on (a weakref callback, a ``__del__``) is not
    printed as "Exception ignored": the stop stays requested, and the next ``check`` or engine call (which
    traps: its epoch was bumped) raises it."""
    if isinstance(unraisable.exc_value, Interrupted):
        _raised.clear()
        return
    _previous_unraisable[0](unraisable)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block no signal raises inside (a call into the wasm engine, a step of a commit that
    must not stop half done); afterwards an interrupted block raises ``Interrupted``."""
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


engine_call = deferred  # wraps every call into the wasm engine


def install(command_line: bool = False) -> None:
    """Handle SIGINT where Python's default handler is set (a library user's own stays); the command line
    takes SIGINT and SIGTERM regardless. A no-op outside the main thread (only it can set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if command_line or signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _handler)
        _watch_wakeups()
        if not _previous_unraisable:
            _previous_unraisable.append(sys.unraisablehook)
            sys.unraisablehook = _unraisable
    if command_line:
        signal.signal(signal.SIGTERM, _handler)


_watcher: list[threading.Thread] = []


def _watch_wakeups() -> None:
    """A thread woken by the signal itself (``signal.set_wakeup_fd``) stops the engine while the main thread,
    busy in a long engine call, cannot run Python's handler. Skipped when the fd is taken."""
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


@contextlib.contextmanager
def held() -> Iterator[None]:
    """No ``Interrupted`` raised in the block (a fork: in at-fork callbacks it is only "Exception ignored",
    logging's lock left as it was); the caller's ``check()`` after raises it, once it can undo the block."""
    global _holding
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1


def started(thread: threading.Thread) -> None:
    """Start ``thread`` whole: a signal while ``start`` waits for it to run raises only after, so the caller
    holds a running thread it can join (one stopped half-started cannot be joined)."""
    with held():
        thread.start()
    check()


def forget() -> None:
    """A new process (a forked child): no stop request inherited."""
    _requested.clear()
    _raised.clear()


def new_work() -> None:
    """A new top-level job starts (a load called from the main thread): a stop request its
    caller has already handled (Ctrl-C in a notebook, then another load) is forgotten."""
    if threading.current_thread() is threading.main_thread() and _in_engine == 0:
        _requested.clear()
        _raised.clear()

