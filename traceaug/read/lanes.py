"""Move complete events Perfetto would drop (an ``X`` event starting inside the open slice of its thread but
ending after it: ``slice_drop_overlapping_complete_event``) onto extra lanes 1, 2, ... of their thread."""

from __future__ import annotations

import numpy as np


def _drops(key: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Mask of events (already sorted by key, ts, -dur) that would not nest."""
    n = len(ts)
    out = np.zeros(n, dtype=bool)
    if n < 2:
        return out
    same = key[1:] == key[:-1]
    bounds = np.flatnonzero(np.r_[True, ~same, True])
    # The stack is empty (no drop) where an event starts after every earlier one of its thread ended: a
    # running max of ends, each thread's times shifted above the previous so one accumulate serves all.
    lo_ts = ts[bounds[:-1]]
    width = np.maximum.reduceat(end, bounds[:-1]) - lo_ts + 1
    shift = np.repeat(np.cumsum(width) - width - lo_ts, np.diff(bounds))
    open_below = np.r_[False, same & (ts[1:] + shift[1:] < np.maximum.accumulate(end + shift)[:-1])]
    if not open_below.any():
        return out
    # Were nothing dropped, the first event dropped in a run between empty stacks would be
    # dropped all the same: only runs holding such a candidate need the exact stack walk.
    top = _tops(ts, end, open_below)
    has_top = top >= 0
    candidate = np.zeros(n, dtype=bool)
    candidate[has_top] = end[has_top] > end[top[has_top]]
    if not candidate.any():
        return out
    starts = np.flatnonzero(~open_below)  # each run begins with an empty stack
    run_ends = np.r_[starts[1:], n]
    held = starts[np.searchsorted(starts, np.flatnonzero(candidate), "right") - 1]  # sorted
    # distinct by hand: np.unique would import numpy.ma, slowing the pass-1 child's start
    for lo in held[np.r_[True, held[1:] != held[:-1]]].tolist():
        hi = run_ends[np.searchsorted(starts, lo)]
        stack: list[int] = []
        for i, (t, e) in enumerate(zip(ts[lo:hi].tolist(), end[lo:hi].tolist())):
            while stack and stack[-1] <= t:
                stack.pop()
            if stack and e > stack[-1]:
                out[lo + i] = True
            else:
                stack.append(e)
    return out


def _tops(ts: np.ndarray, end: np.ndarray, open_below: np.ndarray) -> np.ndarray:
    """Per event, the innermost earlier event still open at its start (-1: none), were no event dropped;
    pointer jumping down the stack, so a few numpy passes instead of a walk per event."""
    top = np.where(open_below, np.arange(len(ts)) - 1, -1)
    idx = np.flatnonzero(open_below)
    while len(idx):
        cand = top[idx]
        closed = end[cand] <= ts[idx]
        idx, cand = idx[closed], cand[closed]
        top[idx] = top[cand]
        idx = idx[top[idx] >= 0]
    return top


def assign_lanes(key: np.ndarray, ts: np.ndarray, dur: np.ndarray,
                 seq: np.ndarray, rounds: int | None = None) -> dict[int, int]:
    """Map event sequence number -> lane (1, 2, ...) for events Perfetto would drop
    (``rounds=1``: only the events it drops from their own thread, all on lane 1)."""
    lanes: dict[int, int] = {}
    idx = np.lexsort((seq, -dur, ts, key))
    lane = 1
    while len(idx) and (rounds is None or lane <= rounds):
        dropped = _drops(key[idx], ts[idx], ts[idx] + dur[idx])
        if not dropped.any():
            break
        idx = idx[dropped]
        lanes.update(dict.fromkeys(seq[idx].tolist(), lane))
        lane += 1
    return lanes
