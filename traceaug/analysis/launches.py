"""Launch statistics as HTA's ``get_cuda_kernel_launch_stats``: per launched GPU op the runtime call's and the
op's duration and the launch delay (op start − call end, ≥ 0); counts of short ops and of outliers."""

from __future__ import annotations

import numpy as np

from .gpu_steps import GpuOps
from .tables import Columns, concat, objects

RUNTIME_CUTOFF_US = 50  # HTA's defaults
DELAY_CUTOFF_US = 100
# HTA counts only these launches (include_memory_events=True); MTIA's submit call too.
HTA_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync",
                "runFunction - job_prep_and_submit_for_execution")
# launch_table's columns; ns.
COLUMNS = ("rank", "correlation", "launch_name", "name", "step", "cpu_duration", "gpu_duration",
           "launch_delay")


def launch_table(g: GpuOps, step: int | None = None) -> Columns:
    """One row per launched GPU op (``COLUMNS``), in GPU start order; a graph launch gives one
    row per op it launched."""
    ops = g.ops
    rows = np.flatnonzero(g.rows(step) & ops["launched"])
    delay = np.maximum(ops["ts"][rows] - ops["launch_end"][rows], 0)
    return {"rank": objects([g.rank] * len(rows)), "correlation": ops["correlation"][rows],
            "launch_name": ops["launch_name"][rows], "name": ops["name"][rows],
            "step": ops["step"][rows], "cpu_duration": ops["launch_dur"][rows],
            "gpu_duration": ops["dur"][rows], "launch_delay": delay.astype(np.int64)}


def outliers(table: Columns, runtime_cutoff_us: float = RUNTIME_CUTOFF_US,
             delay_cutoff_us: float = DELAY_CUTOFF_US) -> dict[str, np.ndarray]:
    """Masks of the launch table's rows: ``short`` (GPU op shorter than its runtime call),
    ``runtime`` (call longer than the cutoff), ``delay`` (launch delay above the cutoff)."""
    return {"short": table["gpu_duration"] < table["cpu_duration"],
            "runtime": table["cpu_duration"] > runtime_cutoff_us * 1e3,
            "delay": table["launch_delay"] > delay_cutoff_us * 1e3}


def summary(table: Columns, g: GpuOps, step: int | None = None,
            runtime_cutoff_us: float = RUNTIME_CUTOFF_US,
            delay_cutoff_us: float = DELAY_CUTOFF_US) -> dict:
    """Counts: launched ops, ops with no launch in the trace, short GPU ops, runtime outliers,
    launch-delay outliers; mean / max CPU duration and launch delay (ns)."""
    out = outliers(table, runtime_cutoff_us, delay_cutoff_us)
    n = len(table["cpu_duration"])
    return {"rank": g.rank, "launched_ops": n,
            "unlaunched_ops": int((g.rows(step) & ~g.ops["launched"]).sum()),
            "short_gpu_ops": int(out["short"].sum()), "runtime_outliers": int(out["runtime"].sum()),
            "delay_outliers": int(out["delay"].sum()),
            "mean_cpu_duration": float(table["cpu_duration"].mean()) if n else 0.0,
            "max_cpu_duration": int(table["cpu_duration"].max()) if n else 0,
            "mean_launch_delay": float(table["launch_delay"].mean()) if n else 0.0,
            "max_launch_delay": int(table["launch_delay"].max()) if n else 0}


OUTLIERS = (("runtime outliers", "runtime", "cpu_duration"),
            ("launch-delay outliers", "delay", "launch_delay"),
            ("short GPU ops (shorter than their runtime call)", "short", "gpu_duration"))


def part(g: GpuOps, in_job: bool, step: int | None, runtime_cutoff: float,
         delay_cutoff: float, top: int | None, full: bool = True) -> dict:
    """A rank's part of the ``launches`` command: its summary, its ``top`` outliers of each
    kind, and (``full``) its launch table."""
    t = launch_table(g, step)
    out = {"summary": summary(t, g, step, runtime_cutoff, delay_cutoff)}
    masks = outliers(t, runtime_cutoff, delay_cutoff)
    for _, key, col in OUTLIERS:
        rows = np.flatnonzero(masks[key])
        rows = rows[np.argsort(-t[col][rows], kind="stable")][:top]
        out[key] = {k: v[rows] for k, v in t.items()}
    if full:
        out["launches"] = t
    return out


def combine(parts: list[dict]) -> list[tuple[str, Columns]]:
    """The ``launches`` command's sections from each rank's ``part`` (the launch list when
    the parts hold it)."""
    rows = [p["summary"] for p in parts]
    summ = {k: objects([s[k] for s in rows]) if k == "rank" else np.array([s[k] for s in rows])
            for k in rows[0]}
    out = [("launch summary", summ)]
    out += [(title, concat([p[key] for p in parts])) for title, key, _ in OUTLIERS]
    if "launches" in parts[0]:
        out.append(("launches", concat([p["launches"] for p in parts])))
    return out
