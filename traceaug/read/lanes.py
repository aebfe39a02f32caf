"""Put complete events that partly overlap on one thread onto extra lanes.

Perfetto's JSON importer keeps a stack of open slices per thread and drops a
complete (``X``) event that starts inside the open slice but ends after it
(stat ``slice_drop_overlapping_complete_event``). We run the same check on
the event columns first; each event it would drop goes to lane 1 of its
thread, those that still clash there to lane 2, and so on.
"""

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
    # An event can be dropped only if it starts before an earlier one of its thread ends:
    # a running max of ends per thread (each thread's times shifted above the previous
    # thread's, so one accumulate serves all). Other threads need no stack walk.
    lo_ts = ts[bounds[:-1]]
    width = np.maximum.reduceat(end, bounds[:-1]) - lo_ts + 1
    shift = np.repeat(np.cumsum(width) - width - lo_ts, np.diff(bounds))
    clash = same & (ts[1:] + shift[1:] < np.maximum.accumulate(end + shift)[:-1])
    if not clash.any():
        return out
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if not clash[lo : hi - 1].any():
            continue
        stack: list[int] = []
        for i, (t, e) in enumerate(zip(ts[lo:hi].tolist(), end[lo:hi].tolist())):
            while stack and stack[-1] <= t:
                stack.pop()
            if stack and e > stack[-1]:
                out[lo + i] = True
            else:
                stack.append(e)
    return out


def assign_lanes(key: np.ndarray, ts: np.ndarray, dur: np.ndarray,
                 seq: np.ndarray) -> dict[int, int]:
    """Map event sequence number -> lane (1, 2, ...) for events Perfetto would drop."""
    lanes: dict[int, int] = {}
    idx = np.lexsort((seq, -dur, ts, key))
    lane = 1
    while len(idx):
        dropped = _drops(key[idx], ts[idx], ts[idx] + dur[idx])
        if not dropped.any():
            break
        idx = idx[dropped]
        lanes.update(dict.fromkeys(seq[idx].tolist(), lane))
        lane += 1
    return lanes
