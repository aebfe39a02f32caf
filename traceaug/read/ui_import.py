"""How the Perfetto UI (v52) imports a Chrome JSON file as is, predicted from pass 1: fractional ts rounded
via a double (``ui_ns``), negative tids folded into tid = pid, partly overlapping ``X`` events dropped."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .lanes import assign_lanes
from .rebase import unsigned_tid


@dataclass
class Columns:
    """Every complete and flow event of a trace: raw (pid, tid) keys, int64 rows ``x`` (key, ts ns, dur ns,
    index) and ``flows`` (key, ts ns, index; index in the event array); ``first_index`` per chunk.
    ``normalize`` keeps the engine's events in one too (seqs for indexes, chunk results' engine keys)."""

    keys: dict[tuple, int] = field(default_factory=dict)
    x_parts: list[np.ndarray] = field(default_factory=list)
    flow_parts: list[np.ndarray] = field(default_factory=list)
    first_index: list[int] = field(default_factory=list)
    events: int = 0  # every event of the array

    def merge(self, keys: list, x: bytes, flows: bytes, parsed: int) -> None:
        """Add one chunk's rows (pass1.ChunkResult ``ui_*`` fields), in chunk order."""
        to_global = np.array([self.keys.setdefault(k, len(self.keys)) for k in keys] + [-1],
                             dtype=np.int64)
        for raw, width, out in ((x, 4, self.x_parts), (flows, 3, self.flow_parts)):
            if raw:
                rows = np.frombuffer(raw, dtype=np.int64).reshape(-1, width).copy()
                rows[:, 0] = to_global[rows[:, 0]]
                rows[:, -1] += self.events
                out.append(rows)
        self.first_index.append(self.events)
        self.events += parsed

    @property
    def x(self) -> np.ndarray:
        return np.concatenate(self.x_parts) if self.x_parts else np.empty((0, 4), dtype=np.int64)

    @property
    def flows(self) -> np.ndarray:
        return (np.concatenate(self.flow_parts) if self.flow_parts
                else np.empty((0, 3), dtype=np.int64))


def ui_ns(abs_ns: np.ndarray) -> np.ndarray:
    """The ns the UI gives timestamps of exact ns ``abs_ns`` (file time base): exact for whole µs; else the
    double nearest the µs text x 1000 rounded half away from zero (integer x 1000 if it has no fraction)."""
    out = abs_ns.copy()
    for i in np.flatnonzero(abs_ns % 1000 != 0).tolist():  # whole µs are exact
        q, r = divmod(int(abs_ns[i]), 1000)
        d = float(f"{q}.{r:03d}") if q >= 0 else float(int(abs_ns[i])) / 1000
        if d == math.floor(d):
            out[i] = int(d) * 1000
        else:
            v = d * 1000.0
            out[i] = math.floor(v + 0.5) if v >= 0 else -math.floor(-v + 0.5)
    return out


def _ui_rows(cols: Columns, base_ns: int, fold: bool) -> tuple[np.ndarray, np.ndarray, list]:
    """(complete rows, flow rows, key -> (pid, tid)) with the UI's ts relative to ``base_ns``; negative tids
    folded into the main thread (``fold``: the file as is) or made unsigned (a file traceaug fixed)."""
    mapped = [(pid, pid if tid.__class__ is int and tid < 0 else tid) if fold else
              (pid, unsigned_tid(tid) if tid.__class__ is int else tid) for pid, tid in cols.keys]
    names: dict[tuple, int] = {}
    remap = np.array([names.setdefault(m, len(names)) for m in mapped] + [-1], dtype=np.int64)
    x, flows = cols.x, cols.flows
    for rows in (x, flows):
        rows[:, 0] = remap[rows[:, 0]]
        rows[:, 1] = ui_ns(rows[:, 1] + base_ns) - base_ns
    return x, flows, list(names)


def _negative(cols: Columns) -> tuple[int, int]:
    """Complete events on negative tids and how many such threads."""
    neg = [k for (pid, tid), k in cols.keys.items() if tid.__class__ is int and tid < 0]
    return int(np.isin(cols.x[:, 0], neg).sum()), len(neg)


def as_is(cols: Columns, base_ns: int) -> dict:
    """What the UI loses opening the file as is: ``dropped`` (complete events, partial overlap) and events
    on negative tids folded into the main thread: ``negative_tid_slices`` on ``negative_tid_threads``."""
    x, _flows, _pairs = _ui_rows(cols, base_ns, fold=True)
    dropped = assign_lanes(x[:, 0], x[:, 1], x[:, 2], x[:, 3], rounds=1)
    slices, threads = _negative(cols)
    return {"dropped": len(dropped), "negative_tid_slices": slices,
            "negative_tid_threads": threads}


@dataclass
class Moves:
    """Events to put on overlap lanes so the UI drops nothing once negative tids are unsigned: event index ->
    (lane, tid after the unsigned fix, lane thread name); ``lane_threads``: (pid, tid, lane) -> name."""

    slices: dict[int, tuple[int, object, str]] = field(default_factory=dict)
    flows: dict[int, tuple[int, object, str]] = field(default_factory=dict)
    lane_threads: dict[tuple, str] = field(default_factory=dict)


def moves(cols: Columns, base_ns: int, thread_names: dict) -> Moves:
    """Lanes for the complete events the UI would drop once negative tids are unsigned, and for flow events
    bound to them (same thread and ts); ``thread_names`` (pid, tid) -> name names the lanes."""
    out = Moves()
    x, flows, pairs = _ui_rows(cols, base_ns, fold=False)
    lanes = assign_lanes(x[:, 0], x[:, 1], x[:, 2], x[:, 3])
    moved = x[np.isin(x[:, 3], np.fromiter(lanes, dtype=np.int64, count=len(lanes)))].tolist()
    where: dict[tuple, int] = {}
    for key, ts, _dur, index in moved:
        lane = lanes[index]
        pid, tid = pairs[key]
        base = thread_names.get((pid, tid)) or thread_names.get((pid, tid - 2**32) if (
            tid.__class__ is int and tid >= 2**31) else None) or f"{tid}"
        name = out.lane_threads.setdefault((pid, tid, lane), f"{base} [overlap lane {lane}]")
        out.slices[index] = (lane, tid, name)
        where.setdefault((key, ts), (lane, tid, name))
    near = flows[np.isin(flows[:, 1], np.array([ts for _k, ts in where], dtype=np.int64))]
    for key, ts, index in near.tolist():
        lane = where.get((key, ts))
        if lane is not None:
            out.flows[index] = lane
    return out
