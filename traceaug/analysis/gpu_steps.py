"""GPU ops with their launches and GPU step windows: what the kernel, gap, launch and
breakdown analyses share.

A step's GPU window is its GPU-side ``ProfilerStep#N`` annotation (``gpu_user_annotation``)
when the trace has one, as TraceLens uses; else from the first start to the last end of the
GPU ops launched inside the CPU step. A GPU op belongs to the step of the runtime call that
launched it (matched by correlation, as HTA assigns iterations); an op that no call in the
trace launched is placed by time, in the GPU window that holds its start, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..trace import Trace
from .steps import _STEP, category, check_step, steps
from .tables import Columns, codes, take

# The load kind these analyses need (GPU ops, their launches, ProfilerSteps of both sides),
# the other events cut unparsed (read/kinds.py).
LOAD = {"kind": "gpu_steps"}


@dataclass
class GpuOps:
    """One rank's GPU ops and step windows (engine ns)."""

    trace: Trace
    rank: int | None
    # ts, dur, end, name, name_id, kind, category, device, stream, correlation, launched, launch_ts,
    # launch_dur, launch_end, launch_name, step; sorted by (ts, end)
    ops: Columns
    # step, cpu_ts, cpu_end, ts, end (the GPU window), source ("gpu_annotation" / "launches")
    steps: Columns
    _reach: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _codes: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def reach(self) -> np.ndarray:
        """The latest end of the ops so far, in their (start) order: the ops that may reach
        past a time are those after ``searchsorted(reach, t, "right")``."""
        if self._reach is None:
            self._reach = np.maximum.accumulate(self.ops["end"]) if len(self.ops["end"]) else \
                self.ops["end"]
        return self._reach

    def type_code(self, types: tuple[str, ...]) -> np.ndarray:
        """Each op's index in ``types`` (its category's; -1 for none), made once: analyses of
        many windows compare small integers, not the category strings of every op each time."""
        if types not in self._codes:
            code = np.full(len(self.ops["category"]), -1, np.int8)
            for i, t in enumerate(types):
                code[self.ops["category"] == t] = i
            self._codes[types] = code
        return self._codes[types]

    def rows(self, step: int | None = None) -> np.ndarray:
        """Mask of the ops of ``step`` (every op when None)."""
        if step is None:
            return np.ones(len(self.ops["ts"]), bool)
        self.check(step)
        return self.ops["step"] == step

    def check(self, step: int) -> None:
        """Raise the user's error when the trace has no ProfilerStep ``step``."""
        check_step(self.trace.path, self.steps["step"], step)

    def window(self, step: int | None = None) -> tuple[int, int, str]:
        """The GPU window of ``step``; for None, from the first step's window start to the
        last one's end (the whole trace's GPU ops when it has no steps)."""
        st = self.steps
        if step is not None:
            self.check(step)
            i = int(np.flatnonzero(st["step"] == step)[0])
            return int(st["ts"][i]), int(st["end"][i]), str(st["source"][i])
        if len(st["step"]):
            return int(st["ts"].min()), int(st["end"].max()), "steps"
        if not len(self.ops["ts"]):
            return 0, 0, "trace"
        return int(self.ops["ts"].min()), int(self.ops["end"].max()), "trace"


def step_at(t: np.ndarray, start: np.ndarray, end: np.ndarray, number: np.ndarray) -> np.ndarray:
    """The number of the window [start, end) holding each time in ``t`` (of overlapping
    windows, the one starting last), else -1."""
    out = np.full(len(t), -1, np.int64)
    if not len(start):
        return out
    order = np.argsort(start, kind="stable")
    start, end, number = start[order], end[order], number[order]
    i = np.searchsorted(start, t, side="right") - 1
    j = np.maximum(i, 0)
    hit = (i >= 0) & (t < end[j])  # in the last window starting at or before it
    out[hit] = number[j[hit]]
    # else an earlier, longer window may still hold it: only those times, by binary descent
    maybe = np.flatnonzero((i >= 0) & ~hit & (t < np.maximum.accumulate(end)[j]))
    k = last_reaching(end, i[maybe], t[maybe])
    out[maybe[k >= 0]] = number[k[k >= 0]]
    return out


def last_reaching(end: np.ndarray, i: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each query, the largest k <= i with end[k] > t, else -1: a binary descent over
    block maxima of ``end`` (a sparse table), O((n + queries) log n), where a scan of the
    windows per query made many steps quadratic."""
    levels = [np.asarray(end)]  # levels[j][k] = max(end[k - 2^j + 1 .. k]) (from 0 if shorter)
    while (1 << len(levels)) <= len(end):
        prev, h = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.r_[prev[:h], np.maximum(prev[h:], prev[:-h])])
    p = np.asarray(i, np.int64).copy()
    for j in range(len(levels) - 1, -1, -1):  # skip each whole block that ends by t
        w = 1 << j
        skip = (p >= w - 1) & (levels[j][np.maximum(p, 0)] <= t)
        p[skip] -= w
    return p


def _gpu_annotations(trace: Trace) -> dict[int, tuple[int, int]]:
    """Step number -> (first start, last end) of its GPU-side ProfilerStep annotations."""
    c = trace.columns("SELECT ts, dur, name FROM slice "
                      "WHERE category = 'gpu_user_annotation' AND name GLOB 'ProfilerStep#*'")
    out: dict[int, tuple[int, int]] = {}
    for ts, dur, name in zip(c["ts"].tolist(), c["dur"].tolist(), c["name"].tolist()):
        m = _STEP.search(name) if isinstance(name, str) else None
        if m is not None and dur is not None and dur == dur:
            n = int(m.group(1))
            lo, hi = out.get(n, (ts, ts + dur))
            out[n] = (min(lo, ts), max(hi, ts + dur))
    return out


def _ops(trace: Trace) -> Columns:
    c = trace.columns("SELECT ts, dur, name, kind, device, stream, correlation, launch_ts, "
                      "launch_dur, launch_name FROM traceaug_gpu_op_launch")
    ops: Columns = {"ts": c["ts"].astype(np.int64), "dur": c["dur"].astype(np.int64)}
    ops["end"] = ops["ts"] + np.maximum(ops["dur"], 0)
    ops["name"] = c["name"].astype(object)
    ops["kind"] = c["kind"].astype(object)
    code, names = codes(ops["name"])
    ops["name_id"] = code  # numbers the distinct names (grouping by it skips hashing strings)
    # copies and DMA that run as kernels (MTIA's CCP events) are copies by name (base.sql)
    ops["category"] = category(ops["kind"], code, names)
    for k in ("device", "stream"):
        ops[k] = np.nan_to_num(c[k].astype(np.float64), nan=-1).astype(np.int64)
    ops["correlation"] = c["correlation"]
    launch_ts = c["launch_ts"].astype(np.float64)  # NaN: no launch
    ops["launched"] = ~np.isnan(launch_ts)
    ops["launch_ts"] = np.nan_to_num(launch_ts, nan=0).astype(np.int64)
    ops["launch_dur"] = np.nan_to_num(c["launch_dur"].astype(np.float64), nan=0).astype(np.int64)
    ops["launch_end"] = ops["launch_ts"] + ops["launch_dur"]
    ops["launch_name"] = c["launch_name"].astype(object)
    return take(ops, np.lexsort((ops["end"], ops["ts"])))


def gpu_windows(trace: Trace, cpu: Columns, ts: np.ndarray, end: np.ndarray,
                launch_step: np.ndarray) -> Columns:
    """Each CPU step (``steps.steps``) with its GPU window: ``step``, ``cpu_ts``, ``cpu_end``,
    ``ts``, ``end``, ``source``; from the GPU ops' ``ts`` / ``end`` and the step of the call
    that launched each (-1: none)."""
    notes = _gpu_annotations(trace)
    number = cpu["step"]
    n = len(number)
    # first start / last end of the ops each step launched (one pass over the ops)
    order = np.argsort(number, kind="stable")
    found = np.searchsorted(number[order], launch_step)
    pos = order[np.minimum(found, max(n - 1, 0))] if n else found
    mine = (launch_step >= 0) & (found < n)
    if n:
        mine &= number[pos] == launch_step
    lo = np.full(n, np.iinfo(np.int64).max)
    hi = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(lo, pos[mine], ts[mine])
    np.maximum.at(hi, pos[mine], end[mine])
    empty = hi == np.iinfo(np.int64).min  # a step that launched nothing: empty, at its start
    lo[empty] = cpu["ts"][empty]
    hi[empty] = cpu["ts"][empty]
    source = np.full(n, "launches", dtype=object)
    if notes:  # the GPU-side annotations win
        have = np.fromiter(notes, np.int64, len(notes))
        span = np.array(list(notes.values()), np.int64).reshape(-1, 2)
        order = np.argsort(have)
        at = order[np.minimum(np.searchsorted(have[order], number), len(have) - 1)]
        noted = have[at] == number
        lo[noted], hi[noted] = span[at[noted], 0], span[at[noted], 1]
        source[noted] = "gpu_annotation"
    return {"step": cpu["step"], "cpu_ts": cpu["ts"], "cpu_end": cpu["ts"] + cpu["dur"],
            "ts": lo, "end": hi, "source": source}


def rank_ops(rank: int | None, trace: Trace) -> GpuOps:
    """``gpu_ops`` of one rank of a directory (``load_ranks(then=...)``): the rank the trace
    records, else the one its file name gave."""
    return gpu_ops(trace, rank if trace.rank is None else trace.rank)


def gpu_ops(trace: Trace, rank: int | None = None) -> GpuOps:
    """Load a trace's GPU ops, their launches and steps, and the steps' GPU windows."""
    trace.include("traceaug.gpu")
    ops = _ops(trace)
    cpu = steps(trace)
    launched = ops["launched"]
    step = np.where(launched, step_at(ops["launch_ts"], cpu["ts"], cpu["ts"] + cpu["dur"],
                                      cpu["step"]), -1)
    st = gpu_windows(trace, cpu, ops["ts"], ops["end"], step)
    ops["step"] = np.where(launched, step, step_at(ops["ts"], st["ts"], st["end"], st["step"]))
    return GpuOps(trace, rank if rank is not None else trace.rank, ops, st)
