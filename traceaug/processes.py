"""Child processes and the heap's settings. Children are forked where safe (Linux, no other thread), else run
``python -m traceaug.processes`` (multiprocessing's spawn would re-run ``__main__``)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import contextvars
import ctypes
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import traceaug.interrupt as interrupt
import traceaug.runtime as runtime

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


class WorkerFailed(Exception):
    """A child process died or could not start."""


def send(stream, obj: Any) -> None:
    """One pickle to a child's pipe (or from a child), streamed: no second copy of a big plan."""
    pickle.dump(obj, stream, protocol=pickle.HIGHEST_PROTOCOL)
    stream.flush()


def recv(stream) -> Any:
    """The next object ``send`` wrote; ``EOFError`` when the other end is gone."""
    return pickle.load(stream)


def _spawn(reuse_heap: bool) -> subprocess.Popen:
    """A new interpreter running tasks (``main``), with this process's import path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           **(REUSE_ENV if reuse_heap else {})}
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

    def wait(self) -> int:
        """The child's exit code once it ends."""
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


_forked: weakref.WeakSet[Forked] = weakref.WeakSet()  # children this process talks to
_inherited: list = []  # in a child: other children's pipes, closed by number


def fork(work: Callable[[Any, Any], None], requests: bool = False) -> Forked:
    """Run ``work(inp, out)`` in a forked child that then exits (``inp``: a pipe from here if ``requests``;
    ``out``: a pipe back), closing its copies of other children's pipes so those see their end."""
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
            # Held to os._exit: collected, a file object would close its number again, by then the engine's
            _inherited[:] = [f for child in _forked for f in (child.stdout, child.stdin)
                             if f is not None and not f.closed]
            for f in _inherited:
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


# ----- a job's local pool -------------------------------------------------------------------------
class Threads(cf.ThreadPoolExecutor):
    """A thread pool whose tasks run with the submitter's runtime (``runtime.using``)."""

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> cf.Future:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """The pool's, its wait never cut short by a signal: its tasks may use engines the caller closes
        next (they trap on the signal's epoch bump: the wait stays short); the next ``check`` raises it."""
        with interrupt.held():
            super().shutdown(wait, cancel_futures=cancel_futures)


def _run_tasks_reusing(requests, results) -> None:
    """``_run_tasks``, freed heap kept for the next task (pass 1's chunks)."""
    reuse_freed()
    _run_tasks(requests, results)


def _run_tasks(requests, results) -> None:
    """A pool child's loop: ``(fn, args)`` pickled in, ``(True, fn(*args))`` or ``(False,
    error)`` out, until end of input; Ctrl-C is the parent's (it stops the pool)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            request = recv(requests)
        except EOFError:
            return
        try:  # read whole first: one that will not unpickle here fails alone
            fn, args = pickle.loads(request)
            value = fn(*args)
        except BaseException as e:
            try:  # whole, before any of it is written: an error that will not pickle
                data = pickle.dumps((False, e), protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, TypeError, AttributeError) as why:
                data = pickle.dumps((False, WorkerFailed(f"{type(e).__name__}: {e}; {why}")))
            results.write(data)
            results.flush()
            continue
        send(results, (True, value))


class Pool:
    """``size`` children running ``fn(*args)`` tasks as futures: forked (after ``preload``) where safe, else
    spawned (``spawn``) or threads. A child killed mid-task fails only its own tasks (``WorkerFailed``)."""

    DEPTH = 2  # tasks given to a child at once: the next starts as soon as one ends

    def __init__(self, size: int, preload: Callable[[], None] | None = None,
                 spawn: bool = False, reuse_heap: bool = False, threads: bool = False) -> None:
        self.size = size
        self.processes = not threads and (can_fork() or spawn)
        if not self.processes:
            self.threads = Threads(size)
            return
        forking = can_fork()
        if forking and preload is not None:
            preload()
        self._lock = threading.Lock()
        self._queue: list = []  # (future, pickled (fn, args)) not yet given to a child
        self._given: dict[int, list[cf.Future]] = {}  # per child, its tasks in order
        self.children: list = []
        self._sending: list[queue.SimpleQueue] = []
        self._threads: list[threading.Thread] = []
        loop = _run_tasks_reusing if reuse_heap else _run_tasks
        try:  # every child before any thread: a fork with another thread running is unsafe
            for _ in range(size):
                child = fork(loop, requests=True) if forking else _spawn(reuse_heap)
                interrupt.watch_child(child)  # killed at once by Ctrl-C / SIGTERM
                self.children.append(child)
        except OSError as e:
            self.kill()
            raise WorkerFailed(str(e)) from None
        for i in range(size):
            self._given[i] = []
            self._sending.append(queue.SimpleQueue())
            # a thread writes its requests, another reads its results: a large request
            # never waits on a child that is itself handing back a large result
            for work in (self._write, self._read):
                t = threading.Thread(target=work, args=(i,), daemon=True, name=f"traceaug-pool-{i}")
                t.start()
                self._threads.append(t)

    def submit(self, fn: Callable, /, *args: Any) -> cf.Future:
        if not self.processes:
            return self.threads.submit(fn, *args)
        future: cf.Future = cf.Future()
        try:
            request = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # as ProcessPoolExecutor: the task's own error
            future.set_exception(e)
            return future
        with self._lock:
            if not self._given:
                raise WorkerFailed("every worker process of the pool has ended")
            self._queue.append((future, request))
            self._dispatch()
        return future

    def _dispatch(self) -> None:
        """Each child with room its next tasks (under the lock)."""
        for i, given in self._given.items():
            while len(given) < self.DEPTH and self._queue:
                future, request = self._queue.pop(0)
                if not future.set_running_or_notify_cancel():
                    continue
                given.append(future)
                self._sending[i].put(request)

    def _write(self, i: int) -> None:
        child = self.children[i]
        try:
            while (request := self._sending[i].get()) is not None:
                send(child.stdin, request)
            child.stdin.close()  # the child sees its requests end and exits
        except OSError:  # gone, or its pipe failed: it ends, and its reader fails its tasks
            child.kill()

    def _read(self, i: int) -> None:
        child = self.children[i]
        while True:
            try:
                ok, value = recv(child.stdout)
            except (EOFError, OSError, pickle.UnpicklingError):
                break
            with self._lock:
                future = self._given[i].pop(0)
                self._dispatch()
            future.set_result(value) if ok else future.set_exception(value)
        with self._lock:  # the child ended (killed, or told to): its tasks fail
            lost = self._given.pop(i, [])
            left, self._queue = (self._queue, []) if not self._given else ([], self._queue)
        code = child.wait()
        for f in lost:
            f.set_exception(WorkerFailed(f"worker process exited with {code}"))
        for f, _ in left:
            if f.set_running_or_notify_cancel():
                f.set_exception(WorkerFailed("every worker process of the pool has ended"))

    def running(self, futures: list) -> list:
        """The futures of ``futures`` a child runs now."""
        if not self.processes:
            return [f for f in futures if f.running()][:self.size]
        with self._lock:
            busy = {id(given[0]) for given in self._given.values() if given}
        return [f for f in futures if id(f) in busy]

    def kill(self) -> None:
        """Stop running tasks now: nothing they write is kept."""
        for child in getattr(self, "children", ()):
            child.kill()

    def shutdown(self) -> None:
        """Cancel the tasks not started, let the children end, wait for them."""
        if not self.processes:
            self.threads.shutdown(wait=True, cancel_futures=True)
            return
        with self._lock:
            waiting, self._queue = self._queue, []
        for future, _ in waiting:
            future.cancel()
        for requests in self._sending:
            requests.put(None)
        for t in self._threads:
            t.join()
        for child in self.children:
            child.stdout.close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        # A signal while closing is raised after, where nothing unwinds: closed by the garbage collector
        # (a generator dropped mid-read), the pool would only print "Exception ignored" and a traceback.
        with interrupt.held():
            if exc[0] is not None:
                self.kill()
            self.shutdown()
        if exc[0] is None:
            interrupt.check()


def main() -> None:
    """A spawned child: tasks on stdin, results on stdout."""
    child_start()
    _run_tasks(sys.stdin.buffer, sys.stdout.buffer)
    os._exit(0)  # at once: unloading numpy would keep its memory while the parent grows


if __name__ == "__main__":
    main()
