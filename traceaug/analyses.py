"""The analyses as pandas DataFrames (as HTA's ``TraceAnalysis``) of a file, a directory of ranks, a ``Trace``
or a ``Job`` (``load_job``: read once); times are integer ``*_ns``, shares ``*_pct``; each has ``rank``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .analysis import breakdown as bd
from .analysis import gaps as gp
from .analysis import kernels as kn
from .analysis import launches as ln
from .analysis.gpu_steps import LOAD, GpuOps, gpu_ops
from .analysis.tables import Columns, concat, frame, objects
from .render.sections import public

if TYPE_CHECKING:
    import pandas as pd

    from .job.loaded import Job
    from .trace import Trace

    Source = str | Path | Trace | Job  # a file, a directory of ranks, a loaded trace or job


def _ranks(source: Source, rank: int | None) -> list[GpuOps]:
    import traceaug.runtime as runtime

    from .job import parts
    from .job.loaded import Job
    from .job.run import JobOptions, Work, items_of, run
    from .read.ranks import select
    from .trace import Trace as Loaded

    if isinstance(source, Loaded):
        return [gpu_ops(source)]
    if isinstance(source, Job):  # read once: every analysis of the job reuses its tables
        return source.gpu_ops(rank)
    with runtime.using(progress=False):
        done = run(Work(LOAD["kind"], parts.ops, opens=parts.open_ops),
                   items_of(select(source, rank)), JobOptions(progress=False))
    return list(done.values())


def _each(source: Source, rank: int | None, fn) -> pd.DataFrame:
    return frame(public(concat([fn(g) for g in _ranks(source, rank)])))


def kernels(source: Source, step: int | None = None, rank: int | None = None,
            kind: str | None = None, sort: str = "total") -> pd.DataFrame:
    """Per GPU op name (kernels, copies, sets): ``rank``, ``name``, ``type`` (computation /
    communication / memory), ``count``, ``total_ns``, ``mean_ns``, ``std_ns``, ``min_ns``,
    ``max_ns``, ``launches_pct``, ``time_pct``. ``kind``: comp, comm or mem only."""
    return _each(source, rank, lambda g: kn.sort_by(kn.kernel_table(g, step, kind), sort))


def kernels_across_ranks(source: Source, step: int | None = None) -> pd.DataFrame:
    """Per kernel name over the ranks: ``name``, ``type``, ``ranks``, ``mean_total_ns``,
    ``min_total_ns``, ``max_total_ns``, ``max_total_rank``; communication kernels matched across
    ranks also ``mean_wait_ns``, ``mean_transfer_ns`` and ``waited_for_rank``."""
    ranks = _ranks(source, None)
    return frame(public(kn.across_ranks([kn.kernel_table(g, step) for g in ranks],
                                        kn.comm_split([kn.comm_rows(g, step) for g in ranks]))))


def stream_gaps(source: Source, step: int | None = None, rank: int | None = None) -> pd.DataFrame:
    """Idle gaps per (device, stream): ``rank``, ``device``, ``stream``, ``ops``, ``gaps``,
    ``total_ns``, ``mean_ns``, ``median_ns``, ``min_ns``, ``max_ns`` (missing without a gap)."""
    return _each(source, rank, lambda g: gp.stream_gaps(g, step))


def device_gaps(source: Source, step: int | None = None, rank: int | None = None) -> pd.DataFrame:
    """Idle gaps per device in the union of its streams: ``rank``, ``device``, ``streams``,
    ``gaps``, ``total_ns``, ``mean_ns``, ``median_ns``, ``min_ns``, ``max_ns``."""
    return _each(source, rank, lambda g: gp.device_gaps(g, step))


def kernel_transitions(source: Source, step: int | None = None, rank: int | None = None,
                       sort: str = "count") -> pd.DataFrame:
    """Consecutive ops on a stream: ``rank``, ``transition`` ("A → B", short names), ``from``, ``to``,
    ``count`` and the gap's ``total_ns``, ``mean_ns``, ``std_ns``, ``min_ns``, ``max_ns``."""
    def one(g: GpuOps) -> Columns:
        t = gp.transitions(g, step, sort)
        return {"rank": np.array([g.rank] * len(t["count"]), dtype=object), **t}
    return _each(source, rank, one)


def gap_histogram(source: Source, step: int | None = None, rank: int | None = None,
                  lo_us: float | None = None, hi_us: float | None = None,
                  bins: int = 20) -> pd.DataFrame:
    """Positive gaps between ops on a stream, every rank together: ``lo_us``, ``hi_us``,
    ``count``."""
    pairs = concat([gp.stream_pairs(g, step) for g in _ranks(source, rank)])
    return frame(gp.histogram(gp.counted(pairs.get("gap", np.empty(0, np.int64))), lo_us, hi_us, bins))


def temporal_breakdown(source: Source, step: int | None = None, rank: int | None = None,
                       all_steps: bool = False) -> pd.DataFrame:
    """Per rank and step (``step`` None: every step): GPU window ``source``, ``window_start_ns``,
    ``window_ns``, ``cpu_step_ns``, ``busy_ns``, ``idle_ns``, ``idle_pct``, ``computation_ns``,
    ``communication_ns``, ``memory_ns``, exclusive ``comp_only_ns`` ... ``comp_comm_mem_ns``,
    ``comm_overlap_pct``. ``all_steps``: instead one row per rank over all its steps, no ``step``
    column (HTA's ``get_temporal_breakdown``; a trace without steps: its GPU ops)."""
    if all_steps and step is not None:
        raise ValueError("all_steps is the window over every step: give no step")
    per_step, whole = bd.split(concat([bd.temporal(g, step) for g in _ranks(source, rank)]))
    return frame(public(whole if all_steps else per_step))


def idle_breakdown(source: Source, step: int | None = None, rank: int | None = None,
                   kernel_wait_us: float = bd.KERNEL_WAIT_US) -> pd.DataFrame:
    """HTA's idle breakdown per stream: ``rank``, ``device``, ``stream``, ``category`` (host_wait /
    kernel_wait / other), ``count``, ``idle_ns``, ``share_pct`` (of the stream's idle time)."""
    return _each(source, rank, lambda g: bd.idle_by_stream(g, step, kernel_wait_us))


def comm_comp_overlap(source: Source, step: int | None = None, rank: int | None = None,
                      all_steps: bool = False) -> pd.DataFrame:
    """Per rank and step (``all_steps``: per rank over every step, as HTA): ``communication_ns``,
    ``comp_comm_ns`` (also with memory) and ``comm_overlap_pct``, the share of communication time
    when computation runs too."""
    t = temporal_breakdown(source, step, rank, all_steps)
    t["comp_comm_ns"] = t["comp_comm_ns"] + t["comp_comm_mem_ns"]
    return t[["rank", *([] if all_steps else ["step"]), "communication_ns", "comp_comm_ns",
              "comm_overlap_pct"]]


def launches(source: Source, step: int | None = None, rank: int | None = None) -> pd.DataFrame:
    """Per launched GPU op: ``rank``, ``correlation``, ``launch_name``, ``name``, ``step``,
    ``cpu_duration_ns``, ``gpu_duration_ns``, ``launch_delay_ns``."""
    return _each(source, rank, lambda g: ln.launch_table(g, step))


def launch_summary(source: Source, step: int | None = None, rank: int | None = None,
                   runtime_cutoff_us: float = ln.RUNTIME_CUTOFF_US,
                   delay_cutoff_us: float = ln.DELAY_CUTOFF_US) -> pd.DataFrame:
    """Per rank: ``launched_ops``, ``unlaunched_ops``, ``short_gpu_ops``, ``runtime_outliers``,
    ``delay_outliers``, ``mean_cpu_duration_ns``, ``max_cpu_duration_ns``, ``mean_launch_delay_ns``,
    ``max_launch_delay_ns``."""
    rows = [public(ln.summary(ln.launch_table(g, step), g, step, runtime_cutoff_us, delay_cutoff_us))
            for g in _ranks(source, rank)]
    return frame({k: objects([r[k] for r in rows]) if k == "rank" else np.array([r[k] for r in rows])
                  for k in rows[0]})
