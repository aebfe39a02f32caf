"""One ``concurrent.futures``-like interface for per-rank tasks: ``LocalPool``, processes on this
machine sized by ``pool_size``, and ``DaskExecutor``, a Dask ``distributed`` cluster."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# A rank's peak = ENGINE_BASE + PEAK_PER_BYTE[kind] x its raw bytes, measured by
# bench/rank_peak.py (largest factor over 4 shared traces, rounded up; a warm worker's base).
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
    """What a forked pool process starts with, pandas run (the CLI leaves it lazy; every rank's
    tables need it: 130 ms of each child's first task otherwise)."""
    import pandas

    from .. import trace  # noqa: F401
    from ..read import inputs, storage  # noqa: F401
    from . import run  # noqa: F401

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
    """Tasks on a Dask ``distributed`` cluster; ``cluster``: one this run started, closed with it."""

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


def connect(scheduler: str | None = None, scheduler_file: str | None = None,
            workers: int | None = None) -> DaskExecutor | None:
    """A Dask executor when the user named a cluster or asked for ``workers`` local processes,
    else None (never a bare ``Client()``: a cluster nobody asked for)."""
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

            # workers' logs stay off stderr: failures are said by rank (job.run)
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
