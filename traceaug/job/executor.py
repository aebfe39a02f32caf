"""One executor interface for per-rank tasks, two implementations.

``Executor`` is ``concurrent.futures``-like: ``submit`` returns a future, ``wait`` returns
the futures finished (at least one, or none after ``timeout``), ``running`` those started,
``map`` keeps the order. ``LocalPool`` is a pool of processes
on this machine sized by ``pool_size`` (forked with the engine's modules imported; threads
where a fork is not safe); ``DaskExecutor`` sends the tasks to a Dask ``distributed``
cluster. Tasks take paths and options and return small plain tables, never engines.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# A rank's peak = ENGINE_BASE + PEAK_PER_BYTE[kind] x its raw bytes, measured by
# bench/rank_peak.py (2026-11-26, VmHWM of one child per run, pass 1 in the process as in a
# worker): the engine with a 71-event trace peaks at 112 MB (123 MB in a fresh CI venv of the
# same packages), 125 MB in a warm worker (after two ranks: it keeps the engine's start image,
# engine.wasm_instance), so the base is taken as 140 MB; a kind's factor is the largest
# (peak - 112 MB) / raw bytes over 4 shared traces of 9.8-34 MB, of the load and of the job's
# task for that kind, rounded up: full 4.14 (load), analysis 2.11 (info), sync 5.20 (the
# critical path's graph), ops 4.91 (diff: both sides in one task, A = B here), patterns 2.80,
# gpu 2.19 (counters, writing its copy), gpu_steps 1.24, collectives 2.23 (report JOB's task),
# job_path 3.49 (a rank's graph for the job's critical path / replay).
# Each is largest on the smallest trace (a fixed part per trace): conservative for large
# ranks (sync 3.23, ops 2.52 at 25.8 MB). A gz input peaks as its raw text (within 1 %).
ENGINE_BASE = 140 << 20
PEAK_PER_BYTE = {"full": 4.2, "analysis": 2.2, "sync": 5.2, "ops": 5.0, "patterns": 2.8,
                 "gpu": 2.2, "gpu_steps": 1.3, "gpu_ops": 1.3, "collectives": 2.3, "job_path": 3.5}
RAM_SHARE = 0.8  # of the available RAM, as HTA sizes its pool


def rank_peak(raw_bytes: int, kind: str) -> int:
    """Expected peak memory of one rank's task: an engine plus a share of its raw size."""
    return ENGINE_BASE + int(PEAK_PER_BYTE.get(kind, PEAK_PER_BYTE["full"]) * raw_bytes)


def pool_size(ranks: int, peak: int, ram: int | None = None, ncores: int | None = None) -> int:
    """``min(cores, ranks, 0.8 × available RAM ÷ peak)``, at least 1."""
    from ..processes import available_ram, cores

    ram = available_ram() if ram is None else ram
    ncores = cores() if ncores is None else ncores
    return max(1, min(ncores, ranks, int(RAM_SHARE * ram // max(peak, 1))))


class Executor:
    """Runs tasks; ``embedded``: tasks run in processes that must not start children."""

    size: int = 1
    remote: bool = False

    def submit(self, fn: Callable, /, *args: Any) -> Any:
        raise NotImplementedError

    def wait(self, futures: list, timeout: float | None = None) -> list:
        """The futures of ``futures`` finished, in their order, once one is (or ``timeout``
        seconds have passed: maybe none)."""
        raise NotImplementedError

    def running(self, futures: list) -> list:
        """The futures of ``futures`` running now (as far as the executor tells)."""
        return []

    def map(self, fn: Callable, items: Iterable) -> Iterator:
        futures = [self.submit(fn, item) for item in items]
        return (f.result() for f in futures)

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
    """What a forked pool process starts with (20 ms of each one's first task otherwise, and
    pandas, left to load on first use by the command line, 130 ms: every rank's tables)."""
    import pandas

    from .. import trace  # noqa: F401
    from ..read import inputs, storage  # noqa: F401
    from . import run  # noqa: F401

    pandas.DataFrame  # noqa: B018  (runs a lazily imported pandas: engine.imports)


class LocalPool(Executor):
    """``size`` processes on this machine (``processes.Pool``: forked with the modules
    imported; threads in this process where a fork is not safe)."""

    def __init__(self, size: int, processes: bool = True) -> None:
        from ..processes import Pool

        self.size = size
        self.local = Pool(size, _preload, threads=not processes)
        self.processes = self.local.processes

    def submit(self, fn: Callable, /, *args: Any):
        return self.local.submit(fn, *args)

    def wait(self, futures: list, timeout: float | None = None) -> list:
        import concurrent.futures as cf

        done = cf.wait(futures, timeout, return_when=cf.FIRST_COMPLETED).done
        return [f for f in futures if f in done]

    def running(self, futures: list) -> list:
        return self.local.running(futures)

    def close(self, cancel: bool = False) -> None:
        if cancel:  # stop running ranks now: nothing they write is kept
            self.local.kill()
        self.local.shutdown()


class DaskExecutor(Executor):
    """Tasks on a Dask ``distributed`` cluster (``client``); ``cluster``: one this run started
    (``--workers N``), closed with it."""

    remote = True

    def __init__(self, client, cluster=None) -> None:
        self.client, self.cluster = client, cluster
        self.size = max(1, len(client.scheduler_info().get("workers", {})))
        self.futures: list = []

    def submit(self, fn: Callable, /, *args: Any):
        future = self.client.submit(fn, *args, pure=False)
        self.futures.append(future)
        return future

    def wait(self, futures: list, timeout: float | None = None) -> list:
        from distributed import wait

        try:
            wait(futures, timeout, return_when="FIRST_COMPLETED")
        except TimeoutError:
            pass
        return [f for f in futures if f.done()]

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
        import contextlib

        running = [f for f in self.futures if not f.done()]
        if cancel and running:
            with contextlib.suppress(Exception):
                self.client.cancel(running, force=True)
            if self.cluster is None:
                print(f"traceaug: {len(running)} rank task(s) on the cluster cancelled",
                      file=sys.stderr)
        self.client.close()  # a remote cluster stays up: only this run's connection ends
        if self.cluster is not None:
            self.cluster.close()


def dask_address(scheduler: str | None) -> str | None:
    """The scheduler to use: ``--scheduler``, else Dask's own ``DASK_SCHEDULER_ADDRESS`` or
    ``scheduler-address`` config (read only when a Dask config directory exists)."""
    if scheduler:
        return scheduler
    if os.environ.get("DASK_SCHEDULER_ADDRESS"):
        return os.environ["DASK_SCHEDULER_ADDRESS"]
    config = os.environ.get("DASK_CONFIG", os.path.expanduser("~/.config/dask"))
    if os.path.isdir(config):
        import dask.config

        return dask.config.get("scheduler-address", None)
    return None


def connect(scheduler: str | None = None, scheduler_file: str | None = None,
            workers: int | None = None) -> DaskExecutor | None:
    """A Dask executor when the user named a cluster (an address, a scheduler file, Dask's
    config) or asked for ``workers`` local processes; else None. Never a bare ``Client()``
    (it would start a cluster nobody asked for)."""
    address = dask_address(scheduler) if scheduler_file is None else None
    if address is None and scheduler_file is None and not workers:
        return None
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        from ..errors import TraceaugError

        raise TraceaugError("a Dask cluster needs distributed: pip install 'traceaug[dask]'") from None
    from ..errors import TraceaugError

    try:
        if scheduler_file is not None:
            client = Client(scheduler_file=scheduler_file, timeout="10s")
        elif address is not None:
            client = Client(address, timeout="10s")
        else:
            import logging

            # its workers' logs (a failed task's traceback) stay out of the command's stderr:
            # failures are said by rank (job.run)
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=logging.CRITICAL)
            return _announced(DaskExecutor(Client(cluster), cluster))
    except (OSError, TimeoutError, ValueError) as e:
        where = scheduler_file or address
        raise TraceaugError(f"{where}: cannot reach the Dask scheduler ({e})") from None
    return _announced(DaskExecutor(client))


def _announced(executor: DaskExecutor) -> DaskExecutor:
    """The dashboard link, once, on a terminal."""
    from ..progress import note

    link = getattr(executor.client, "dashboard_link", None)
    if link:
        note(f"Dask dashboard: {link}")
    return executor
