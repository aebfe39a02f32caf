"""Queue-length and memory-bandwidth time series, and their time-weighted summaries.

SQL (``traceaug.counters``) pairs every GPU op with the call that launched it
and classifies copies; numpy turns the +/- changes into step series. Each
series is a DataFrame ``pid, device, key, ts, value`` with one row per change
point (``ts`` in engine ns); the value holds until the next row.

``style="hta"`` reproduces HTA's ``generate_trace_with_counters``: its launch
list (no graph launches), no clamping of a kernel that starts before its
launch, bandwidth per copy name across devices, zero durations as 1 µs, and
one point per event rather than per timestamp.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import TraceaugError
from ..trace import Trace

FULL_QUEUE = 1024  # CUDA's default launch-queue depth
HTA_LAUNCHES = (
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaMemcpyAsync", "cudaMemsetAsync", "hipLaunchKernel", "hipExtModuleLaunchKernel",
    "hipMemcpyAsync", "hipMemsetAsync", "hipMemcpyWithStream",
)
SERIES = ("queue", "bandwidth")
_COLUMNS = ["pid", "device", "key", "ts", "value"]


def _steps(groups: pd.DataFrame, ts: np.ndarray, delta: np.ndarray, tiebreak: np.ndarray,
           per_timestamp: bool) -> pd.DataFrame:
    """Cumulative sums of ``delta`` per group, ordered by (group, ts, tiebreak)."""
    order = np.lexsort((tiebreak, ts, groups["gid"].to_numpy()))
    gid = groups["gid"].to_numpy()[order]
    ts, delta = ts[order], delta[order]
    total = np.cumsum(delta)
    starts = np.r_[0, np.flatnonzero(gid[1:] != gid[:-1]) + 1]
    offset = np.zeros_like(total)
    if len(total):
        before = np.r_[0, total[starts[1:] - 1]]
        offset = np.repeat(before, np.diff(np.r_[starts, len(total)]))
    value = total - offset
    keep = np.ones(len(ts), dtype=bool)
    if per_timestamp and len(ts):  # the value after every change at a timestamp
        keep[:-1] = (gid[1:] != gid[:-1]) | (ts[1:] != ts[:-1])
    out = groups.iloc[order].reset_index(drop=True).loc[keep, ["pid", "device", "key"]]
    out["ts"] = ts[keep]
    out["value"] = value[keep]
    return out.reset_index(drop=True)


def launched_ops(trace: Trace) -> pd.DataFrame:
    """Every GPU op with the call that launched it (a graph launch owns several ops)."""
    trace.include("traceaug.counters")
    launches = trace.query("SELECT id AS launch_id, ts AS launch_ts, name AS launch_name, correlation "
                           "FROM traceaug_launch ORDER BY id")
    launches = launches.drop_duplicates("correlation")
    ops = trace.query("SELECT id, pid, device, stream, kind, name, ts, dur, correlation "
                      "FROM traceaug_gpu_op WHERE correlation IS NOT NULL")
    return ops.merge(launches, on="correlation", how="inner")  # launches are unique by now


def queue_length(trace: Trace, style: str = "traceaug") -> pd.DataFrame:
    """Ops launched but not yet started, per (device, stream); key = stream."""
    ops = launched_ops(trace)
    if style == "hta":
        ops = ops[ops["launch_name"].isin(HTA_LAUNCHES)]
        start = ops["ts"].to_numpy(np.int64)
    else:  # a GPU op never starts before its own launch (clock skew between CPU and GPU)
        start = np.maximum(ops["ts"].to_numpy(np.int64), ops["launch_ts"].to_numpy(np.int64))
    if ops.empty:
        return pd.DataFrame(columns=_COLUMNS)
    ops = ops.rename(columns={"stream": "key"})
    ops["gid"] = ops.groupby(["device", "key"], sort=False).ngroup()
    groups = pd.concat([ops, ops], ignore_index=True)
    ts = np.r_[ops["launch_ts"].to_numpy(np.int64), start]
    delta = np.r_[np.ones(len(ops), np.int64), -np.ones(len(ops), np.int64)]
    # Equal timestamps: launches before starts, so the count never dips below its truth.
    tiebreak = -delta if style != "hta" else np.zeros_like(delta)
    return _steps(groups, ts, delta, tiebreak, per_timestamp=style != "hta")


def _hta_filters_uncorrelated(trace: Trace) -> bool:
    """HTA drops GPU ops no CPU event correlates to, when the trace has >= 2 ProfilerSteps."""
    steps = trace.query("SELECT COUNT(DISTINCT name) AS n FROM traceaug_step")
    return int(steps["n"][0]) >= 2


def memory_bandwidth(trace: Trace, style: str = "traceaug") -> pd.DataFrame:
    """GB/s of copies and sets in flight, per (device, copy kind); key = kind."""
    trace.include("traceaug.counters")
    copies = trace.query("SELECT pid, device, ts, dur, copy_kind, hta_name, bytes, bw_arg, correlation "
                         "FROM traceaug_copy")
    if style == "hta" and _hta_filters_uncorrelated(trace):
        cpu = trace.query("SELECT DISTINCT correlation FROM traceaug_runtime "
                          "WHERE correlation IS NOT NULL")
        copies = copies[copies["correlation"].isin(cpu["correlation"])].reset_index(drop=True)
    if copies.empty:
        return pd.DataFrame(columns=_COLUMNS)
    dur = copies["dur"].to_numpy(np.float64)
    if style == "hta":
        dur = np.where(dur == 0, 1000.0, dur)  # HTA rounds zero durations up to 1 µs
        copies["key"] = copies["hta_name"]
        copies["gid"] = copies.groupby("key", sort=False).ngroup()
    else:
        keep = dur > 0  # a copy that takes no time moves no bytes per second
        copies, dur = copies[keep].reset_index(drop=True), dur[keep]
        copies["key"] = copies["copy_kind"]
        copies["gid"] = copies.groupby(["device", "key"], sort=False).ngroup()
    bytes_ = pd.to_numeric(copies["bytes"], errors="coerce").to_numpy(np.float64)
    bw = pd.to_numeric(copies["bw_arg"], errors="coerce").to_numpy(np.float64)
    bw = np.where(np.isnan(bw), bytes_ / dur, bw)  # bytes per ns = GB/s
    bw = np.nan_to_num(bw)
    start = copies["ts"].to_numpy(np.int64)
    groups = pd.concat([copies, copies], ignore_index=True)
    ts = np.r_[start, start + dur.astype(np.int64)]
    delta = np.r_[bw, -bw]
    if style == "hta":
        out = _steps(groups, ts, delta, np.zeros_like(delta), per_timestamp=False)
    else:  # ends before starts at equal timestamps; one point per timestamp
        out = _steps(groups, ts, delta, np.r_[np.ones(len(bw)), np.zeros(len(bw))], True)
        out.loc[out["value"].abs() < 1e-9, "value"] = 0.0  # float residue of +bw -bw
    out.loc[out["value"] < 0, "value"] = 0.0
    return out


def _integrals(series: pd.DataFrame, end: int) -> pd.DataFrame:
    """Per series: the time each value holds (ns), up to ``end``."""
    s = series.sort_values(["device", "key", "ts"], kind="stable").reset_index(drop=True)
    nxt = s.groupby(["device", "key"], sort=False)["ts"].shift(-1).fillna(end).to_numpy(np.int64)
    s["held"] = np.maximum(nxt - s["ts"].to_numpy(np.int64), 0)
    return s


def queue_summary(series: pd.DataFrame, start: int, end: int) -> pd.DataFrame:
    """Per stream: time-weighted mean, max, share of time empty, time at a full queue."""
    span = max(end - start, 1)
    s = _integrals(series, end)
    s["area"] = s["value"] * s["held"]
    s["empty"] = np.where(s["value"] == 0, s["held"], 0)
    s["full"] = np.where(s["value"] >= FULL_QUEUE, s["held"], 0)
    g = s.groupby(["device", "key"], sort=True)
    first = g["ts"].min()
    out = pd.DataFrame({
        "mean": g["area"].sum() / span,
        "max": g["value"].max(),
        # before its first change point a queue is empty
        "empty_share": (g["empty"].sum() + (first - start).clip(lower=0)) / span,
        "full_ms": g["full"].sum() / 1e6,
    }).reset_index().rename(columns={"key": "stream"})
    return out


def bandwidth_summary(series: pd.DataFrame, copies: pd.DataFrame, end: int) -> pd.DataFrame:
    """Per copy kind: bytes, busy time, mean GB/s while busy, peak GB/s."""
    s = _integrals(series, end)
    s["busy"] = np.where(s["value"] > 0, s["held"], 0)
    s["area"] = s["value"] * s["held"]
    g = s.groupby(["device", "key"], sort=True)
    out = pd.DataFrame({
        "busy_ms": g["busy"].sum() / 1e6,
        "mean_gbps_busy": g["area"].sum() / g["busy"].sum().replace(0, np.nan),
        "peak_gbps": g["value"].max(),
    }).reset_index().rename(columns={"key": "kind"})
    nbytes = copies.groupby(["device", "copy_kind"])["bytes"].sum().rename("bytes")
    out = out.join(nbytes, on=["device", "kind"])
    return out[["device", "kind", "bytes", "busy_ms", "mean_gbps_busy", "peak_gbps"]]


def counters(trace: Trace, series: tuple[str, ...] = SERIES, style: str = "traceaug") -> dict:
    """All requested series and summaries; raises for a trace with no GPU work."""
    trace.include("traceaug.counters")
    if trace.query("SELECT COUNT(*) AS n FROM traceaug_gpu_op")["n"][0] == 0:
        raise TraceaugError(f"{trace.path}: no GPU kernels, copies or sets (a CPU-only trace?): "
                            "no counters to add")
    start, end = trace.span()  # there are GPU ops, so there is a span
    out: dict = {"start": start, "end": end}
    if "queue" in series:
        q = queue_length(trace, style)
        out["queue"] = q
        out["queue_summary"] = queue_summary(queue_length(trace) if style == "hta" else q, start, end)
    if "bandwidth" in series:
        b = memory_bandwidth(trace, style)
        out["bandwidth"] = b
        copies = trace.query("SELECT device, copy_kind, bytes FROM traceaug_copy")
        copies["bytes"] = pd.to_numeric(copies["bytes"], errors="coerce").fillna(0).astype(np.int64)
        base = memory_bandwidth(trace) if style == "hta" else b
        out["bandwidth_summary"] = bandwidth_summary(base, copies, end)
    return out
