"""Temporal breakdown per GPU step window, idle breakdown per stream (HTA's rules) and
communication / computation overlap.

Busy time is the union of GPU op intervals (kernels, copies, sets; ``cuda_sync`` rows are
not GPU ops) inside the step's GPU window (``gpu_steps``); idle = window − busy. Each type's
time is the union of its ops; the exclusive columns split busy time by which types run.
"""

from __future__ import annotations

import numpy as np

from .gpu_steps import GpuOps
from .intervals import clip, exclusive, int_groups, union_length
from .tables import Columns, objects

KERNEL_WAIT_US = 30  # HTA's consecutive_kernel_delay
TYPES = ("computation", "communication", "memory")
_SHORT = {"computation": "comp", "communication": "comm", "memory": "mem"}
# Exclusive combinations, in this order: comp_only, comm_only, mem_only, comp_comm, ...
COMBOS = [frozenset(c) for c in (("computation",), ("communication",), ("memory",),
                                 ("computation", "communication"), ("computation", "memory"),
                                 ("communication", "memory"), TYPES)]


def _combo_name(c: frozenset) -> str:
    return "_".join(_SHORT[t] for t in TYPES if t in c) + ("_only" if len(c) == 1 else "")


# temporal's columns (ns, percent): one row per step and one for all of them (step None).
TEMPORAL_COLUMNS = ("rank", "step", "source", "window_start", "window", "cpu_step", "busy", "idle",
                    "idle_pct", *TYPES, *map(_combo_name, COMBOS), "comm_overlap_pct")


def window_row(g: GpuOps, lo: int, hi: int) -> dict:
    """Busy, idle, per-type and exclusive-combination times of every GPU op clipped to
    [lo, hi), and the share of communication time overlapped by computation."""
    ops = g.ops
    # ops are in start order: only those starting before hi, after every op ending by lo
    a = int(np.searchsorted(g.reach, lo, side="right"))
    b = int(np.searchsorted(ops["ts"], hi, side="left"))
    ts, end, cat = ops["ts"][a:b], ops["end"][a:b], g.type_code(TYPES)[a:b]
    inside = np.minimum(end, hi) > np.maximum(ts, lo)
    ts, end = clip(ts, end, lo, hi)
    cat = cat[inside]
    busy = union_length(ts, end)
    spans = {t: (ts[m], end[m]) for i, t in enumerate(TYPES) for m in [cat == i]}
    row = {"window": hi - lo, "busy": busy, "idle": hi - lo - busy,
           "idle_pct": 100 * (hi - lo - busy) / (hi - lo) if hi > lo else 0.0}
    for t in TYPES:
        row[t] = union_length(*spans[t])
    ex = exclusive(spans)
    for c in COMBOS:
        row[_combo_name(c)] = ex.get(c, 0)
    both = row["comp_comm"] + row["comp_comm_mem"]
    row["comm_overlap_pct"] = 100 * both / row["communication"] if row["communication"] else 0.0
    return row


def temporal(g: GpuOps, step: int | None = None) -> Columns:
    """Per step (and, without ``step``, one row ``step`` = None over all of them: the first
    window's start to the last one's end) (``TEMPORAL_COLUMNS``)."""
    st = g.steps
    wanted = [step] if step is not None else st["step"].tolist()
    rows = []
    for n in wanted:
        lo, hi, src = g.window(n)
        i = int(np.flatnonzero(st["step"] == n)[0])
        rows.append({"step": n, "source": src, "window_start": lo,
                     "cpu_step": int(st["cpu_end"][i] - st["cpu_ts"][i]), **window_row(g, lo, hi)})
    if step is None:
        lo, hi, src = g.window(None)
        cpu = int((st["cpu_end"] - st["cpu_ts"]).sum()) if len(st["step"]) else 0
        rows.append({"step": None, "source": src, "window_start": lo, "cpu_step": cpu,
                     **window_row(g, lo, hi)})
    out = {c: [r.get(c) for r in rows] for c in TEMPORAL_COLUMNS if c != "rank"}
    return {"rank": objects([g.rank] * len(rows)),
            **{c: objects(v) if c in ("step", "source") else np.array(v) for c, v in out.items()}}


def idle_by_stream(g: GpuOps, step: int | None = None, kernel_wait_us: float = KERNEL_WAIT_US) -> Columns:
    """HTA's idle breakdown per stream: each gap between consecutive ops on a (device, stream)
    is ``host_wait`` when the next op's launch started after the previous op ended, else
    ``kernel_wait`` when shorter than ``kernel_wait_us``, else ``other``. Columns ``device``,
    ``stream``, ``category``, ``count``, ``idle`` (ns), ``ratio`` (of the stream's idle time)."""
    ops = g.ops
    rows = np.flatnonzero(g.rows(step))
    order = rows[np.lexsort((ops["ts"][rows], ops["stream"][rows], ops["device"][rows]))]
    dev, stream, ts, end = (ops[k][order] for k in ("device", "stream", "ts", "end"))
    same = np.r_[False, (dev[1:] == dev[:-1]) & (stream[1:] == stream[:-1])]
    i = np.flatnonzero(same)
    gap = ts[i] - end[i - 1]  # HTA: start − the previous op's end (by start order)
    launched, launch_ts = ops["launched"][order][i], ops["launch_ts"][order][i]
    host = launched & (launch_ts > end[i - 1])
    kernel = ~host & (gap < kernel_wait_us * 1e3)
    cat_id = np.where(host, 0, np.where(kernel, 1, 2))
    category = np.array(["host_wait", "kernel_wait", "other"], dtype=object)[cat_id]
    gid = int_groups(dev[i], stream[i], cat_id)
    n = int(gid.max()) + 1 if len(gid) else 0
    first = np.unique(gid, return_index=True)[1]
    idle = np.zeros(n, np.int64)
    np.add.at(idle, gid, gap)
    count = np.bincount(gid, minlength=n)
    sgid = int_groups(dev[i][first], stream[i][first])
    stream_total = np.bincount(sgid, idle.astype(np.float64))[sgid]
    out = {"rank": objects([g.rank] * n), "device": dev[i][first], "stream": stream[i][first],
           "category": category[first], "count": count, "idle": idle,
           "ratio": np.divide(idle, stream_total, out=np.zeros(n), where=stream_total != 0)}
    o = np.lexsort((out["category"].astype(str), out["stream"], out["device"]))
    return {k: v[o] for k, v in out.items()}
