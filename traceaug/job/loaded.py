"""``traceaug.load_job``: every rank of a job read once per kind of result and kept as plain
tables, so many analyses run on one read of each rank (as HTA's ``TraceAnalysis(trace_dir)``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import traceaug.runtime as runtime

from ..errors import TraceaugError
from ..read.storage import is_url
from . import parts
from .run import JobOptions, Work, fit, items_of, run


class Job:
    """Every rank of a job, read once per kind of result: ``gpu_ops()``, ``info()``,
    ``results(name, work)``; ``rank`` keeps one rank; one cluster serves every analysis."""

    def __init__(self, path: str | Path, rank: int | None = None,
                 options: JobOptions | None = None, rt: runtime.Runtime | None = None) -> None:
        self.path = path if is_url(path) else Path(path)
        self.options = options or JobOptions(progress=False)
        self.runtime = rt or runtime.current()
        with runtime.using(self.runtime):
            self.files = self.options.select(self.path, rank)
        if self.options.executor is None:
            self.options.executor = self.options.connect(fit(items_of(self.files), "analysis"))
        self._owned = self.options.executor
        self._kept: dict[str, dict] = {}

    @property
    def ranks(self) -> list:
        return [f.rank for f in self.files]

    def results(self, name: str, work: Work) -> dict:
        """``work`` on every rank, run once per ``name``: {rank: result}."""
        if name not in self._kept:
            with runtime.using(self.runtime):
                self._kept[name] = run(work, items_of(self.files), self.options)
        return self._kept[name]

    def gpu_ops(self, rank: int | None = None) -> list:
        """The GPU ops of every rank (or of ``rank``), in rank order."""
        found = self.results("gpu", Work("gpu_steps", parts.ops, opens=parts.open_ops))
        if rank is None:
            return list(found.values())
        if rank not in found:
            raise TraceaugError(f"{self.path}: no trace for rank {rank} "
                                f"(it has {', '.join(map(str, found))})")
        return [found[rank]]

    def info(self) -> list[dict]:
        """``traceaug info`` of every rank, in rank order."""
        return list(self.results("info", Work("analysis", parts.info)).values())

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
             storage_options: dict | None = None, **options: Any) -> Job:
    """A ``Job`` of ``path`` (a directory, a trace or an fsspec URL); ``scheduler``,
    ``scheduler_file``, ``workers``, ``retries``, ``fail_fast``, ``skip_bad_ranks`` as the CLI's."""
    rt = replace(runtime.current(), storage=dict(storage_options or {}),
                 tp_bin=options.pop("tp_bin", None) or runtime.current().tp_bin)
    job = JobOptions(scheduler=scheduler, skip_bad=options.pop("skip_bad_ranks", False),
                     **{"progress": False, **options})
    return Job(path, rank, job, rt)
