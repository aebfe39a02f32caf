"""One ``concurrent.futures``-like interface for per-rank tasks: ``LocalPool``, processes on this
machine sized by ``pool_size``, and ``DaskExecutor``, a Dask ``distributed`` cluster."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import traceaug.atomic as atomic
import traceaug.interrupt as interrupt
import traceaug.runtime as runtime

from ..errors import TraceaugError

# A rank's peak = ENGINE_BASE + PEAK_PER_BYTE[kind] x its raw bytes, measured by bench/rank_peak.py
# (largest factor over 5 shared traces, of the kind's load or of each command's task that loads it,
# rounded up; a warm worker's base; collectives: report.part on its tables peaked 2.43 in a fresh CI venv).
# cupti is kept above its measure (1.35, on traces without its
# cuda_profiler_range events: the one trace with them is too small to measure).
ENGINE_BASE = 140 << 20
PEAK_PER_BYTE = {"full": 4.2, "analysis": 2.2, "sync": 5.2, "ops": 6.5, "patterns": 2.8,
                 "gpu": 2.2, "gpu_steps": 1.3, "gpu_ops": 1.0, "collectives": 2.5, "job_path": 3.5,
                 "stragglers": 3.5, "cupti": 2.2, "capture": 1.3,
                 "sync_shapes": 5.5, "efficiency": 2.6, "efficiency_tables": 2.2,
                 # report / diff: efficiency_tables / ops with the [memory] events and shapes (a load with
                 # its sections peaked 1.84 / 1.79 x raw bytes over base on 3 shared traces, vs 1.75 / 2.04
                 # for those kinds): at least those kinds' factors
                 "report": 2.6, "diff": 6.5}
RAM_SHARE = 0.8  # of the available RAM, as HTA sizes its pool
CLUSTER_TIMEOUT_S = 60.0  # --cluster-timeout: a scheduler file, a scheduler, a worker awaited so long
SAY_AFTER_S = 3.0  # a wait for the cluster is said on a terminal after this long
LOOK_S = 1.0  # how often a Dask run looks at its cluster's workers while no rank finishes
POLL_S = 0.1  # a local pool's wait looks for a signal this often
KILL_SETTLE_S = 0.3  # a local cluster's processes starting when it is killed: awaited so long


def rank_peak(raw_bytes: int, kind: str) -> int:
    """Expected peak memory of one rank's task: an engine plus a share of its raw size."""
    return ENGINE_BASE + int(PEAK_PER_BYTE.get(kind, PEAK_PER_BYTE["full"]) * raw_bytes)


def limits(ranks: int, peak: int, ram: int | None = None, ncores: int | None = None) -> dict:
    """What bounds the processes worth starting: {"cores": .., "ranks": .., "memory": ranks
    whose ``peak`` fits in 0.8 × the available RAM}."""
    from ..processes import available_ram, cores

    ram = available_ram() if ram is None else ram
    return {"cores": cores() if ncores is None else ncores, "ranks": ranks,
            "memory": int(RAM_SHARE * ram // max(peak, 1))}


def pool_size(ranks: int, peak: int, ram: int | None = None, ncores: int | None = None) -> int:
    """``min(cores, ranks, 0.8 × available RAM ÷ peak)``, at least 1."""
    return max(1, min(limits(ranks, peak, ram, ncores).values()))


class Executor:
    """Runs tasks: ``submit`` gives a future, ``wait`` those done (one at least, or none by
    ``timeout``), ``running`` those started."""

    size: int = 1
    remote: bool = False

    def submit(self, fn: Callable, /, *args: Any) -> Any:
        raise NotImplementedError

    def wait(self, futures: list, timeout: float | None = None) -> list:
        """The futures of ``futures`` finished, in order, once one is (or ``timeout`` passed)."""
        raise NotImplementedError

    def running(self, futures: list) -> list:
        """The futures of ``futures`` running now (as far as the executor tells)."""
        return []

    def outcome(self, future) -> tuple[BaseException | None, Any]:
        """A finished future's error, else None and its result."""
        error = future.exception()
        return error, (future.result() if error is None else None)

    def cancel(self, futures: Iterable) -> None:
        for f in futures:
            f.cancel()

    def close(self, cancel: bool = False) -> None:
        """Release the workers (``cancel``: stop what still runs, now)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(cancel=exc_type is not None)


class Inline(Executor):
    """Every task in this process, at once (one rank: a command keeps its single-file path)."""

    def submit(self, fn: Callable, /, *args: Any):
        from concurrent.futures import Future

        future: Future = Future()
        try:
            future.set_result(fn(*args))
        except Exception as e:
            future.set_exception(e)
        return future

    def wait(self, futures: list, timeout: float | None = None) -> list:
        return list(futures)


def _preload() -> None:
    """What a forked pool process starts with, pandas run (the CLI leaves it lazy; every rank's
    tables need it: 130 ms of each child's first task otherwise). The job runner (``run``, whose tasks
    the pool runs) is imported already: it imports this module and makes the pool."""
    import pandas

    import traceaug.trace as trace  # noqa: F401

    from ..read import inputs, storage  # noqa: F401

    pandas.DataFrame  # noqa: B018  (runs a lazily imported pandas: engine.imports)


class LocalPool(Executor):
    """``size`` processes on this machine (``processes.Pool``), threads where a fork is unsafe."""

    def __init__(self, size: int, processes: bool = True) -> None:
        from ..processes import Pool

        self.size = size
        self.local = Pool(size, _preload, threads=not processes)
        self.processes = self.local.processes

    def submit(self, fn: Callable, /, *args: Any):
        return self.local.submit(fn, *args)

    def wait(self, futures: list, timeout: float | None = None) -> list:
        """A signal stops the wait between short waits, never inside one: raised there it could leave
        a future's lock held (``cf.wait`` takes them all), and the pool's reader setting that future,
        with the shutdown joining it, waited forever (a Ctrl-C hung 1 run in ~190)."""
        import concurrent.futures as cf

        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_S if end is None else max(min(POLL_S, end - time.monotonic()), 0)
            with interrupt.deferred():  # Ctrl-C kills the children: their futures end at once
                done = cf.wait(futures, left, return_when=cf.FIRST_COMPLETED).done
            if done or (end is not None and time.monotonic() >= end):
                return [f for f in futures if f in done]

    def running(self, futures: list) -> list:
        return self.local.running(futures)

    def close(self, cancel: bool = False) -> None:
        if cancel:  # stop running ranks now: nothing they write is kept
            self.local.kill()
        self.local.shutdown()


class Awaited:
    """A wait for ``what``, bounded by ``timeout`` s: said once on a terminal after
    ``SAY_AFTER_S``; ``over()`` once the time is up."""

    def __init__(self, what: str, timeout: float) -> None:
        self.what, self.timeout = what, timeout
        self.since, self.said = time.monotonic(), False

    def over(self) -> bool:
        from ..progress import note

        waited = time.monotonic() - self.since
        if waited >= SAY_AFTER_S and not self.said:
            self.said = True
            note(f"traceaug: waiting for {self.what} (up to {self.timeout:g} s: --cluster-timeout)")
        return waited >= self.timeout


class DaskExecutor(Executor):
    """Tasks on a Dask ``distributed`` cluster, whose workers are awaited ``timeout`` s at most
    (at the start, or once all are gone); ``local``: the ``LocalCluster`` this run started."""

    remote = True

    def __init__(self, client, local: _Local | None = None,
                 timeout: float = CLUSTER_TIMEOUT_S) -> None:
        self.client, self.local, self.timeout = client, local, timeout
        self.address = client.scheduler.address
        self.futures: list = []
        self.none_since: Awaited | None = None  # no worker since then
        self.failed = False  # the cluster failed the run (said): nothing more to say
        try:
            while not self._workers():
                self._no_worker([])
                time.sleep(0.1)
            self.size = self._workers()
        except BaseException:  # none came, Ctrl-C: nothing left connected or running
            self.close(cancel=True)
            raise

    def _workers(self) -> int:
        """The cluster's workers now (the scheduler asked)."""
        try:
            return len(self.client.nthreads())
        except Exception:  # noqa: BLE001  (the connection lost, whatever Dask raises)
            raise self._failed() from None

    def _failed(self, text: str | None = None) -> TraceaugError:
        """The run's end, said in one line (default: the scheduler lost)."""
        self.failed = True
        return TraceaugError(text or f"lost the Dask scheduler at {self.address}")

    def _no_worker(self, pending: list) -> None:
        """The cluster has no worker: said after a few seconds, an error after ``timeout``."""
        if self.none_since is None:
            self.none_since = Awaited(f"a Dask worker to join {self.address}", self.timeout)
        if self.none_since.over():
            left = f"; {len(pending)} rank task(s) not done" if pending else ""
            raise self._failed(f"no Dask worker at {self.address} for {self.timeout:g} s "
                               f"(--cluster-timeout){left}")

    def submit(self, fn: Callable, /, *args: Any):
        future = self.client.submit(fn, *args, pure=False)
        self.futures.append(future)
        return future

    def wait(self, futures: list, timeout: float | None = None) -> list:
        """As ``Executor.wait``, looking at the workers every ``LOOK_S``: none for ``timeout``
        s, or the scheduler lost, is an error."""
        from distributed import wait
        from distributed.client import FuturesCancelledError

        end = None if timeout is None else time.monotonic() + timeout
        while True:
            step = LOOK_S if end is None else max(0.0, min(LOOK_S, end - time.monotonic()))
            try:
                with self.client.as_current():  # (Dask's wait asks for the default client: ours is not)
                    wait(futures, step, return_when="FIRST_COMPLETED")
            except (TimeoutError, FuturesCancelledError):  # cancelled: not by this run (it
                pass  # raises when it cancels), so by a lost scheduler
            done = [f for f in futures if f.done()]
            if any(f.cancelled() for f in done):
                raise self._failed()
            if done:
                return done
            self._look(futures)
            if end is not None and time.monotonic() >= end:
                return []

    def _look(self, pending: list) -> None:
        """An error once the cluster has had no worker for ``timeout`` s, or lost its scheduler."""
        if self._workers():
            self.none_since = None
        else:
            self._no_worker(pending)

    def outcome(self, future) -> tuple[BaseException | None, Any]:
        """As ``Executor.outcome``, the result fetched while the cluster lasts (a result lost
        with its worker is computed again: it waits for one)."""
        from concurrent.futures import CancelledError

        while True:
            try:
                error = future.exception(timeout=LOOK_S)
                return error, (future.result(timeout=LOOK_S) if error is None else None)
            except TimeoutError:
                self._look([future])
            except (OSError, CancelledError):  # the connection lost, the future with it
                raise self._failed() from None

    def running(self, futures: list) -> list:
        """The futures whose task a worker is processing (the scheduler's word)."""
        try:
            busy = {k for keys in self.client.processing().values() for k in keys}
        except Exception:  # the scheduler gone: the next wait says what happened
            return []
        return [f for f in futures if f.key in busy]

    def cancel(self, futures: Iterable) -> None:
        self.client.cancel(list(futures), force=True)

    def close(self, cancel: bool = False) -> None:

        running = [f for f in self.futures if not f.done()]
        try:
            if cancel and self.local is not None:  # our own workers: killed, not asked
                self.local.kill()
            elif cancel and running:
                with contextlib.suppress(Exception):
                    self.client.cancel(running, force=True)
                if not self.failed:
                    print(f"traceaug: {len(running)} rank task(s) on the cluster cancelled",
                          file=sys.stderr)
            with contextlib.suppress(Exception):  # a remote cluster stays up: only this run's
                self.client.close(timeout=1 if cancel else None)  # connection ends
        except BaseException:  # a signal as it closes: our own workers killed, as a cancelled run's
            if self.local is not None:
                self.local.kill()
            raise
        finally:
            if self.local is not None:
                self.local.close()


class _Local:
    """A ``LocalCluster`` of ``workers`` processes and its ``client``, its scratch space in a
    temporary directory of its own; ``kill`` stops its processes at once, ``close`` leaves
    nothing behind."""

    def __init__(self, workers: int) -> None:
        import multiprocessing

        import dask.config
        from distributed import Client, LocalCluster, Nanny
        from distributed.deploy.spec import SpecCluster

        self.scratch = atomic.scratch_dir("traceaug-dask-")
        self.before = set(multiprocessing.active_children())  # the caller's own processes
        self.others = set(SpecCluster._instances)  # the caller's own clusters
        self.nannies = set(Nanny._instances)  # and their nannies
        self.cluster = None
        try:  # workers' logs stay off stderr: failures are said by rank (job.run)
            with dask.config.set({"temporary-directory": str(self.scratch)}):  # the scheduler's too
                self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1,
                                            processes=True, dashboard_address=":0",
                                            silence_logs=logging.CRITICAL)
            self.client = Client(self.cluster, set_as_default=False)
        except BaseException:  # Ctrl-C while it starts: its processes killed, no traceback
            self.kill()
            self.close()
            raise

    def kill(self) -> None:
        """Every process the cluster started, killed (its tasks' output is never kept), and
        those it was starting once started (a spawn cut short prints a traceback)."""
        import multiprocessing

        from distributed import Nanny

        for nanny in set(Nanny._instances) - self.nannies:  # a cluster cut short as it started too
            with contextlib.suppress(Exception):
                nanny.close_gracefully()  # its worker's end is no cue to start another
        killed: set = set()
        settle = time.monotonic() + KILL_SETTLE_S
        while True:
            new = set(multiprocessing.active_children()) - self.before - killed
            for p in new:
                with contextlib.suppress(Exception):
                    p.kill()
            killed |= new
            if not new and time.monotonic() >= settle:
                break
            time.sleep(0.02)
        for p in killed:
            p.join(5)

    def close(self) -> None:

        from distributed.deploy.spec import SpecCluster

        try:
            if self.cluster is not None:
                with contextlib.suppress(Exception):
                    self.cluster.close(timeout=2)
        except BaseException:  # a signal as it closes: its processes killed, not waited for
            self.kill()
            raise
        finally:
            for ours in set(SpecCluster._instances) - self.others:  # closed, or its processes
                SpecCluster._instances.discard(ours)  # killed: not for Dask's atexit (tracebacks)
            atomic.drop_scratch(self.scratch)


def dask_address(scheduler: str | None) -> str | None:
    """``--scheduler``, else Dask's ``DASK_SCHEDULER_ADDRESS`` or ``scheduler-address`` config."""
    if scheduler:
        return scheduler
    if os.environ.get("DASK_SCHEDULER_ADDRESS"):
        return os.environ["DASK_SCHEDULER_ADDRESS"]
    config = os.environ.get("DASK_CONFIG", os.path.expanduser("~/.config/dask"))
    if os.path.isdir(config):
        import dask.config

        return dask.config.get("scheduler-address", None)
    return None


def address_in(path: str, timeout: float = CLUSTER_TIMEOUT_S) -> str:
    """The scheduler address a Dask scheduler file holds: the file awaited ``timeout`` s at most,
    read as every side file is (a device or FIFO read to a bound, never waited on)."""
    import orjson

    from ..read.source import read_side

    awaited = Awaited(f"a Dask scheduler to write {path}", timeout)
    while not os.path.exists(path):
        if awaited.over():
            raise TraceaugError(f"{path}: no such file after {timeout:g} s (--cluster-timeout); "
                                "no Dask scheduler wrote it")
        time.sleep(0.1)
    for _ in range(10):  # a scheduler starting writes it in place: let it finish
        try:
            found = orjson.loads(read_side(path, "a Dask scheduler file", json=True))
        except orjson.JSONDecodeError:
            found = None
        address = found.get("address") if isinstance(found, dict) else None
        if isinstance(address, str) and address.strip():
            return address
        if not os.path.isfile(path):
            break
        time.sleep(0.05)
    raise TraceaugError(f'{path}: not a Dask scheduler file (no "address" string in a JSON object)')


def connect(scheduler: str | None = None, scheduler_file: str | None = None,
            workers: int | None = None, timeout: float = CLUSTER_TIMEOUT_S,
            fit: dict | None = None) -> DaskExecutor | None:
    """A Dask executor when the user named a cluster or asked for ``workers`` local processes
    (no more than every bound of ``fit``, ``limits``, allows), else None (never a bare
    ``Client()``: a cluster nobody asked for)."""
    address = dask_address(scheduler) if scheduler_file is None else None
    if address is None and scheduler_file is None and not workers:
        return None
    try:
        import distributed  # noqa: F401  (it sets its loggers up: quieted below)
    except ImportError:
        raise TraceaugError("a Dask cluster needs distributed: pip install 'traceaug[dask]'") from None
    if scheduler_file is not None:
        address = address_in(scheduler_file, timeout)
    if runtime.current().command_line:  # what goes wrong is said in one line, not Dask's logs
        for name in ["distributed", "asyncio", "tornado", *logging.root.manager.loggerDict]:  # Dask's
            if name.split(".")[0] in ("distributed", "asyncio", "tornado"):  # config sets some
                logging.getLogger(name).setLevel(logging.CRITICAL)
        # nor the warning of a call to the cluster a Ctrl-C cut short (its coroutine never ran)
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
    try:
        if address is not None:
            return _announced(DaskExecutor(_reach(address, timeout), timeout=timeout))
    except (OSError, TimeoutError, ValueError, TypeError) as e:
        raise TraceaugError(f"{scheduler_file or address}: cannot reach the Dask scheduler "
                            f"({e})") from None
    local = _Local(_capped(workers, fit or {}))
    return _announced(DaskExecutor(local.client, local, timeout))


def _reach(address: str, timeout: float):
    """A Dask client of the scheduler at ``address``, tried ``timeout`` s; the wait said on a
    terminal after ``SAY_AFTER_S``. Never Dask's global client (nor ``_Local``'s): one a signal cut short
    as it connected was left to Dask's exit hook, whose close of it failed with a traceback."""

    from distributed import Client

    from ..progress import line, shown

    said = threading.Timer(SAY_AFTER_S, line, (f"traceaug: waiting for the Dask scheduler at "
                                               f"{address} (up to {timeout:g} s: "
                                               "--cluster-timeout)\n",))
    said.daemon = True
    if shown():
        said.start()
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    finally:
        said.cancel()


def _capped(workers: int, fit: dict) -> int:
    """``workers``, or fewer where ``fit``'s bounds allow fewer (said in one line)."""
    most = max(1, min(fit.values(), default=workers))
    if workers <= most:
        return workers
    why = ", ".join(f"{v} {k}" if k != "memory" else f"memory for {v} ranks at once"
                    for k, v in fit.items() if v < workers)
    print(f"traceaug: --workers {workers}: starting {most} ({why})", file=sys.stderr)
    return most


def _announced(executor: DaskExecutor) -> DaskExecutor:
    """The dashboard link, once, on a terminal."""
    from ..progress import note

    link = getattr(executor.client, "dashboard_link", None)
    if link:
        note(f"Dask dashboard: {link}")
    return executor
