"""Idle GPU gaps as the GPU Kernel Analyzer reports them: per (device, stream) between one op's end and the
next's start, per device in the union of its streams, a histogram, and "A → B" kernel transitions."""

from __future__ import annotations

import numpy as np

from .gpu_steps import GpuOps
from .intervals import gaps as union_gaps
from .intervals import int_groups, sorted_groups
from .kernels import grouped
from .steps import shorten
from .sums import group_sums
from .tables import Columns, concat, objects

STREAM_COLUMNS = ("rank", "device", "stream", "ops", "gaps", "total", "mean", "median", "min",
                  "max")
TRANSITION_SORTS = ("count", "total", "mean", "max", "min", "std")


def stream_pairs(g: GpuOps, step: int | None = None) -> Columns:
    """Consecutive ops on each (device, stream) in start order: ``device``, ``stream``, ``prev`` and ``next``
    names, ``gap`` = next start − the stream's latest end so far (ns, ≥ 0: overlap leaves none)."""
    ops = g.ops
    rows = np.flatnonzero(g.rows(step))
    order = rows[np.lexsort((ops["end"][rows], ops["ts"][rows], ops["stream"][rows],
                             ops["device"][rows]))]
    dev, stream = ops["device"][order], ops["stream"][order]
    ts, end = ops["ts"][order], ops["end"][order]
    if not len(order):
        return {"device": dev, "stream": stream, "prev": objects([]), "next": objects([]),
                "gap": np.empty(0, np.int64)}
    starts = np.r_[True, (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])]  # a new stream
    # the latest end so far on each stream: one running max, each stream lifted above the last
    seg = (np.cumsum(starts) - 1).astype(np.int64)
    low = int(end.min())
    lift = np.int64(int(end.max()) - low + 1)
    reach = np.maximum.accumulate(end - low + seg * lift) - seg * lift + low
    follows = ~starts
    i = np.flatnonzero(follows)
    gap = np.maximum(ts[i] - reach[i - 1], 0)
    names = ops["name"][order]
    return {"device": dev[i], "stream": stream[i], "prev": names[i - 1], "next": names[i],
            "gap": gap.astype(np.int64)}


def _stats(key_cols: list[np.ndarray], gap: np.ndarray) -> tuple[np.ndarray, Columns]:
    """Statistics of the positive gaps per key (median too); the first row of each key."""
    pos = gap > 0
    if not len(gap):
        return np.empty(0, np.int64), {}
    gid = int_groups(*key_cols)
    n = int(gid.max()) + 1
    first = np.unique(gid, return_index=True)[1]
    count = np.bincount(gid[pos], minlength=n)
    total = group_sums(gid[pos], gap[pos], n, "idle gaps")
    med = np.zeros(n)
    lo = np.zeros(n, np.int64)
    hi = np.zeros(n, np.int64)
    order = np.lexsort((gap[pos], gid[pos]))
    gs, vs = gid[pos][order], gap[pos][order]
    if len(gs):
        starts = np.searchsorted(gs, np.arange(n))
        ends = np.searchsorted(gs, np.arange(n), side="right")
        have = ends > starts
        lo[have] = vs[starts[have]]
        hi[have] = vs[ends[have] - 1]
        mid_lo, mid_hi = (starts + ends - 1) // 2, (starts + ends) // 2
        med[have] = (vs[mid_lo[have]] / 2 + vs[mid_hi[have]] / 2)  # no int64 sum to wrap
    return first, {"gaps": count, "total": total, "mean": total / np.maximum(count, 1),
                   "median": med, "min": lo, "max": hi}


def _stats_of(keys: list[tuple], key_cols: list[np.ndarray], gap: np.ndarray) -> Columns:
    """``_stats`` of the gaps per key (``key_cols``: each gap's) on the rows ``keys``, in that order (where
    a key has no gap: none, and missing figures, ``_no_gap_stats``)."""
    first, stats = _stats(key_cols, gap)
    found = dict(zip(zip(*(c[first].tolist() for c in key_cols)), range(len(first))))
    out: Columns = {}
    for name in ("gaps", "total", "mean", "median", "min", "max"):
        col = stats.get(name, np.zeros(0))
        dtype = np.float64 if name in ("mean", "median") else np.int64
        out[name] = np.array([col[found[k]] if k in found else 0 for k in keys], dtype)
    return _no_gap_stats(out)


def stream_gaps(g: GpuOps, step: int | None = None) -> Columns:
    """Per (device, stream) (``STREAM_COLUMNS``): ops, number of idle gaps (> 0 ns) and their
    total / mean / median / min / max (ns)."""
    p = stream_pairs(g, step)
    rows = g.rows(step)
    dev, stream = g.ops["device"][rows], g.ops["stream"][rows]
    group, first_row = sorted_groups(dev, stream)
    keys = list(zip(dev[first_row].tolist(), stream[first_row].tolist()))
    return {"rank": objects([g.rank] * len(keys)), "device": dev[first_row], "stream": stream[first_row],
            "ops": np.bincount(group, minlength=len(keys)),
            **_stats_of(keys, [p["device"], p["stream"]], p["gap"])}


def _no_gap_stats(out: Columns) -> Columns:
    """Where there is no gap (one op, or ops back to back) mean, median, min and max are
    missing (NaN; None for the integer min and max), not 0: 0 would read as gaps of 0 ns."""
    none = out["gaps"] == 0
    for name in ("mean", "median"):
        out[name] = np.where(none, np.nan, out[name].astype(np.float64))
    for name in ("min", "max"):
        out[name] = objects([None if n else int(v) for v, n in zip(out[name].tolist(), none.tolist())])
    return out


def device_gaps(g: GpuOps, step: int | None = None) -> Columns:
    """Per device: the idle gaps in the union of its streams' ops (a gap only when no stream
    runs): ``streams``, ``gaps``, ``total``, ``mean``, ``median``, ``min``, ``max`` (ns)."""
    ops = g.ops
    rows = g.rows(step)
    dev, ts, end = ops["device"][rows], ops["ts"][rows], ops["end"][rows]
    devices, streams = np.unique(dev[sorted_groups(dev, ops["stream"][rows])[1]], return_counts=True)
    gaps = [union_gaps(ts[dev == d], end[dev == d]) for d in devices.tolist()]
    length = np.concatenate([hi - lo for lo, hi in gaps]) if gaps else np.zeros(0, np.int64)
    of = np.repeat(devices, [len(hi) for _, hi in gaps])
    return {"rank": objects([g.rank] * len(devices)), "device": devices, "streams": streams,
            **_stats_of([(d,) for d in devices.tolist()], [of], length)}


def histogram(gaps: tuple[np.ndarray, np.ndarray], lo_us: float | None = None, hi_us: float | None = None,
              bins: int = 20, log: bool = True) -> Columns:
    """Positive gaps per bin of [``lo_us``, ``hi_us``] µs (default: their range): ``lo_us``, ``hi_us``,
    ``count``. Log bins (gaps span decades) from the least gap if ``lo_us`` <= 0; ``log=False``: linear.
    ``gaps``: (distinct gaps in ns, how many of each), as ``counted`` gives them."""
    gap_ns, times = gaps
    weights = times[gap_ns > 0]
    us = gap_ns[gap_ns > 0] / 1e3
    lo = float(us.min()) if lo_us is None and len(us) else (lo_us or 0.0)
    hi = float(us.max()) if hi_us is None and len(us) else (hi_us if hi_us is not None else 1.0)
    hi = max(hi, lo + 1e-3, lo + abs(lo) * 1e-9 * bins)  # bins of a width a float can tell
    if not log:
        counts, edges = np.histogram(us, bins=bins, range=(lo, hi), weights=weights)
        return {"lo_us": edges[:-1], "hi_us": edges[1:], "count": counts.astype(np.int64)}
    inside = us[(us >= lo) & (us <= hi)]
    start = lo if lo > 0 else min(float(inside.min()) if len(inside) else 1e-3, hi / 2)
    edges = np.geomspace(start, hi, bins + 1)
    edges[0], edges[-1] = lo, hi  # exactly the range asked for
    counts = np.histogram(us, bins=edges, weights=weights)[0]
    return {"lo_us": edges[:-1], "hi_us": edges[1:], "count": counts.astype(np.int64)}


def transitions(g: GpuOps, step: int | None = None, sort: str = "count") -> Columns:
    """Kernel-to-kernel transitions on a stream: ``transition`` ("A → B", short names), ``from``, ``to`` (full
    names), ``count``, the gap's ``total, mean, std, min, max`` (ns); by ``sort``, largest first."""
    p = stream_pairs(g, step)
    key = objects(list(zip(p["prev"].tolist(), p["next"].tolist())))
    keys, stats = grouped(key, p["gap"])
    out = {"transition": objects([f"{shorten(a)} → {shorten(b)}" for a, b in keys]),
           "from": objects([k[0] for k in keys]), "to": objects([k[1] for k in keys]), **stats}
    names = np.array([f"{a}\x00{b}" for a, b in keys], dtype=object).astype(str)
    order = np.lexsort((names, -out[sort].astype(np.float64)))
    return {k: v[order] for k, v in out.items()}


def counted(gap_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct gaps and how many of each (a few hundred for thousands of gaps on an A100 rank): what
    a job's histogram holds of each rank."""
    return np.unique(gap_ns, return_counts=True)


def part(g: GpuOps, in_job: bool, step: int | None, top: int | None, sort: str) -> dict:
    """A rank's part of the ``gaps`` command: its gap tables, its ``top`` transitions, and its
    positive gaps, ``counted`` (what the job's histogram counts)."""
    gap = stream_pairs(g, step)["gap"]
    t = {k: v[:top] for k, v in transitions(g, step, sort).items()}
    return {"gap": counted(gap[gap > 0]), "transitions": {"rank": objects([g.rank] * len(t["count"])), **t},
            "stream": stream_gaps(g, step), "device": device_gaps(g, step)}


def combine(parts: list[dict], hist_min: float | None, hist_max: float | None,
         bins: int) -> list[tuple[str, Columns]]:
    """The ``gaps`` command's sections from each rank's ``part``."""
    gap = tuple(np.concatenate([p["gap"][i] for p in parts]) for i in (0, 1))
    hist = histogram(gap, hist_min, hist_max, bins)
    return [("gaps per stream", concat([p["stream"] for p in parts])),
            ("gaps per device (union of its streams)", concat([p["device"] for p in parts])),
            ("gap histogram (µs, log-spaced bins, gaps > 0 on every stream)", hist),
            ("kernel transitions on a stream (gap after A before B)",
             concat([p["transitions"] for p in parts]))]
