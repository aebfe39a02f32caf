"""GPU ops that waited for an op of another stream where the trace records no wait (no ``cuda_sync`` event,
issue 27): without the edge the path never reaches the op waited for, and no what-if of it moves the step."""

from __future__ import annotations

import numpy as np

LATE_NS = 50_000  # several launch delays, far above the gap between back-to-back ops of a stream
NEAR_NS = 10_000  # a few times the latency of a stream-wait's release


def waits(start: np.ndarray, end: np.ndarray, prev_end: np.ndarray, launch_ts: np.ndarray,
          device: np.ndarray, stream: np.ndarray, recorded: np.ndarray, typical_ns: float
          ) -> tuple[np.ndarray, np.ndarray]:
    """(waited-on, waiting) ops: an op not ``recorded`` starting > LATE_NS past ``prev_end`` and ``launch_ts``
    + ``typical_ns`` (``dag.NEVER``: none) waited on its device's last other-stream op ending in NEAR_NS."""
    late = (start - prev_end > LATE_NS) & (start - launch_ts - typical_ns > LATE_NS) & ~recorded
    src, dst = [], []  # arrays of (waited-on, waiting) ops
    for dev in np.unique(device[late]).tolist():
        ops = np.flatnonzero(device == dev)
        ops = ops[np.argsort(end[ops], kind="stable")]
        ends = end[ops]
        for b in np.flatnonzero(late & (device == dev)).tolist():
            lo = np.searchsorted(ends, start[b] - NEAR_NS, "left")
            hi = np.searchsorted(ends, start[b], "right")
            near = ops[lo:hi]
            near = near[stream[near] != stream[b]]
            if len(near):
                a = near[end[near] == end[near].max()]
                src.append(a)
                dst.append(np.full(len(a), b, np.int64))
    if not src:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(src).astype(np.int64), np.concatenate(dst)
