"""The process layer (``traceaug.processes``): a job's pool stops at once whatever its
children are doing, and nothing of a stopped pool is left behind."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

KILLED_WHILE_SENDING = """
import sys, time
from traceaug.job.executor import LocalPool
from traceaug.processes import WorkerFailed

def big(n):
    return b"x" * n

pool = LocalPool(2)
futures = [pool.submit(big, 384 << 20) for _ in range(2)]
time.sleep(float(sys.argv[1]))  # the children are sending their results by now
t = time.monotonic()
pool.close(cancel=True)
failed = sum(isinstance(f.exception(), WorkerFailed) for f in futures if not f.cancelled())
print(f"closed {time.monotonic() - t < 5} failed {failed}")
"""


def test_a_pool_killed_while_its_children_send_results_closes_at_once() -> None:
    """Ctrl-C kills the pool's children: one killed half way through sending a large result
    left the old pool (``ProcessPoolExecutor``) reading the rest for ever; each child has
    its own pipe now, and its task fails."""
    for delay in ("1.0", "1.8"):
        out = subprocess.run([sys.executable, "-c", KILLED_WHILE_SENDING, delay], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.stdout.split()[:2] == ["closed", "True"], (out.stdout, out.stderr)


UNPICKLABLE = """
import sys, threading, types
from traceaug.processes import Pool

if sys.argv[1] == "spawn":  # another thread running: no fork
    threading.Thread(target=threading.Event().wait, daemon=True).start()
with Pool(2, spawn=True) as pool:
    print(pool.children[0].__class__.__name__, end=" ")
    late = types.ModuleType("late")  # after the fork: a module the children never had
    exec("def triple(n):\\n    return 3 * n", late.__dict__)
    sys.modules["late"] = late
    futures = [pool.submit(lambda n: n, 1), pool.submit(late.triple, 1), pool.submit(abs, -42)]
    print([type(f.exception()).__name__ for f in futures[:2]], futures[2].result())
"""


def test_a_task_that_will_not_pickle_fails_alone() -> None:
    """A task that will not pickle here (a lambda) or not unpickle in the child (a module it
    never imported) fails its own future, and the pool runs the next: a writer thread that
    died of it used to leave its future unset and the job waiting for ever."""
    for start, child in (("fork", "Forked"), ("spawn", "Popen")):
        out = subprocess.run([sys.executable, "-c", UNPICKLABLE, start], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == f"{child} ['PicklingError', 'ModuleNotFoundError'] 42", \
            (start, out.stdout, out.stderr)


BROKEN_REQUESTS = """
import os
from traceaug.processes import Pool, WorkerFailed

pool = Pool(1)
fd = pool.children[0].stdin.fileno()
kept = os.dup(fd)  # the pipe stays open: the child sees no end of its requests
os.dup2(os.open(os.devnull, os.O_RDONLY), fd)  # writing its requests fails (EBADF)
print(type(pool.submit(abs, -1).exception(timeout=20)).__name__)
pool.shutdown()
"""


def test_a_request_that_cannot_be_written_fails_its_task() -> None:
    """A request pipe that fails while its child lives (EBADF here, ENOSPC under a patched
    ``os.fdopen``) kills that child, so its task fails instead of waiting for ever."""
    out = subprocess.run([sys.executable, "-c", BROKEN_REQUESTS], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "WorkerFailed", (out.stdout, out.stderr)


SIBLING_COLLECTED = """
import gc, os, sys
from traceaug import processes

def wait(inp, out):
    inp.read()

def open_then_collect(inp, out):
    with open(sys.argv[1], "rb") as f:  # takes the lowest free number: a sibling's, closed above
        gc.collect()  # the sibling's file objects, in a cycle, are collected here
        try:
            out.write(b"read %d" % len(f.read()))
        except OSError as e:
            out.write(b"lost %d" % e.errno)
    out.close()

gc.disable()
sibling = processes.fork(wait, requests=True)
cycle = [sibling]
cycle.append(cycle)
del sibling, cycle  # alive until the next collection: in the child, that is mid-work
child = processes.fork(open_then_collect)
print(child.stdout.read().decode())
child.wait()
"""


def test_a_child_keeps_the_files_it_opens_when_a_siblings_pipes_are_collected(tmp_path) -> None:
    """A forked child closes its copies of other children's pipes by number; their file objects,
    collected later in the child, closed those numbers again, by then the engine's files ("trace
    processor crashed: Bad file descriptor", a job's ranks failing now and then)."""
    data = tmp_path / "data"
    data.write_bytes(b"x" * 1000)
    out = subprocess.run([sys.executable, "-c", SIBLING_COLLECTED, str(data)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["read", "1000"], (out.stdout, out.stderr)
