"""Where jobs run (issue 39): a Dask scheduler file that is not one, is missing, is a device or a
FIFO; a cluster without workers, or losing them, or its scheduler, mid-run; ``--workers`` more than
the machine and the job can use; relative paths on a cluster whose workers run elsewhere; signals
while a local cluster starts and runs. Real ``dask scheduler`` / ``dask worker`` processes on
127.0.0.1 and real signals, every traceaug run a process of its own (as in ``test_jobs``: no Dask
client in this process). The oracle for outputs is the local pool's run and the generated job's
raw JSON (``jobgen``)."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jobgen
import pytest
from conftest import run_cli
from test_jobs import _is_worker, _stop

from traceaug.errors import TraceaugError
from traceaug.job import executor

pytestmark = pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                reason="distributed is not installed (the test extra)")

TIMEOUT = "3"  # --cluster-timeout of the runs that must give up


def _traceaug(*args: str, cwd: Path | None = None, env: dict | None = None,
              terminal: bool = False) -> subprocess.Popen:
    """``python -m traceaug ARGS``, stdout and stderr piped (``terminal``: stderr on a
    pseudo-terminal, read from ``proc.master``)."""
    env = {**os.environ, **(env or {})}
    env.pop("TRACEAUG_NO_PROGRESS", None)
    if not terminal:
        return subprocess.Popen([sys.executable, "-m", "traceaug", *args], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "traceaug", *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    proc.master, proc.seen = master, bytearray()  # type: ignore[attr-defined]
    return proc


def _seen_until(proc: subprocess.Popen, text: str | None, timeout: float = 120) -> str:
    """What ``proc`` wrote on its terminal until ``text`` (None: until it ends)."""
    import select

    deadline = time.monotonic() + timeout
    while text is None or text.encode() not in proc.seen:
        assert time.monotonic() < deadline, proc.seen.decode(errors="replace")
        if not select.select([proc.master], [], [], 0.2)[0]:
            continue
        try:
            data = os.read(proc.master, 1 << 16)
        except OSError:  # EIO: the terminal's last holder ended
            data = b""
        if not data:
            assert text is None, proc.seen.decode(errors="replace")
            break
        proc.seen += data
    return proc.seen.decode(errors="replace")


def _one_error_line(err: str, *parts: str) -> None:
    """``err`` is one line, traceaug's error, naming each of ``parts``; no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceaug: error: "), err
    assert all(p in lines[0] for p in parts), err


def _start(d: Path, name: str, module: str, *args: str, cwd: Path | None = None) -> subprocess.Popen:
    log = d / f"{name}.log"
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", module, *args], cwd=cwd or d,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _wait_log(d: Path, name: str, text: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until ``name``'s log says ``text`` (a worker: "Registered to")."""
    deadline = time.monotonic() + timeout
    while text not in (d / f"{name}.log").read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, \
            (d / f"{name}.log").read_text(errors="replace")
        time.sleep(0.1)


def _scheduler(d: Path) -> tuple[subprocess.Popen, str]:
    """A ``dask scheduler`` on 127.0.0.1 with no worker, and its address."""
    sf = d / "scheduler.json"
    proc = _start(d, "scheduler", "distributed.cli.dask_scheduler", "--scheduler-file", str(sf),
                  "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0")
    deadline = time.monotonic() + 120
    while True:
        try:
            return proc, json.loads(sf.read_text())["address"]
        except (OSError, ValueError, KeyError):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)


def _worker(d: Path, address: str, name: str = "worker") -> subprocess.Popen:
    """A ``dask worker`` (one thread, no nanny) of ``address``, running in a directory of its
    own (not where traceaug runs), once registered."""
    home = d / name
    home.mkdir(exist_ok=True)
    proc = _start(d, name, "distributed.cli.dask_worker", address, "--nworkers", "1",
                  "--nthreads", "1", "--no-nanny", "--no-dashboard", "--local-directory",
                  str(home), cwd=home)
    _wait_log(d, name, "Registered to", proc)
    return proc


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory) -> Iterator[str]:
    """A scheduler shared by this module's tests, with no worker but those a test starts (and
    kills before it ends)."""
    d = tmp_path_factory.mktemp("scheduler")
    proc, address = _scheduler(d)
    try:
        yield address
    finally:
        _stop([proc])


@pytest.fixture(scope="module")
def slow_job(tmp_path_factory) -> Path:
    """6 ranks of 3000 steps (~5 MB each: a second or more of a worker's time each), each step
    ``jobgen``'s step, moved on by one period and its correlation ids by 4 a step."""
    job = jobgen.job(6, 1, 0)
    period = jobgen.STEP_US + jobgen.GAP_US
    for raw in job.values():
        meta = [e for e in raw["traceEvents"] if e["ph"] == "M"]
        step = [e for e in raw["traceEvents"] if e["ph"] != "M"]
        raw["traceEvents"] = meta + [
            {**e, "ts": e["ts"] + k * period,
             "name": f"ProfilerStep#{k}" if e["name"].startswith("ProfilerStep#") else e["name"],
             "args": {n: v + 4 * k if n == "correlation" else v for n, v in e["args"].items()}}
            for k in range(3000) for e in step]
    return jobgen.write(tmp_path_factory.mktemp("slow") / "job", job)


def _small_job(d: Path, ranks: int = 2) -> Path:
    return jobgen.write(d / "job", jobgen.job(ranks, 1, 50))


@pytest.mark.parametrize("content", [b"garbage", b"{}", b"", b'{"address": 12345}', b"[1,2]",
                                     b'{"address": ""}', b'{"address": "tcp://127.0.0.1:8786"'])
def test_a_scheduler_file_that_is_not_one_is_refused_naming_it(tmp_path: Path, content: bytes) -> None:
    """Garbage, ``{}``, nothing, a number or list for the address, or cut JSON: refused naming
    the file (it used to be Dask's AssertionError / TypeError traceback)."""
    sf = tmp_path / "scheduler.json"
    sf.write_bytes(content)
    with pytest.raises(TraceaugError, match=f"^{sf}: not a Dask scheduler file"):
        executor.address_in(str(sf), timeout=1)


def test_a_scheduler_file_holding_its_address_gives_it(tmp_path: Path) -> None:
    sf = tmp_path / "scheduler.json"
    sf.write_text(json.dumps({"type": "Scheduler", "address": "tcp://127.0.0.1:8786"}))
    assert executor.address_in(str(sf)) == "tcp://127.0.0.1:8786"


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "fifo", "{}"])
def test_scheduler_file_devices_fifos_and_garbage_are_one_line(tmp_path: Path, device: str) -> None:
    """A device is read to a bound (``/dev/zero`` grew to 24 GB), a FIFO with no writer is not
    waited on, and ``{}`` is refused: one line naming the file, exit 1, no traceback."""
    job = _small_job(tmp_path)
    if device == "fifo":
        device = str(tmp_path / "fifo")
        os.mkfifo(device)
    elif device == "{}":
        (tmp_path / "s.json").write_text("{}")
        device = str(tmp_path / "s.json")
    r = run_cli("kernels", str(job), "--scheduler-file", device, "--cluster-timeout", TIMEOUT)
    assert r.returncode == 1 and r.stdout == ""
    _one_error_line(r.stderr, device)


def test_empty_scheduler_is_a_usage_error(tmp_path: Path) -> None:
    """``--scheduler ''`` ran the job here, silently: a usage error now."""
    r = run_cli("kernels", str(_small_job(tmp_path)), "--scheduler", "")
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert "Invalid value for '--scheduler': is empty" in r.stderr


def test_a_missing_scheduler_file_is_awaited_said_then_given_up(tmp_path: Path) -> None:
    """A scheduler file that never comes: on a terminal, what is awaited is said after a few
    seconds; after ``--cluster-timeout`` one line and exit 1 (it waited forever)."""
    job, sf = _small_job(tmp_path), tmp_path / "later.json"
    proc = _traceaug("kernels", str(job), "--scheduler-file", str(sf),
                     "--cluster-timeout", "5", terminal=True)
    seen = _seen_until(proc, None)
    assert proc.wait(timeout=60) == 1, seen
    lines = [x.strip("\r") for x in seen.replace("\r\x1b[K", "\n").splitlines() if x.strip()]
    assert lines == [f"traceaug: waiting for a Dask scheduler to write {sf} (up to 5 s: "
                     "--cluster-timeout)",
                     f"traceaug: error: {sf}: no such file after 5 s (--cluster-timeout); no "
                     "Dask scheduler wrote it"], seen
    piped = _traceaug("kernels", str(job), "--scheduler-file", str(sf),
                      "--cluster-timeout", TIMEOUT)
    _, err = piped.communicate(timeout=60)
    assert piped.returncode == 1
    _one_error_line(err, str(sf), "no such file")  # nothing said while waiting: piped


def test_an_unreachable_scheduler_is_awaited_said_then_given_up(tmp_path: Path) -> None:
    """A scheduler address nobody listens on: on a terminal, what is awaited is said after a
    few seconds; after ``--cluster-timeout`` one line naming it."""
    import socket

    with socket.socket() as free:  # a port nobody listens on once closed
        free.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{free.getsockname()[1]}"
    proc = _traceaug("kernels", str(_small_job(tmp_path)), "--scheduler", address,
                     "--cluster-timeout", "5", terminal=True)
    seen = _seen_until(proc, None)
    assert proc.wait(timeout=60) == 1, seen
    lines = [x.strip("\r") for x in seen.replace("\r\x1b[K", "\n").splitlines() if x.strip()]
    assert len(lines) == 2, seen
    assert lines[0] == f"traceaug: waiting for the Dask scheduler at {address} (up to 5 s: " \
                       "--cluster-timeout)"
    assert lines[1].startswith(f"traceaug: error: {address}: cannot reach the Dask scheduler")


def test_a_scheduler_without_workers_is_given_up(scheduler: str, tmp_path: Path) -> None:
    """No worker ever joins: one line naming the scheduler after ``--cluster-timeout`` (it
    waited forever, saying nothing)."""
    proc = _traceaug("kernels", str(_small_job(tmp_path)), "--scheduler", scheduler,
                     "--cluster-timeout", TIMEOUT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and out == ""
    _one_error_line(err, f"no Dask worker at {scheduler} for {TIMEOUT} s (--cluster-timeout)")


def _kernel_rows(text: str) -> list[tuple]:
    """(rank, kernel, count) of ``kernels --format csv``'s first table, sorted."""
    rows = csv.DictReader(io.StringIO(text.split("\n\n")[0].split("\n", 1)[1]))
    return sorted((r["rank"], r["name"], r["count"]) for r in rows)


def test_relative_paths_reach_workers_running_elsewhere(scheduler: str, tmp_path: Path) -> None:
    """``kernels job/ --scheduler ADDR`` from the job's parent directory, the worker running in
    another directory: every rank read (each "no such file" before), the rows the local pool
    gives, one per kernel of each rank's raw JSON."""
    job = _small_job(tmp_path, ranks=3)
    worker = _worker(tmp_path, scheduler)
    try:
        r = subprocess.run([sys.executable, "-m", "traceaug", "kernels", "job", "--scheduler",
                            scheduler, "--format", "csv", "--cluster-timeout", "30"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    finally:
        _stop([worker])
    assert r.returncode == 0, r.stderr
    local = run_cli("kernels", str(job), "--format", "csv")
    assert _kernel_rows(r.stdout) == _kernel_rows(local.stdout)
    raw = {r: json.loads((job / f"rank-{r}.json").read_text()) for r in range(3)}
    want = sorted((str(r), e["name"], "1") for r, t in raw.items() for e in t["traceEvents"]
                  if e.get("cat") == "kernel")  # one of each kernel a step
    assert _kernel_rows(r.stdout) == want


@pytest.mark.parametrize("lost", ["worker", "scheduler"])
def test_a_cluster_lost_mid_run_is_one_line(scheduler: str, slow_job: Path, tmp_path: Path,
                                            lost: str) -> None:
    """The only worker killed while ranks run: one line after ``--cluster-timeout`` (it waited
    forever); the scheduler killed: one line at once (a FuturesCancelledError traceback)."""
    address = scheduler
    if lost == "scheduler":  # one of its own, to kill
        own, address = _scheduler(tmp_path)
    worker = _worker(tmp_path, address)
    try:
        proc = _traceaug("kernels", str(slow_job), "--scheduler", address, "--cluster-timeout",
                         TIMEOUT, terminal=True)
        _seen_until(proc, "ranks: ")  # submitted, on a terminal: the progress line (ranks
        # left: the first line comes after a second, the ranks take more)
        os.killpg(worker.pid if lost == "worker" else own.pid, signal.SIGKILL)
        seen = _seen_until(proc, None)
        assert proc.wait(timeout=60) == 1, seen
    finally:
        _stop([worker] + ([own] if lost == "scheduler" else []))
    said = [x for x in seen.replace("\r\x1b[K", "\n").replace("\r", "").splitlines()
            if x and not x.startswith(("ranks: ", "Dask dashboard: "))]
    if lost == "worker":
        assert len(said) == 2 and said[0].startswith(f"traceaug: waiting for a Dask worker "
                                                     f"to join {address}"), seen
        assert said[1].startswith(f"traceaug: error: no Dask worker at {address} for 3 s "
                                  "(--cluster-timeout); "), seen
    else:
        assert said == [f"traceaug: error: lost the Dask scheduler at {address}"], seen


def _spawned(proc: subprocess.Popen) -> list:
    """The cluster's worker processes: ``proc``'s own children (a worker's task may fork a child of its own,
    which carries the worker's command line)."""
    import psutil

    try:
        return [p for p in psutil.Process(proc.pid).children() if _is_worker(p)]
    except psutil.NoSuchProcess:
        return []


def test_workers_beyond_the_ranks_and_cores_are_not_started(tmp_path: Path) -> None:
    """``--workers 64`` on a 2-rank job: at most 2 worker processes, said in one line."""
    pytest.importorskip("psutil")
    proc = _traceaug("kernels", str(_small_job(tmp_path)), "--workers", "64", "--format", "csv")
    most = 0
    while proc.poll() is None:
        most = max(most, len(_spawned(proc)))
        time.sleep(0.05)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    want = min(2, os.cpu_count() or 1)
    assert 0 < most <= want
    said = err.splitlines()
    assert len(said) == 1 and said[0].startswith(f"traceaug: --workers 64: starting {want} ("), err
    assert "2 ranks" in said[0]
    assert len(_kernel_rows(out)) == 6  # 3 kernels on each rank


@pytest.mark.parametrize("when", ["starting", "running"])
def test_a_signal_to_a_local_cluster_run_exits_at_once_leaving_nothing(
        slow_job: Path, tmp_path: Path, when: str) -> None:
    """SIGINT while ``--workers`` starts its cluster (Dask's atexit tracebacks), SIGTERM while
    its ranks run (10 s to exit): exit 130 / 143 within a second or so, one line, no process
    left, nothing in $TMPDIR (``dask-scratch-space`` was always left)."""
    psutil = pytest.importorskip("psutil")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    sig = signal.SIGINT if when == "starting" else signal.SIGTERM
    proc = _traceaug("kernels", str(slow_job), "--workers", "2", env={"TMPDIR": str(tmp)},
                     terminal=True)
    me = psutil.Process(proc.pid)
    if when == "starting":
        deadline = time.monotonic() + 120
        while not _spawned(proc):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
    else:
        _seen_until(proc, "ranks: ")
    started = me.children(recursive=True)
    sent = time.monotonic()
    proc.send_signal(sig)
    seen = _seen_until(proc, None)
    assert proc.wait(timeout=60) == 128 + sig
    took = time.monotonic() - sent
    said = [x for x in seen.replace("\r\x1b[K", "\n").replace("\r", "").splitlines()
            if x and not x.startswith(("ranks: ", "Dask dashboard: "))]
    assert said == ["traceaug: interrupted"], seen
    assert took < 2.0, took  # a second, and some slack for a loaded machine
    _, alive = psutil.wait_procs(started, timeout=10)
    assert alive == []
    assert list(tmp.iterdir()) == []


# A signal as a finished run closes its own cluster: sent from inside the close (Dask's event loop thread runs
# it), so it reaches traceaug's handler while the main thread waits for that close.
SIGNAL_AS_IT_CLOSES = """
import os, sys
import distributed
from distributed.deploy.spec import SpecCluster
owner, sig = {"client": distributed.Client, "cluster": SpecCluster}[sys.argv[1]], int(sys.argv[2])
close = owner._close

async def signalled(self, *args, **kwargs):
    if not getattr(owner, "signalled", False):
        owner.signalled = True
        os.kill(os.getpid(), sig)
    return await close(self, *args, **kwargs)

owner._close = signalled
from traceaug.__main__ import main
sys.argv = ["traceaug", *sys.argv[3:]]
main()
"""


@pytest.mark.parametrize("where, sig", [("client", signal.SIGINT), ("client", signal.SIGTERM),
                                        ("cluster", signal.SIGINT), ("cluster", signal.SIGTERM)])
def test_a_signal_as_a_local_cluster_closes_leaves_nothing(tmp_path: Path, where: str, sig: int) -> None:
    """Ctrl-C / SIGTERM as ``--workers``' run closes its client or its cluster, its ranks done: exit 130 /
    143 with one line, no process left, nothing in $TMPDIR (the cluster's scratch space was left when the
    signal cut its close short)."""
    from test_signals import no_process_left

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    args = ["kernels", str(_small_job(tmp_path)), "--workers", "2", "--format", "csv"]
    proc = subprocess.Popen([sys.executable, "-c", SIGNAL_AS_IT_CLOSES, where, str(int(sig)), *args],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "TMPDIR": str(tmp),
                                                         "PYTHONPATH": str(Path(__file__).parents[1])})
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (128 + sig, "traceaug: interrupted\n"), err[-2000:]
    no_process_left(proc.pid, args)
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize("where, name", [("distributed.deploy.spec.SpecCluster", "_instances"),
                                         ("distributed.nanny.Nanny", "_instances")])
def test_the_dask_private_names_a_local_cluster_is_stopped_by_are_there(where: str, name: str) -> None:
    """``executor._Local`` finds the clusters and nannies a run started (one cut short as it started
    included) in these class-level sets: a Dask upgrade that drops one fails here, naming it, rather
    than leaving a Ctrl-C'd run restarting its workers (it took 14 s to exit)."""
    from importlib import import_module

    module, cls = where.rsplit(".", 1)
    found = getattr(getattr(import_module(module), cls), name, None)
    assert callable(getattr(found, "add", None)) and callable(getattr(found, "discard", None)), \
        f"Dask upgrade: {where}.{name} is gone or no longer a set"
