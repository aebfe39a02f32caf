"""Gather one task's result from every rank of a job, and ``Job``: a job read once.

``gather`` is what every directory-taking command runs: the ranks (``ranks.select``), the
executor (``run.executor_for``), one task per rank (``run.run_ranks``). ``Job`` keeps each
kind of result once read, so many analyses run on one read of each rank (as HTA's
``TraceAnalysis(trace_dir)``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .executor import Inline
from .ranks import TraceFile
from .run import JobOptions, executor_for, run_ranks, stored_size


def gather(path: str | Path, task: Callable, kind: str, rank: int | None = None,
           job: JobOptions | None = None, options: dict | None = None,
           on_result: Callable | None = None, files: list[TraceFile] | None = None,
           sizes: dict | None = None) -> dict:
    """``task(file, options)`` on each rank of ``path`` (or ``files``): {rank: result}, in
    rank order. A plan prefetched by the command line is used only in this process.
    ``sizes``: bytes each rank's task reads, for the progress line (default: its file's)."""
    job = job or JobOptions()
    options = dict(options or {})
    files = job.select(path, rank) if files is None else files
    if job.storage:
        options["storage"] = job.storage
    executor = executor_for(files, kind, job)
    if not isinstance(executor, Inline):
        prefetched = options.pop("prefetched", None)
        if prefetched is not None:
            prefetched.close()  # children planning for this process: the workers plan
        options.update(progress=False, workers=1)  # threads: one pass-1 child each
    try:
        if sizes is None and len(files) > 1:
            sizes = {f.rank: stored_size(f.path, job.storage) for f in files}
        done = run_ranks(task, [(f.rank, (f, options)) for f in files], executor, job, on_result,
                         sizes)
    except BaseException:  # a failure, Ctrl-C: running ranks stopped, pending ones cancelled
        if executor is not job.executor:
            executor.close(cancel=True)
        raise
    if executor is not job.executor:
        executor.close()
    return done


class Job:
    """Every rank of a job, each read once per kind of result and kept as plain tables.

    ``gpu_ops()``: each rank's ``analysis.gpu_steps.GpuOps`` (what ``traceaug.analyses``
    reads); ``info()``: each rank's info record. ``rank`` keeps one rank; the job options
    (``scheduler``, ``workers``, ``retries``...) say where the ranks are read."""

    def __init__(self, path: str | Path, rank: int | None = None, options: JobOptions | None = None,
                 **load: Any) -> None:
        from .storage import is_url

        self.path = path if is_url(path) else Path(path)
        self.options = options or JobOptions(progress=False)
        self.files = self.options.select(self.path, rank)
        self.load = load
        if self.options.executor is None:  # one cluster for every analysis of this job
            from .executor import connect

            self.options.executor = connect(self.options.scheduler, self.options.scheduler_file,
                                            self.options.workers)
        self._owned = self.options.executor
        self._kept: dict[str, dict] = {}

    @property
    def ranks(self) -> list:
        return [f.rank for f in self.files]

    def _gathered(self, name: str, task: Callable, kind: str) -> dict:
        if name not in self._kept:
            self._kept[name] = gather(self.path, task, kind, job=self.options,
                                      options=self.load, files=self.files)
        return self._kept[name]

    def gpu_ops(self, rank: int | None = None) -> list:
        """The GPU ops of every rank (or of ``rank``), in rank order."""
        from .tasks import gpu_rank

        found = self._gathered("gpu", gpu_rank, "gpu_steps")
        if rank is None:
            return list(found.values())
        if rank not in found:
            from ..errors import TraceaugError

            raise TraceaugError(f"{self.path}: no trace for rank {rank} "
                                f"(it has {', '.join(map(str, found))})")
        return [found[rank]]

    def info(self) -> list[dict]:
        """``traceaug info`` of every rank, in rank order."""
        from .tasks import info_rank

        return list(self._gathered("info", info_rank, "analysis").values())

    def close(self) -> None:
        """Close the Dask cluster this job started (``workers=N``), if any."""
        if self._owned is not None:
            self._owned.close()
            self._owned = self.options.executor = None

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Job({str(self.path)!r}, ranks={self.ranks})"


def load_job(path: str | Path, rank: int | None = None, scheduler: str | None = None, *,
             scheduler_file: str | None = None, workers: int | None = None, retries: int = 1,
             fail_fast: bool = False, skip_bad_ranks: bool = False, progress: bool = False,
             storage_options: dict | None = None, **load: Any) -> Job:
    """A ``Job`` of ``path`` (a directory of ranks, or one trace): ``scheduler`` (a Dask
    address) / ``scheduler_file`` / ``workers`` (a local Dask cluster of N processes) send
    the ranks to Dask; else a local pool sized to the machine reads them. ``path`` may be an
    fsspec URL (``storage_options``: its filesystem's). ``load``: Trace options (``tp_bin``)."""
    return Job(path, rank, JobOptions(scheduler=scheduler, scheduler_file=scheduler_file,
                                      workers=workers, retries=retries, fail_fast=fail_fast,
                                      skip_bad=skip_bad_ranks, progress=progress,
                                      storage=dict(storage_options or {})), **load)
