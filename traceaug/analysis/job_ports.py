"""A rank's step replay model reduced to its collectives' kernels (its ports), in the rank's task: what a job
verdict's replay (``job_replay.replayed``) needs of it, a few numbers, so the main process never holds every
rank's graph. Replayed times are longest paths (max-plus): cut at the kernels' ends, every other node's time
is the rank's own, or a kernel end's plus the longest way from it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import dag, replay

NEVER = dag.NEVER
LOW = NEVER // 2  # below: no way there


@dataclass
class Ports:
    """One rank's step (rank clock, ns) as its collectives' kernels see it: ``ev`` their events (kernel e:
    nodes 2e, 2e+1); ``outs`` the nodes others read (kernel starts, sources of edges into kernel ends, last
    nodes) with ``out_ts``; ``root`` each out's replayed time from the rank alone (kernel ends unknown; last
    column: the latest node's), ``dist`` per kernel end the longest way from it to each; ``into_*`` each edge
    into a kernel end (its end, its source's out, delay, slack, whether it is the kernel's own time)."""

    n: int
    ev: np.ndarray
    start_out: np.ndarray
    end_ts: np.ndarray
    out_ts: np.ndarray
    root: np.ndarray
    dist: np.ndarray
    into_end: np.ndarray
    into_out: np.ndarray
    into_delay: np.ndarray
    into_slack: np.ndarray
    into_own: np.ndarray
    tail_out: np.ndarray
    after: np.ndarray
    start: int
    end: int


def ports(m: replay.Model, coll_event: np.ndarray) -> Ports:
    """A step's model ``m`` reduced to the ports of its collectives' kernels (``coll_event``, as
    ``job_path.RankGraph``'s): one schedule for the rank alone, one per kernel end for the ways from it."""
    n = len(m.node_ts)
    src, dst = m.src.astype(np.int64), m.dst.astype(np.int64)
    weight = m.delay.astype(np.int64) + m.slack
    ev = np.unique(coll_event[coll_event >= 0]).astype(np.int64)
    ends = 2 * ev + 1
    into = np.flatnonzero(np.isin(dst, ends))
    own = span_into_nodes(n, src, dst, m.event.astype(np.int64))[dst[into]] == into
    tails, after = m.tails() if n else (np.empty(0, np.int64), np.empty(0, np.int64))
    outs = np.unique(np.r_[2 * ev, src[into], tails]).astype(np.int64)
    cut = np.ones(len(src), bool)
    cut[into] = False  # (each kernel end's time comes from the job)
    order = m.node_order.astype(np.int64)
    lane = None if m.node_lane is None else m.node_lane.astype(np.int64)

    def longest(roots: np.ndarray) -> np.ndarray:
        t = replay.schedule(m.node_ts, order, src[cut], dst[cut], weight[cut], lane, roots)
        return np.r_[t[outs], t.max() if n else NEVER]

    alone = m.node_ts.astype(np.int64).copy()
    alone[ends] = NEVER
    dist = np.full((len(ends), len(outs) + 1), NEVER, np.int64)
    for j, e in enumerate(ends.tolist()):
        roots = np.full(n, NEVER, np.int64)
        roots[e] = 0
        dist[j] = longest(roots)
    dist[dist <= LOW] = NEVER
    at = np.searchsorted
    return Ports(n, ev, at(outs, 2 * ev), m.node_ts[ends].astype(np.int64),
                 m.node_ts[outs].astype(np.int64), longest(alone), dist, at(ends, dst[into]),
                 at(outs, src[into]), m.delay[into].astype(np.int64), m.slack[into].astype(np.int64), own,
                 at(outs, tails), np.asarray(after, np.int64), int(m.start), int(m.end))


def span_into_nodes(n: int, src: np.ndarray, dst: np.ndarray, event: np.ndarray) -> np.ndarray:
    """Per node (of ``n``): the edge of its event's own time into it (an event's start ->
    end edge, attributed to that event), else -1."""
    out = np.full(n, -1, np.int64)
    own = np.flatnonzero((src % 2 == 0) & (dst == src + 1) & (event == src // 2))
    out[dst[own]] = own
    return out
