"""The one process layer: child processes, how they start and stop, and the heap's settings.

Children are forked where that is safe (Linux, no other thread: a forked child would inherit
locks held by the others) with the modules already imported, else spawned as new interpreters
(``python -m traceaug.processes``; never ``multiprocessing``'s spawn, which re-runs the
caller's ``__main__``). A child resets its signal actions (its parent stops it, killed at once
by Ctrl-C: ``interrupt.watch_child``) and runs as a job's worker (``runtime.Runtime.worker``).
``Workers`` serve ``fn(*args)`` over pipes, results in submission order (pass 1's chunks, the
prefetch); ``LocalPool`` runs a job's rank tasks (``job.executor``).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import contextvars
import ctypes
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
from functools import lru_cache
from typing import Any

from . import interrupt, runtime

# ----- the heap (glibc; elsewhere a no-op) ------------------------------------------------------
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc malloc.h)
TRIM_THRESHOLD, MMAP_THRESHOLD = 128 << 10, 32 << 20
REUSE_TRIM_THRESHOLD = 64 << 20  # pass-1 processes: keep freed chunk memory for the next chunk
# The same settings for a spawned child, through glibc's environment variables.
REUSE_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
             "MALLOC_TRIM_THRESHOLD_": str(REUSE_TRIM_THRESHOLD)}


@lru_cache(maxsize=1)
def _libc():
    """The C library already loaded in this process (``find_library`` runs ldconfig)."""
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:
        return None


def release_free_memory() -> None:
    """Give freed heap back to the system now (``malloc_trim``): pass 1's parsed JSON before
    the engine grows."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def return_freed_promptly() -> None:
    """The command line's process: give freed heap back once 128 KiB sit free at its top
    (glibc's own threshold grows to 64 MB), buffers up to 32 MB kept on the heap."""
    _thresholds(TRIM_THRESHOLD)


def reuse_freed() -> None:
    """Pass-1 children: keep up to 64 MB of freed heap for the next chunk."""
    _thresholds(REUSE_TRIM_THRESHOLD)


def _thresholds(trim: int) -> None:
    libc = _libc()
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, trim)


# ----- the machine ------------------------------------------------------------------------------
def available_ram() -> int:
    """Bytes of RAM available now (``MemAvailable``; total RAM where that is not known)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# ----- starting children --------------------------------------------------------------------------
def can_fork() -> bool:
    """Fork only where it is safe: Linux, and no other thread (but the signal watcher)."""
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    return sys.platform == "linux" and all(interrupt.is_watcher(t) for t in others)


def child_start(worker: runtime.Runtime | None = None) -> None:
    """A child's first act: default signal actions (its parent stops it), no inherited stop
    request; ``worker``: the runtime its tasks run with."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)  # the parent's watcher reads that pipe, not this process
    interrupt.forget()
    runtime.enter(worker or runtime.current().for_worker())


def _pool_start(worker: runtime.Runtime) -> None:
    """A job's pool process: a child whose Ctrl-C is the parent's (it cancels the job)."""
    child_start(worker)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class WorkerFailed(Exception):
    """A child process died or could not start."""


_LENGTH = struct.Struct("<Q")


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


def spawn() -> subprocess.Popen:
    """A new interpreter serving requests (``main``), with this process's import path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **REUSE_ENV}
    return subprocess.Popen([sys.executable, "-m", "traceaug.processes"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


class Forked:
    """A forked child with the part of ``subprocess.Popen`` its users need."""

    def __init__(self, pid: int, stdout, stdin=None) -> None:
        self.pid, self.stdout, self.stdin, self.returncode = pid, stdout, stdin, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The child's exit code once it ends (``subprocess.TimeoutExpired`` after ``timeout``)."""
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
    """Run ``work(inp, out)`` in a forked child (``inp``: a pipe from here when ``requests``;
    ``out``: a pipe back), which then exits at once, never back into this process's command.
    The child closes its copies of the pipes to this process's other children (one held open
    would keep that child from seeing its end)."""
    read, write = os.pipe()
    req_read, req_write = os.pipe() if requests else (None, None)
    with interrupt.held():  # no Interrupted raised inside the at-fork callbacks
        pid = os.fork()
        if pid == 0:
            try:
                child_start()
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


def _serve(requests, results) -> None:
    """A child's loop: ``(fn, args)`` in (a pipe, or an iterator of them), ``fn(*args)`` out,
    until end of input; freed heap kept for the next request (a spawned child's environment
    says so: ``REUSE_ENV``)."""
    reuse_freed()
    while True:
        try:
            fn, args = recv(requests) if hasattr(requests, "read") else next(requests)
        except (EOFError, StopIteration):
            return
        send(results, fn(*args))


class Child:
    """One call ``fn(*args)`` in a child process of its own, its result taken once."""

    def __init__(self, fn: Callable, *args: Any, preload: Callable[[], None] | None = None) -> None:
        try:
            if can_fork():
                if preload is not None:
                    preload()
                self.proc = fork(lambda _, out: _serve(iter([(fn, args)]), out))
            else:
                self.proc = spawn()
                send(self.proc.stdin, (fn, args))
                self.proc.stdin.close()
        except OSError as e:
            raise WorkerFailed(str(e)) from None
        interrupt.watch_child(self.proc)  # killed at once by Ctrl-C / SIGTERM

    def result(self) -> Any:
        """``fn(*args)``; ``WorkerFailed`` when the child died. The child has ended since."""
        try:
            return recv(self.proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            raise WorkerFailed(f"child process exited with {self.proc.poll()}") from None
        finally:
            self.close()

    def close(self) -> None:
        if self.proc.poll() is None and not self.proc.stdout.closed:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()
        self.proc.kill()
        self.proc.wait()


class Workers:
    """``n`` child processes serving ``fn(*args)`` requests, round-robin, results in submission
    order; a writer thread per child keeps a large request from blocking on a child that is
    itself waiting to hand back a result. ``preload``: modules a forked child starts with."""

    def __init__(self, n: int, preload: Callable[[], None] | None = None) -> None:
        try:
            if can_fork():
                if preload is not None:
                    preload()
                self.procs = [fork(_serve, requests=True) for _ in range(n)]
            else:
                self.procs = [spawn() for _ in range(n)]
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
    def _write(proc, q: queue.Queue) -> None:
        try:
            while (request := q.get()) is not None:
                send(proc.stdin, request)
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the reader sees the child's end of file

    def submit(self, fn: Callable, *args: Any) -> None:
        self.queues[self.sent % len(self.procs)].put((fn, args))
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
            raise WorkerFailed(f"worker process exited with {proc.poll()}") from None

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

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        # A signal while closing (it kills the children) is raised after it, and only where
        # nothing unwinds: a generator dropped mid-read closes its pool from the garbage
        # collector, where an exception is "Exception ignored" and a traceback.
        with interrupt.held():
            self.close()
        if exc[0] is None:
            interrupt.check()


# ----- a job's local pool -------------------------------------------------------------------------
class Threads(cf.ThreadPoolExecutor):
    """A thread pool whose tasks run with the submitter's runtime (``runtime.using``)."""

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> cf.Future:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)


def _run_tasks(requests, results) -> None:
    """A pool child's loop: ``(fn, args)`` in, ``(True, fn(*args))`` or ``(False, error)``
    out, until end of input; Ctrl-C is the parent's (it cancels the job)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            fn, args = recv(requests)
        except EOFError:
            return
        try:
            answer = (True, fn(*args))
        except BaseException as e:
            answer = (False, e)
        try:
            send(results, answer)
        except (pickle.PicklingError, TypeError, AttributeError) as e:  # an error that will not pickle
            send(results, (False, WorkerFailed(f"{type(answer[1]).__name__}: {answer[1]}; {e}")))


class Pool:
    """``size`` children running a job's tasks, ``fn(*args)`` each, forked with the modules
    ``preload`` imports; their results futures, set as they finish. Each child has its own
    pipes: a child killed mid-task fails that task (``WorkerFailed``), never the others nor
    the pool. Threads in this process where a fork is not safe (``processes`` False)."""

    def __init__(self, size: int, processes: bool = True,
                 preload: Callable[[], None] | None = None) -> None:
        self.size = size
        self.processes = processes and can_fork()
        if not self.processes:
            self.threads = Threads(size)
            return
        if preload is not None:
            preload()
        self._lock = threading.Lock()
        self._queue: list = []  # (future, fn, args) not yet given to a child
        self._busy: dict[int, cf.Future] = {}
        self._idle: list[int] = []
        self.children: list[Forked] = []
        self._readers: list[threading.Thread] = []
        for i in range(size):
            child = fork(_run_tasks, requests=True)
            interrupt.watch_child(child)  # killed at once by Ctrl-C / SIGTERM
            self.children.append(child)
            self._idle.append(i)
            reader = threading.Thread(target=self._read, args=(i,), daemon=True,
                                      name=f"traceaug-pool-{i}")
            reader.start()
            self._readers.append(reader)

    def submit(self, fn: Callable, /, *args: Any) -> cf.Future:
        if not self.processes:
            return self.threads.submit(fn, *args)
        future: cf.Future = cf.Future()
        with self._lock:
            if not self._idle and not self._busy:
                raise WorkerFailed("every worker process of the pool has ended")
            self._queue.append((future, fn, args))
            self._dispatch()
        return future

    def _dispatch(self) -> None:
        """Each idle child its next task (under the lock)."""
        while self._idle and self._queue:
            future, fn, args = self._queue.pop(0)
            if not future.set_running_or_notify_cancel():
                continue
            i = self._idle.pop(0)
            self._busy[i] = future
            try:
                send(self.children[i].stdin, (fn, args))
            except (BrokenPipeError, OSError):  # the child is gone: its reader fails the task
                pass

    def _read(self, i: int) -> None:
        child = self.children[i]
        while True:
            try:
                ok, value = recv(child.stdout)
            except (EOFError, OSError, pickle.UnpicklingError):
                break
            with self._lock:
                future = self._busy.pop(i)
                self._idle.append(i)
                self._dispatch()
            future.set_result(value) if ok else future.set_exception(value)
        with self._lock:  # the child ended (killed, or told to): its task fails
            future = self._busy.pop(i, None)
            if i in self._idle:
                self._idle.remove(i)
            left = self._queue if not self._busy and not self._idle else []
            self._queue = [] if left else self._queue
        code = child.wait()
        for f in [future] if future is not None else []:
            f.set_exception(WorkerFailed(f"worker process exited with {code}"))
        for f, _, _ in left:
            if f.set_running_or_notify_cancel():
                f.set_exception(WorkerFailed("every worker process of the pool has ended"))

    def running(self, futures: list) -> list:
        """The futures of ``futures`` a child runs now."""
        if not self.processes:
            return [f for f in futures if f.running()][:self.size]
        with self._lock:
            busy = set(map(id, self._busy.values()))
        return [f for f in futures if id(f) in busy]

    def kill(self) -> None:
        """Stop running tasks now: nothing they write is kept."""
        if self.processes:
            for child in self.children:
                child.kill()

    def shutdown(self) -> None:
        """Cancel the tasks not started, let the children end, wait for them."""
        if not self.processes:
            self.threads.shutdown(wait=True, cancel_futures=True)
            return
        with self._lock:
            waiting, self._queue = self._queue, []
            self._idle.clear()
        for future, _, _ in waiting:
            future.cancel()
        for child in self.children:
            with contextlib.suppress(OSError):
                child.stdin.close()  # the child sees its requests end and exits
        for reader in self._readers:
            reader.join()
        for child in self.children:
            child.stdout.close()


def main() -> None:
    """A spawned child: requests on stdin, results on stdout."""
    child_start()
    _serve(sys.stdin.buffer, sys.stdout.buffer)
    os._exit(0)  # at once: unloading numpy would keep its memory while the parent grows


if __name__ == "__main__":
    main()
