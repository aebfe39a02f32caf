"""Queue-length and memory-bandwidth series (``pid, device, key, ts, value``: a row per change, engine ns) and
time-weighted summaries; ``style="hta"`` reproduces HTA's ``generate_trace_with_counters``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import SumTooLarge, TraceaugError
from .tables import Columns, first_match, frame, groups, isin, take

if TYPE_CHECKING:
    from ..trace import Trace

FULL_QUEUE = 1024  # CUDA's default launch-queue depth
HTA_LAUNCHES = (
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaMemcpyAsync", "cudaMemsetAsync", "hipLaunchKernel", "hipExtModuleLaunchKernel",
    "hipMemcpyAsync", "hipMemsetAsync", "hipMemcpyWithStream",
)
SERIES = ("queue", "bandwidth", "memory")


def _empty_series() -> Columns:
    return {"pid": np.empty(0, np.int64), "device": np.empty(0, np.int64),
            "key": np.empty(0, object), "ts": np.empty(0, np.int64), "value": np.empty(0)}


def _numeric(column: np.ndarray) -> np.ndarray:
    """float64: numbers and numeric text as they are, anything else NaN."""
    if column.dtype.kind in "iuf":
        return column.astype(np.float64)
    out = np.full(len(column), np.nan)
    for i, v in enumerate(column.tolist()):
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            pass
    return out


def _steps(gid: np.ndarray, rows: Columns, ts: np.ndarray, delta: np.ndarray,
           tiebreak: np.ndarray, per_timestamp: bool) -> Columns:
    """Cumulative sums of ``delta`` per group, ordered by (group, ts, tiebreak); ``rows``
    gives each change's pid, device and key."""
    order = np.lexsort((tiebreak, ts, gid))
    gid, ts, delta = gid[order], ts[order], delta[order]
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
    out = take(rows, order[keep])
    out["ts"], out["value"] = ts[keep], value[keep]
    return out


def _twice(table: Columns, names: tuple[str, ...]) -> Columns:
    return {n: np.concatenate([table[n], table[n]]) for n in names}


def launched_ops(trace: Trace) -> Columns:
    """Every GPU op (pid, device, stream, ts) with the call that launched it (a graph launch
    owns several ops)."""
    trace.include("traceaug.counters")
    launches = trace.columns("SELECT id AS launch_id, ts AS launch_ts, name AS launch_name, "
                             "correlation FROM traceaug_launch ORDER BY id")
    ops = trace.columns("SELECT pid, device, stream, ts, correlation "  # not names: slow to read
                        "FROM traceaug_gpu_op WHERE correlation IS NOT NULL ORDER BY id")
    launch = first_match(launches["correlation"], ops["correlation"])
    matched = np.flatnonzero(launch >= 0)
    out = take(ops, matched)  # in the ops' order, as an inner join on the left keys
    for name in ("launch_id", "launch_ts", "launch_name"):
        out[name] = launches[name][launch[matched]]
    return out


def queue_length(trace: Trace, style: str = "traceaug") -> Columns:
    """Ops launched but not yet started, per (device, stream); key = stream."""
    ops = launched_ops(trace)
    if style == "hta":
        ops = take(ops, isin(ops["launch_name"], HTA_LAUNCHES))
        start = ops["ts"].astype(np.int64)
    else:  # a GPU op never starts before its own launch (clock skew between CPU and GPU)
        start = np.maximum(ops["ts"].astype(np.int64), ops["launch_ts"].astype(np.int64))
    if not len(start):
        return _empty_series()
    ops["key"] = ops["stream"]
    gid = groups(ops["device"], ops["key"])
    ts = np.r_[ops["launch_ts"].astype(np.int64), start]
    delta = np.r_[np.ones(len(start), np.int64), -np.ones(len(start), np.int64)]
    # Equal timestamps: launches before starts, so the count never dips below its truth.
    tiebreak = -delta if style != "hta" else np.zeros_like(delta)
    return _steps(np.r_[gid, gid], _twice(ops, ("pid", "device", "key")), ts, delta, tiebreak,
                  per_timestamp=style != "hta")


def _hta_filters_uncorrelated(trace: Trace) -> bool:
    """HTA drops GPU ops no CPU event correlates to, when the trace has >= 2 ProfilerSteps."""
    steps = trace.columns("SELECT COUNT(DISTINCT name) AS n FROM traceaug_step")
    return int(steps["n"][0]) >= 2


def memory_bandwidth(trace: Trace, style: str = "traceaug") -> Columns:
    """GB/s of copies and sets in flight, per (device, copy kind); key = kind."""
    trace.include("traceaug.counters")
    copies = trace.columns("SELECT pid, device, ts, dur, copy_kind, hta_name, bytes, bw_arg, "
                           "correlation FROM traceaug_copy")
    if style == "hta" and _hta_filters_uncorrelated(trace):
        cpu = trace.columns("SELECT DISTINCT correlation FROM traceaug_runtime "
                            "WHERE correlation IS NOT NULL")
        copies = take(copies, isin(copies["correlation"], cpu["correlation"]))
    if not len(copies["ts"]):
        return _empty_series()
    dur = copies["dur"].astype(np.float64)
    if style == "hta":
        dur = np.where(dur == 0, 1000.0, dur)  # HTA rounds zero durations up to 1 µs
        copies["key"] = copies["hta_name"]
        gid = groups(copies["key"])
        bw = np.nan_to_num(_bandwidth(copies, dur))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            bw = _bandwidth(copies, dur)
        # A copy that takes no time moves no bytes per second; one with neither a byte count
        # nor a bandwidth has no known rate (no all-zero track for it).
        keep = (dur > 0) & np.isfinite(bw)
        copies, dur, bw = take(copies, keep), dur[keep], bw[keep]
        if not len(dur):
            return _empty_series()
        copies["key"] = copies["copy_kind"]
        gid = groups(copies["device"], copies["key"])
    start = copies["ts"].astype(np.int64)
    ts = np.r_[start, start + dur.astype(np.int64)]
    delta = np.r_[bw, -bw]
    # HTA: by time alone; else ends before starts at equal timestamps, one point per timestamp
    tiebreak = np.zeros_like(delta) if style == "hta" else np.r_[np.ones(len(bw)), np.zeros(len(bw))]
    out = _steps(np.r_[gid, gid], _twice(copies, ("pid", "device", "key")), ts, delta, tiebreak,
                 per_timestamp=style != "hta")
    if style != "hta":
        out["value"][np.abs(out["value"]) < 1e-9] = 0.0  # float residue of +bw -bw
    out["value"][out["value"] < 0] = 0.0
    return out


def _bandwidth(copies: Columns, dur: np.ndarray) -> np.ndarray:
    """GB/s of each copy (= bytes/ns): Kineto's bandwidth arg, else bytes over duration; NaN
    when it has neither."""
    bw = _numeric(copies["bw_arg"])
    return np.where(np.isnan(bw), _numeric(copies["bytes"]) / dur, bw)


def _integrals(series: Columns, end: int) -> tuple[Columns, np.ndarray]:
    """The series sorted by (device, key, ts) with the time each value holds (ns) up to
    ``end``, and where each (device, key) group starts."""
    # each value's rank among the distinct values (sorted as pandas sorts group keys)
    device, key = (np.unique(series[c], return_inverse=True)[1].reshape(-1) for c in ("device", "key"))
    order = np.lexsort((series["ts"], key, device))
    s, device, key = take(series, order), device[order], key[order]
    n = len(s["ts"])
    new = np.ones(n, dtype=bool)
    new[1:] = (device[1:] != device[:-1]) | (key[1:] != key[:-1])
    starts = np.flatnonzero(new)
    nxt = np.r_[s["ts"][1:], end].astype(np.int64)
    nxt[np.r_[starts[1:] - 1, n - 1] if n else starts] = end  # each group's last value
    s["held"] = np.maximum(nxt - s["ts"].astype(np.int64), 0)
    return s, starts


QUEUE_COLUMNS = ("device", "stream", "mean_queued", "max_queued", "empty_pct", "full_ns")


def queue_summary(series: Columns, start: int, end: int) -> Columns:
    """Per stream (``QUEUE_COLUMNS``): time-weighted mean and max of the ops queued, percent
    of the time empty, ns at a full queue (exact, int64)."""
    span = max(end - start, 1)
    s, at = _integrals(series, end)
    if not len(at):
        return {c: np.empty(0) for c in QUEUE_COLUMNS}
    value, held = s["value"], s["held"]
    first = s["ts"][at].astype(np.int64)  # before its first change point a queue is empty
    return {
        "device": s["device"][at], "stream": s["key"][at],
        "mean_queued": np.add.reduceat(value * held.astype(np.float64), at) / span,
        "max_queued": np.maximum.reduceat(value, at),
        "empty_pct": 100 * (np.add.reduceat(np.where(value == 0, held, 0), at)
                            + np.clip(first - start, 0, None)) / span,
        "full_ns": np.add.reduceat(np.where(value >= FULL_QUEUE, held, 0), at),
    }


def bandwidth_summary(series: Columns, copies: Columns, end: int) -> Columns:
    """Per copy kind: bytes, busy time (exact ns), mean GB/s while busy, peak GB/s."""
    s, at = _integrals(series, end)
    names = ("device", "kind", "bytes", "busy_ns", "mean_gbps_busy", "peak_gbps")
    if not len(at):
        return {c: np.empty(0) for c in names}
    value, held = s["value"], s["held"]
    busy = np.add.reduceat(np.where(value > 0, held, 0), at)
    total: dict = {}
    for d, k, b in zip(copies["device"].tolist(), copies["copy_kind"].tolist(),
                       copies["bytes"].tolist()):
        total[(d, k)] = total.get((d, k), 0) + b
    device, kind = s["device"][at], s["key"][at]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(busy > 0, np.add.reduceat(value * held.astype(np.float64), at) / busy, np.nan)
    return dict(zip(names, (
        device, kind,
        np.array([_fits(total.get(k, 0)) for k in zip(device.tolist(), kind.tolist())], np.int64),
        busy, mean, np.maximum.reduceat(value, at))))


def _fits(value: int) -> int:
    """A sum of copy bytes, refused past int64 (each copy's bytes are below 2^63, their sum
    need not be)."""
    if value >= 2**63:
        raise SumTooLarge("copy bytes add up past 2^63 (int64): no real trace does")
    return value


def _check_copy_args(trace: Trace) -> None:
    """A copy whose ``bytes`` or bandwidth arg is not a number is named, not fed to the SQL."""
    bad = trace.columns(
        "SELECT name, ts, key, display_value AS value FROM traceaug_gpu_op JOIN args USING "
        "(arg_set_id) WHERE kind IN ('memcpy', 'memset') AND key IN ('args.bytes', "
        "'args.memory bandwidth (GB/s)') AND (value_type NOT IN ('int', 'uint', 'real') "
        "OR COALESCE(int_value, real_value) < 0 OR COALESCE(int_value, real_value) >= 9.2e18) "
        "LIMIT 1")
    if len(bad["name"]):
        value = str(bad["value"][0])
        value = value if len(value) <= 40 else value[:39] + "…"
        raise TraceaugError(f"{trace.path}: {str(bad['name'][0])[:60]} at ts {int(bad['ts'][0])} ns: "
                            f"{bad['key'][0].removeprefix('args.')} is {value!r}, not a number "
                            "from 0 to 2^63")


def compute(trace: Trace, series: tuple[str, ...] = SERIES, style: str = "traceaug") -> dict:
    """All requested series and summaries as ``Columns`` (never imports pandas: its import is slow); raises
    for a trace with no GPU work."""
    trace.include("traceaug.base")
    if trace.columns("SELECT COUNT(*) AS n FROM traceaug_gpu_op")["n"][0] == 0:
        raise TraceaugError(f"{trace.path}: no GPU kernels, copies or sets (a CPU-only trace?): "
                            "no counters to add")
    _check_copy_args(trace)
    trace.include("traceaug.counters")
    span = trace.span()
    if span is None:
        raise TraceaugError(f"{trace.path}: no event has a duration of 0 or more: no time span "
                            "to put counters on")
    start, end = span
    out: dict = {"start": start, "end": end}
    if "queue" in series:
        out["queue"] = q = queue_length(trace, style)
        out["queue_summary"] = queue_summary(queue_length(trace) if style == "hta" else q, start, end)
    if "bandwidth" in series:
        out["bandwidth"] = b = memory_bandwidth(trace, style)
        copies = trace.columns("SELECT device, copy_kind, bytes FROM traceaug_copy")
        copies["bytes"] = np.nan_to_num(_numeric(copies["bytes"])).astype(np.int64)
        base = memory_bandwidth(trace) if style == "hta" else b
        out["bandwidth_summary"] = bandwidth_summary(base, copies, end)
    if "memory" in series and style != "hta":  # per device (no holders: the load has no CPU ops)
        from .memory import compute as memory

        found = memory(trace, holders=False)
        out["memory"], out["memory_summary"] = found["tracks"], found["steps"]
    return out


def counters(trace: Trace, series: tuple[str, ...] = SERIES, style: str = "traceaug") -> dict:
    """``compute`` with every table as a pandas DataFrame."""
    return {k: frame(v) if isinstance(v, dict) else v
            for k, v in compute(trace, series, style).items()}

