"""Temporal breakdown per GPU step window, idle breakdown per stream (HTA's rules), comm / comp overlap.
Busy = union of GPU ops (not ``cuda_sync``) in the step's window (``gpu_steps``); idle = window − busy."""

from __future__ import annotations

import numpy as np

from .gpu_steps import GpuOps
from .intervals import combination_segments, covered_by_mask, covered_in, int_groups
from .sums import group_sums, total
from .tables import Columns, concat, objects

KERNEL_WAIT_US = 30  # HTA's consecutive_kernel_delay
TYPES = ("computation", "communication", "memory")
_SHORT = {"computation": "comp", "communication": "comm", "memory": "mem"}
# Exclusive combinations, in this order: comp_only, comm_only, mem_only, comp_comm, ...
COMBOS = [frozenset(c) for c in (("computation",), ("communication",), ("memory",),
                                 ("computation", "communication"), ("computation", "memory"),
                                 ("communication", "memory"), TYPES)]


def _combo_name(c: frozenset) -> str:
    return "_".join(_SHORT[t] for t in TYPES if t in c) + ("_only" if len(c) == 1 else "")


# temporal's columns (ns, percent): one row per step and one for all of them (step None: ``split``).
TEMPORAL_COLUMNS = ("rank", "step", "source", "window_start", "window", "cpu_step", "busy", "idle",
                    "idle_pct", *TYPES, *map(_combo_name, COMBOS), "comm_overlap_pct")


def window_rows(g: GpuOps, lo: np.ndarray, hi: np.ndarray) -> Columns:
    """Per window [lo, hi): window, busy, idle, idle_pct, each type's and ``COMBOS``' time, comm_overlap_pct
    (comm time overlapped by compute). Binary searches per window: clipping ops to each window is too slow."""
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    # ops are in start order: only those starting before the last window ends, after every op
    # ending by the first one's start (one step's window reads its own ops, not the trace's)
    a = int(np.searchsorted(g.reach, lo.min(), side="right")) if len(lo) else 0
    b = int(np.searchsorted(g.ops["ts"], hi.max(), side="left")) if len(lo) else 0
    ops = {k: g.ops[k][a:b] for k in ("ts", "end")}
    code = g.type_code(TYPES)[a:b]
    window = hi - lo
    busy = covered_in(ops["ts"], ops["end"], lo, hi)
    idle = window - busy
    out = {"window": window, "busy": busy, "idle": idle,
           "idle_pct": np.divide(100.0 * idle, window, out=np.zeros(len(lo)), where=window > 0)}
    spans = {t: (ops["ts"][code == i], ops["end"][code == i]) for i, t in enumerate(TYPES)}
    # the time of each set of types running, per window; a type's time is that of its sets
    by_set = covered_by_mask(*combination_segments(spans), lo, hi, 1 << len(TYPES))
    for i, t in enumerate(TYPES):
        out[t] = by_set[:, [m for m in range(1 << len(TYPES)) if m >> i & 1]].sum(axis=1)
    for c in COMBOS:
        out[_combo_name(c)] = by_set[:, sum(1 << i for i, t in enumerate(TYPES) if t in c)]
    both = out["comp_comm"] + out["comp_comm_mem"]
    comm = out["communication"]
    out["comm_overlap_pct"] = np.divide(100.0 * both, comm, out=np.zeros(len(lo)), where=comm != 0)
    return out


def temporal(g: GpuOps, step: int | None = None) -> Columns:
    """Per step (and, without ``step``, one row ``step`` = None over all of them: the first
    window's start to the last one's end) (``TEMPORAL_COLUMNS``)."""
    st = g.steps
    if step is not None:
        g.check(step)
        rows = np.flatnonzero(st["step"] == step)[:1]
    else:
        rows = np.arange(len(st["step"]))
    number = objects(st["step"][rows].tolist())
    lo, hi, source = st["ts"][rows], st["end"][rows], st["source"][rows].astype(object)
    cpu = st["cpu_end"][rows] - st["cpu_ts"][rows]
    if step is None:  # the row over every step
        a, b, src = g.window(None)
        number = objects([*number.tolist(), None])
        lo, hi, source = np.r_[lo, a], np.r_[hi, b], objects([*source.tolist(), src])
        cpu = np.r_[cpu, total(cpu, "CPU step times")]
    out = {"rank": objects([g.rank] * len(lo)), "step": number, "source": source,
           "window_start": lo.astype(np.int64), "cpu_step": cpu.astype(np.int64),
           **window_rows(g, lo, hi)}
    return {c: out[c] for c in TEMPORAL_COLUMNS}


def idle_by_stream(g: GpuOps, step: int | None = None, kernel_wait_us: float = KERNEL_WAIT_US) -> Columns:
    """HTA's idle breakdown per stream: a gap between consecutive ops on a (device, stream) is ``host_wait``
    if the next op's launch began after the previous op ended, else ``kernel_wait`` if < ``kernel_wait_us``,
    else ``other``. Columns ``device``, ``stream``, ``category``, ``count``, ``idle`` (ns), ``ratio``."""
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
    idle = group_sums(gid, gap, n, "idle gaps")
    count = np.bincount(gid, minlength=n)
    sgid = int_groups(dev[i][first], stream[i][first])
    stream_total = np.bincount(sgid, idle.astype(np.float64))[sgid]
    out = {"rank": objects([g.rank] * n), "device": dev[i][first], "stream": stream[i][first],
           "category": category[first], "count": count, "idle": idle,
           "ratio": np.divide(idle, stream_total, out=np.zeros(n), where=stream_total != 0)}
    o = np.lexsort((out["category"].astype(str), out["stream"], out["device"]))
    return {k: v[o] for k, v in out.items()}


def part(g: GpuOps, in_job: bool, step: int | None, kernel_wait_us: float) -> dict:
    """A rank's part of the ``breakdown`` command: its temporal and idle breakdowns."""
    return {"temporal": temporal(g, step), "idle": idle_by_stream(g, step, kernel_wait_us)}


PER_STEP = "temporal breakdown per step (GPU windows)"
ALL_STEPS = "temporal breakdown over all steps (a trace without steps: all of it)"


def split(table: Columns) -> tuple[Columns, Columns]:
    """``temporal``'s rows apart: those of one step (``step`` an integer), and those over all steps (``step``
    None; without the column), so no table mixes a step with the sum of them."""
    whole = np.array([s is None for s in table["step"].tolist()], bool)
    steps = {c: v[~whole] for c, v in table.items()}
    steps["step"] = steps["step"].astype(np.int64)
    return steps, {c: v[whole] for c, v in table.items() if c != "step"}


def combine(parts: list[dict]) -> list[tuple[str, Columns]]:
    """The ``breakdown`` command's sections from each rank's ``part``."""
    per_step, all_steps = split(concat([p["temporal"] for p in parts]))
    return [(PER_STEP, per_step), (ALL_STEPS, all_steps),
            ("idle breakdown per stream (HTA's rules)", concat([p["idle"] for p in parts]))]
