"""A small pool of pass-1 worker processes that exchange pickles over pipes.

Not ``multiprocessing``: its spawn start method re-runs the caller's ``__main__``
(breaking any user script without a main guard), and fork is unsafe in a process
whose other threads run the wasm engine. Workers are forked where that is safe (``can_fork``:
Linux, no other thread; a forked worker starts with pass 1's modules imported, where a new
interpreter takes ~0.2 s of a core), else spawned. Requests go round-robin and results come
back in submission order; a writer thread per worker keeps a large request from
blocking on a worker that is itself waiting to hand back a result. ``spawn``, ``fork``,
``send`` and ``recv`` also start and talk to ``read.prefetch``'s child.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .. import interrupt
from ..memory import REUSE_ENV

_LENGTH = struct.Struct("<Q")


class WorkerFailed(Exception):
    """A worker process died or could not start."""


def spawn(module: str) -> subprocess.Popen:
    """``python -m module`` with this process's import path; pipes on stdin and stdout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **REUSE_ENV}
    return subprocess.Popen([sys.executable, "-m", module], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def can_fork() -> bool:
    """Fork only where it is safe: Linux, and no other thread (no engine running, no
    writer thread: a forked child would inherit their locks held)."""
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    return sys.platform == "linux" and all(interrupt.is_watcher(t) for t in others)


class Forked:
    """A forked child with the part of ``subprocess.Popen`` its users need (``stdin`` is
    None for a child that only sends)."""

    def __init__(self, pid: int, stdout, stdin=None) -> None:
        self.pid, self.stdout, self.stdin, self.returncode = pid, stdout, stdin, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The child's exit code once it ends; ``subprocess.TimeoutExpired`` after
        ``timeout`` seconds, as Popen's."""
        if timeout is not None:
            deadline = time.monotonic() + timeout
            while self.poll() is None:
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout)
                time.sleep(0.005)
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


_forked: weakref.WeakSet[Forked] = weakref.WeakSet()  # children this process talks to


def fork(work: Callable[[Any, Any], None], requests: bool = False) -> Forked:
    """Run ``work(inp, out)`` in a forked child (``inp``: a pipe from here when ``requests``,
    else None; ``out``: a pipe back), which then exits at once: never back into this
    process's command, its atexit handlers or its buffers. The child closes its copies of
    this process's pipes to its other children: a worker holding another's request pipe
    open would keep that one from ever seeing its end."""
    read, write = os.pipe()
    req_read, req_write = os.pipe() if requests else (None, None)
    with interrupt.held():  # no Interrupted raised inside the at-fork callbacks
        pid = os.fork()
        if pid == 0:
            try:
                interrupt.reset_in_child()  # the parent stops it; a signal to the group ends it
            except BaseException:
                os._exit(1)
    if pid == 0:
        try:
            for f in [f for child in _forked for f in (child.stdout, child.stdin)
                      if f is not None and not f.closed]:
                os.close(f.fileno())
            os.close(read)
            if req_write is not None:
                os.close(req_write)
            work(os.fdopen(req_read, "rb") if req_read is not None else None,
                 os.fdopen(write, "wb"))
        finally:
            os._exit(0)
    os.close(write)
    if req_read is not None:
        os.close(req_read)
    child = Forked(pid, os.fdopen(read, "rb"), os.fdopen(req_write, "wb") if requests else None)
    _forked.add(child)
    if interrupt.requested():  # a signal during the fork: this child is not to run either
        child.kill()
        interrupt.check()
    return child


def send(stream, obj: Any) -> None:
    """One length-prefixed pickle to a child's pipe (or from a child)."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)))
    stream.write(data)
    stream.flush()


def recv(stream) -> Any:
    """The next object ``send`` wrote; ``EOFError`` when the other end is gone."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError
    (n,) = _LENGTH.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


class Pool:
    """``workers`` processes running ``traceaug.read.pass1.read_chunk``."""

    def __init__(self, workers: int) -> None:
        try:
            if can_fork():
                from . import pass1  # noqa: F401  (imported before the fork: the workers have it)

                self.procs = [fork(_serve, requests=True) for _ in range(workers)]
            else:
                self.procs = [spawn("traceaug.read.workers") for _ in range(workers)]
        except OSError as e:
            raise WorkerFailed(str(e)) from None
        for p in self.procs:
            interrupt.watch_child(p)  # killed at once by Ctrl-C / SIGTERM
        self.queues: list[queue.Queue] = [queue.Queue() for _ in self.procs]
        self.writers = [threading.Thread(target=self._write, args=(p, q), daemon=True)
                        for p, q in zip(self.procs, self.queues)]
        for w in self.writers:
            w.start()
        self.sent = self.received = 0

    @staticmethod
    def _write(proc: subprocess.Popen | Forked, q: queue.Queue) -> None:
        try:
            while (request := q.get()) is not None:
                send(proc.stdin, request)
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the reader sees the worker's end of file

    def submit(self, *args: Any) -> None:
        self.queues[self.sent % len(self.procs)].put(args)
        self.sent += 1

    @property
    def pending(self) -> int:
        return self.sent - self.received

    def result(self) -> Any:
        """The next result in submission order."""
        proc = self.procs[self.received % len(self.procs)]
        self.received += 1
        try:
            return recv(proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            raise WorkerFailed(f"pass-1 worker exited with {proc.poll()}") from None

    def close(self) -> None:
        for q in self.queues:
            q.put(None)
        for p in self.procs:
            if self.pending:
                p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        # A signal while closing (it kills the workers) is raised after it, and only where
        # nothing is unwinding: a pass-1 generator dropped mid-read closes its pool from the
        # garbage collector, where an exception is "Exception ignored" and a traceback.
        with interrupt.held():
            self.close()
        if exc[0] is None:
            interrupt.check()


def _serve(requests, results) -> None:
    """Worker loop: one request in, one ``ChunkResult`` out, until end of input."""
    from ..memory import reuse_freed
    from .pass1 import read_chunk

    reuse_freed()  # as a spawned worker's environment sets it (``REUSE_ENV``)
    while True:
        try:
            args = recv(requests)
        except EOFError:
            return
        send(results, read_chunk(*args))


def main() -> None:
    """A spawned worker: requests on stdin, results on stdout."""
    _serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
