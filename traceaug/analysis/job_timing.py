"""The timing path of a job step, and each step's path of a job (``paths``): from its end back along the
joined replay's binding edges (what released each node last); the pieces sum to the step, and at a collective
the path goes on from the last arrival."""

from __future__ import annotations

import numpy as np

from . import collectives as co
from . import critical_path as cp
from . import job_path as jp
from . import job_replay

LATE_START = "late_start"


def paths(parts: dict[int, jp.RankPart], step: int | None = None, hta_weights: bool = False
          ) -> tuple[co.Matched, list[jp.JobPath]]:
    """The matched job and each step's (or ``step``'s) path: the timing path (``parts`` read with models),
    or with ``hta_weights`` the longest path by weight (``job_path.join``)."""
    job = jp.match_parts(parts)
    find = jp.join if hta_weights else timing_path
    out = [find(parts, job, k) for k in jp.step_keys(parts, step)]
    return job, [p for p in out if p is not None]


def timing_path(parts: dict[int, jp.RankPart], matched: co.Matched, step: int) -> jp.JobPath | None:
    """The timing path of ``step`` over every rank that has it (None: no rank has it)."""
    ranks, _, _ = jp.step_graphs(parts, matched, step)
    if not ranks:
        return None
    j = job_replay.joined_model(parts, matched, step)
    m, gs = j.joined, j.graphs
    ts = m.node_ts
    if not len(ts):  # no rank has an event in the step: all of it idle
        return _path(parts, j, step, [])
    kind, event = _kinds(j)
    start = jp.step_window(gs, j.shift, step).start
    nodes, after = m.tails()
    v = int(nodes[int(np.argmax(ts[nodes] + after))])
    rank_of_node = np.repeat(np.arange(len(gs)), [len(g.node_ts) for g in gs])
    recs: list[tuple] = [(v, v, int(ts[v]), m.end, 0, -1, -1, None)]  # the tail after v
    bind, src, delay = m.bind, m.src, m.delay
    while bind[v] >= 0:
        e = int(bind[v])
        u = int(src[e])
        work = 0 if kind[e] == cp.DEPENDENCY else int(delay[e])
        mid = int(ts[u]) + work
        recs.append((u, v, mid, int(ts[v]), 0, -1, -1, None))  # started later than allowed
        recs.append((u, v, int(ts[u]), mid, work, int(kind[e]), int(event[e]), None))
        v = u
    r = int(rank_of_node[v])
    rank_start = j.graphs[r].start - j.shift[r]
    recs.append((v, v, rank_start, int(ts[v]), 0, -1, -1, None))
    recs.append((v, v, start, rank_start, 0, -1, -1, LATE_START))
    recs.reverse()
    return _path(parts, j, step, recs)


def _kinds(j: job_replay.Joined) -> tuple[np.ndarray, np.ndarray]:
    """Each joined-model edge's kind (``job_path.EDGE_KINDS``: order edges as launch delay / kernel gap, joins
    ``JOIN``) and event (-1: its destination's), by ``replay.model``'s and ``replay.join``'s edge order."""
    m = j.joined
    kinds, events, ev_at = [], [], 0
    for g, lo, hi in zip(j.graphs, j.edge_at[:-1].tolist(), j.edge_at[1:].tolist()):
        extra = hi - lo - len(g.src)
        kinds += [g.kind, np.where(m.launch[lo + len(g.src):hi], cp.LAUNCH, cp.KERNEL_GAP)]
        events += [np.where(g.event >= 0, g.event + ev_at, -1), np.full(extra, -1, np.int64)]
        ev_at += len(g.node_ts) // 2
    joins = len(m.src) - int(j.edge_at[-1])
    kinds.append(np.full(joins, jp.JOIN, np.int64))
    events.append(m.dst[int(j.edge_at[-1]):] // 2)
    return np.concatenate(kinds).astype(np.int64), np.concatenate(events).astype(np.int64)


def _path(parts, j: job_replay.Joined, step: int, recs: list[tuple]) -> jp.JobPath:
    """The records ``(src node, dst node, ts, end, weight, kind, event, idle kind)`` as a
    ``JobPath`` (``job_path.path_edges``; with each idle piece's named cause)."""
    col = list(zip(*recs)) or [()] * 8
    src, dst, ts, end, weight, kind, event = (np.array(c, np.int64) for c in col[:7])
    edges = jp.path_edges(parts, j.ranks, j.graphs, j.shift, src, dst, ts, end, weight, kind, event)
    win = jp.step_window(j.graphs, j.shift, step)
    edges["idle_kind"] = np.array(col[7], object)
    edges["idle_event"] = np.where(edges["idle_kind"] == None, None,  # noqa: E711
                                   win.label).astype(object)
    return jp.JobPath(None if step == jp.WHOLE else step, win, edges, int(weight.sum()),
                      jp.step_inferred(j.graphs))
