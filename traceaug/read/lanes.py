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
    clash = same & (ts[1:] < np.maximum.accumulate(np.where(same, end[:-1], 0)))
    if not clash.any():
        return out
    # Only threads with an overlap need the stack walk.
    bounds = np.flatnonzero(np.r_[True, ~same, True])
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
