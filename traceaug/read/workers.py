"""A small pool of pass-1 worker processes that exchange pickles over pipes.

Not ``multiprocessing``: its spawn start method re-runs the caller's ``__main__``
(breaking any user script without a main guard), and fork is unsafe in a process
whose other threads run the wasm engine. Requests go round-robin and results come
back in submission order; a writer thread per worker keeps a large request from
blocking on a worker that is itself waiting to hand back a result. ``spawn``, ``send``
and ``recv`` also start and talk to ``read.prefetch``'s child.
"""

from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
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
    def _write(proc: subprocess.Popen, q: queue.Queue) -> None:
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
        self.close()


def main() -> None:
    """Worker loop: one request in, one ``ChunkResult`` out, until end of input."""
    from .pass1 import read_chunk

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            args = recv(stdin)
        except EOFError:
            return
        send(stdout, read_chunk(*args))


if __name__ == "__main__":
    main()
