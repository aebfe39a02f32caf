"""GPU ops with their launches and the steps' GPU windows, shared by the kernel, gap, launch and breakdown
analyses. The windows tile the GPU timeline, so per-step times sum to the all-steps row."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import graph_replay, serving
from .steps import category, check_step, step_number, steps
from .tables import Columns, codes, ints, position_in, take

if TYPE_CHECKING:
    from ..trace import Trace

# The load kind these analyses need (GPU ops, their launches, ProfilerSteps of both sides),
# the other events cut unparsed (read/kinds.py).
LOAD = {"kind": "gpu_steps"}


@dataclass
class GpuOps:
    """One rank's GPU ops and step windows (engine ns)."""

    trace: Trace
    rank: int | None
    # ts, dur, end, name, name_id, kind, category, device, stream, correlation, launched, launch_ts,
    # launch_dur, launch_end, launch_name, step, id (the engine's), op (a graph-replayed kernel's
    # attributed op, else None); sorted by (ts, end)
    ops: Columns
    # step, cpu_ts, cpu_end, ts, end (the GPU window; the windows tile the steps' GPU time),
    # source ("gpu_annotation" / "launches"), implausible (a GPU-side annotation set aside)
    steps: Columns
    serving: Columns = field(default_factory=dict)  # a serving trace's steps (``analysis.serving``)
    replays: Any = None  # the graph-replayed ops attributed (``analysis.graph_replay.Replays``)
    _reach: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _codes: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def reach(self) -> np.ndarray:
        """The latest end of the ops so far, in their (start) order: the ops that may reach
        past a time are those after ``searchsorted(reach, t, "right")``."""
        if self._reach is None:
            self._reach = np.maximum.accumulate(self.ops["end"])
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

    @property
    def notes(self) -> list[str]:
        """What the figures cannot tell: graph-replayed kernels no capture attributed to their ops."""
        r = self.replays
        return [r.line()] if r is not None and r.attributed < r.replayed else []

    def op_times(self, step: int | None = None) -> Columns:
        """GPU time per op of the graph-replayed kernels a capture attributed (``graph_replay.times``; {}:
        none was)."""
        if self.replays is None or not self.replays.attributed:
            return {}
        rows = self.rows(step) & (self.ops["op"] != None)  # noqa: E711  (an object column)
        t = graph_replay.times(self.ops["op"][rows], self.ops["dur"][rows])
        return {"rank": np.full(len(t["op"]), self.rank, object), "op": t["op"], "count": t["count"],
                "total": t["total"]}

    @property
    def warnings(self) -> list[str]:
        """What a user must know of the windows (``window_warnings``)."""
        return window_warnings(self.steps)

    def check(self, step: int) -> None:
        """Raise the user's error when the trace has no ProfilerStep ``step``."""
        check_step(self.trace.path, self.steps["step"], step, len(self.serving.get("step", ())) > 0)

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


def window_warnings(steps: Columns) -> list[str]:
    """A line for the GPU-side ProfilerStep annotations set aside (``gpu_windows``), if any."""
    bad = steps["step"][steps["implausible"]].tolist() if len(steps["step"]) else []
    if not bad:
        return []
    names = ", ".join(f"#{n}" for n in bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
    return [f"GPU-side ProfilerStep annotations {names} hold less than half of their step's GPU "
            "ops: those steps' GPU windows come from the ops they launched"]


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
    """For each query, the largest k <= i with end[k] > t, else -1: a binary descent over block maxima of
    ``end`` (a sparse table), O((n + queries) log n), not a scan per query (quadratic in the steps)."""
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


def _ops(trace: Trace) -> Columns:
    c = trace.columns("SELECT id, ts, dur, name, kind, device, stream, correlation, launch_ts, "
                      "launch_dur, launch_name FROM traceaug_gpu_op_launch")
    ops: Columns = {"ts": c["ts"].astype(np.int64), "dur": c["dur"].astype(np.int64),
                    "id": c["id"].astype(np.int64)}
    ops["end"] = ops["ts"] + np.maximum(ops["dur"], 0)
    ops["name"] = c["name"].astype(object)
    ops["kind"] = c["kind"].astype(object)
    code, names = codes(ops["name"])
    ops["name_id"] = code  # numbers the distinct names (grouping by it skips hashing strings)
    # copies and DMA that run as kernels (MTIA's CCP events) are copies by name (base.sql)
    ops["category"] = category(ops["kind"], code, names)
    for k in ("device", "stream"):  # the engine's ids as they are (1e308 is int64's max)
        ops[k] = ints(c[k])
    ops["correlation"] = c["correlation"]
    launch_ts = c["launch_ts"].astype(np.float64)  # NaN: no launch
    ops["launched"] = ~np.isnan(launch_ts)
    ops["launch_ts"] = np.nan_to_num(launch_ts, nan=0).astype(np.int64)
    ops["launch_dur"] = np.nan_to_num(c["launch_dur"].astype(np.float64), nan=0).astype(np.int64)
    ops["launch_end"] = ops["launch_ts"] + ops["launch_dur"]
    ops["launch_name"] = c["launch_name"].astype(object)
    return take(ops, np.lexsort((ops["end"], ops["ts"])))


def _launched_spans(number: np.ndarray, ts: np.ndarray, end: np.ndarray,
                    launch_step: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step (``number``): the first start and last end of the GPU ops it launched (int64
    max / min when none), and each op's position in ``number`` (-1: no step's)."""
    n = len(number)
    order = np.argsort(number, kind="stable")
    at = position_in(number[order], launch_step)  # (step numbers are >= 0: -1, none, is never found)
    pos = np.where(at >= 0, order[at], -1) if n else at
    mine = pos >= 0
    lo = np.full(n, np.iinfo(np.int64).max)
    hi = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(lo, pos[mine], ts[mine])
    np.maximum.at(hi, pos[mine], end[mine])
    return lo, hi, pos


def gpu_windows(trace: Trace, cpu: Columns, ts: np.ndarray, end: np.ndarray,
                launch_step: np.ndarray) -> Columns:
    """Each CPU step (``steps.steps``) with its GPU window: ``step, cpu_ts, cpu_end, ts, end``, ``source``
    (``gpu_annotation`` if its GPU-side annotation holds most of its ops, else ``launches``: their span) and
    ``implausible`` (an annotation set aside); ``launch_step``: each op's launching call's step (-1: none)."""
    number = cpu["step"]
    lo, hi, pos = _launched_spans(number, ts, end, launch_step)
    a, b = _annotation_spans(trace, number)
    noted = a != np.iinfo(np.int64).max
    # the ops each step launched, and of those the ones its annotation holds
    own = pos >= 0
    held = own.copy()
    if len(number):
        at = np.maximum(pos, 0)
        held &= noted[at] & (ts >= a[at]) & (end <= b[at])
    count = np.bincount(pos[own], minlength=len(number))
    inside = np.bincount(pos[held], minlength=len(number))
    use = noted & ((count == 0) | (2 * inside > count))  # most of its ops, or none to judge by
    lo, hi = np.where(use, a, lo), np.where(use, b, hi)
    start, stop = partition(lo, hi, cpu["ts"])
    return {"step": number, "cpu_ts": cpu["ts"], "cpu_end": cpu["ts"] + cpu["dur"],
            "ts": start, "end": stop,
            "source": np.where(use, "gpu_annotation", "launches").astype(object),
            "implausible": noted & ~use}


def _annotation_spans(trace: Trace, number: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per step (``number``): the first start and last end of its GPU-side ProfilerStep annotations (int64
    max / min: none)."""
    c = trace.columns("SELECT ts, dur, name FROM slice "
                      "WHERE category = 'gpu_user_annotation' AND name GLOB 'ProfilerStep#*'")
    a = np.full(len(number), np.iinfo(np.int64).max)
    b = np.full(len(number), np.iinfo(np.int64).min)
    where = {k: i for i, k in enumerate(number.tolist())}
    for ts, dur, name in zip(c["ts"].tolist(), c["dur"].tolist(), c["name"].tolist()):
        i = where.get(step_number(trace.path, name))
        if i is not None and dur is not None and dur == dur:
            a[i], b[i] = min(a[i], ts), max(b[i], ts + dur)
    return a, b


def partition(lo: np.ndarray, hi: np.ndarray, cpu_ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Windows [start, stop) tiling the steps' GPU time from their GPU spans [lo, hi) (lo = int64 max: none):
    each from its lo (never going back; none: the next one's) to the next start; the last to the latest hi."""
    n = len(lo)
    none = lo == np.iinfo(np.int64).max
    if n == 0 or none.all():
        return cpu_ts.astype(np.int64).copy(), cpu_ts.astype(np.int64).copy()
    last = int(hi[~none].max())
    # a step with no span takes the start of the next one that has one (a backward fill)
    nxt = np.minimum.accumulate(np.where(none, n, np.arange(n))[::-1])[::-1]
    start = np.maximum.accumulate(np.r_[lo, last].astype(np.int64)[nxt])
    stop = np.r_[start[1:], max(last, int(start[-1]))]
    return start, stop.astype(np.int64)


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
    served = serving.steps(trace)
    replays = graph_replay.attribute(trace, serving.batch_at(served), ops["launch_name"])
    ops["op"] = graph_replay.op_of(replays, ops["id"])  # a replayed kernel's op, as if it launched it
    return GpuOps(trace, rank if rank is not None else trace.rank, ops, st, served, replays)
