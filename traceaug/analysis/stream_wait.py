"""GPU ops that waited for an op of another stream where the trace records no such wait: the
critical path's cross-stream edges beyond the ``cuda_sync`` events (issue 27).

Why: ``cudaStreamWaitEvent`` holds a stream until an op of another stream ends; Kineto
records that only as a ``cuda_sync`` event with its ``cudaEventRecord``, which most traces
lack (each DLRM rank has 44 such calls, no record, no ``cuda_sync``). Without the edge, the
wait reads as a launch delay of the waiting op (or as nothing), the path never reaches the
op waited for (a collective, on the DLRM ranks), and no what-if of that op moves the step.
Inferred as the blocking calls' waits are: an op that starts
more than ``LATE_NS`` after both its stream's previous op ended and its launch call began plus
the typical launch delay was held by something else than its stream or its launch; if an op
of another stream of its device ended at most ``NEAR_NS`` before it started, it waited for
that op (the latest-ending one; all of them on a tie). ``LATE_NS`` (50 us) is several launch
delays (5-25 us typical on V100 / A100) and far above the gap between back-to-back ops of
one stream (a few us), so a stream merely slow to start is not taken for a wait; ``NEAR_NS``
(10 us) is a few times the latency of a stream-wait's release (2-8 us measured on the DLRM
job, 0-9 us on the A100 ones).
"""

from __future__ import annotations

import numpy as np

LATE_NS = 50_000
NEAR_NS = 10_000


def waits(start: np.ndarray, end: np.ndarray, prev_end: np.ndarray, launch_ts: np.ndarray,
          device: np.ndarray, stream: np.ndarray, recorded: np.ndarray, typical_ns: float
          ) -> tuple[np.ndarray, np.ndarray]:
    """(waited-on op, waiting op) index pairs over GPU ops given by arrays of one length:
    ``start, end`` (ns), ``prev_end`` (the end of the op before on its stream, a very
    negative number: none), ``launch_ts`` (its launch call's start, very negative: none),
    ``device, stream`` (codes), ``recorded`` (a recorded wait already explains its start);
    ``typical_ns``: the typical launch delay."""
    late = (start - prev_end > LATE_NS) & (start - launch_ts - typical_ns > LATE_NS) & ~recorded
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
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
