"""A job verdict's replay of a step from each rank's model reduced to its collectives' kernels (its ports):
per rank a few numbers, never every rank's graph at once, so a job's memory does not grow with its graphs.
The replay is the longest path (max-plus) of ``job_replay.without_stragglers``'s joined models, cut at the
kernels' ends: every other node's time is the rank's own, or a kernel end's plus the longest way from it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from . import collectives as co
from . import dag, replay
from . import job_path as jp

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


def ports(g: jp.RankGraph) -> Ports:
    """``g``'s model (``job_path.replay_part``'s) reduced to its ports: one schedule for the rank alone, one
    per collective kernel's end for the longest ways from it."""
    m = g.model
    n = len(m.node_ts)
    src, dst = m.src.astype(np.int64), m.dst.astype(np.int64)
    weight = m.delay.astype(np.int64) + m.slack
    ev = np.unique(g.coll_event[g.coll_event >= 0]).astype(np.int64)
    ends = 2 * ev + 1
    into = np.flatnonzero(np.isin(dst, ends))
    own = jp.span_into_nodes(n, src, dst, m.event.astype(np.int64))[dst[into]] == into
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


def replayed(parts: dict[int, jp.RankPart], matched: co.Matched, step: int) -> tuple[int, int] | None:
    """``job_replay.without_stragglers`` from the ranks' ports (None: a rank without them, or an edge of the
    replay running back in time, whose schedule only the joined graph gives)."""
    ranks = [r for r in sorted(parts) if step in parts[r].graphs]
    gs = [dataclasses.replace(parts[r].graphs[step], model=None) for r in ranks]  # (one model at a time)
    if any(g.ports is None for g in gs):
        return None
    off = matched.offsets()
    shift = [int(off.get(r, 0)) for r in ranks]
    ps = [g.ports for g in gs]
    node_at, out_at, end_at = (np.cumsum([0] + [n(p) for p in ps]) for n in (
        lambda p: p.n, lambda p: len(p.out_ts), lambda p: len(p.ev)))

    def cat(field: str, at: np.ndarray | None = None, clock: bool = False) -> np.ndarray:
        """A field of every rank's ports in one array: numbered as one (``at``), in the job clock."""
        if not ps:
            return np.empty(0, np.int64)
        return np.concatenate([getattr(p, field) + (0 if at is None else at[i]) - (shift[i] if clock else 0)
                               if at is not None or clock else getattr(p, field) for i, p in enumerate(ps)])

    out_ts, end_ts = cat("out_ts", clock=True), cat("end_ts", clock=True)
    groups = []  # per matched instance (``job_path.members``): its members' kernel ends, their starts' outs
    for mem in jp.members(matched, ranks, gs, node_at):
        i = (np.searchsorted(node_at, mem, "right") - 1).tolist()
        p = [int(np.searchsorted(ps[a].ev, (x - node_at[a]) // 2)) for a, x in zip(i, mem.tolist())]
        groups.append((end_at[i] + p, out_at[i] + [ps[a].start_out[b] for a, b in zip(i, p)]))
    into = (cat("into_end", end_at), cat("into_out", out_at), cat("into_delay"), cat("into_slack"),
            cat("into_own"))
    both = _edges(groups, into, out_ts, end_ts)
    if both is None:
        return None
    start = min(p.start - s for p, s in zip(ps, shift))
    found = []
    for edges, every_node in zip(both, (True, False)):
        times = _times(ps, shift, end_at, end_ts, edges)
        if times is None:
            return None
        tails = [int((times[i][p.tail_out] + p.after).max()) for i, p in enumerate(ps) if p.n]
        if not tails:  # (no node: the window's end, as ``replay.Model.finish``)
            found.append(max(p.end - s for p, s in zip(ps, shift)) - start)
            continue
        last = max(int(times[i][-1]) for i, p in enumerate(ps) if p.n) if every_node else 0
        found.append(max(max(tails), last) - start)
    return found[0], found[1]


def _edges(groups: list, into: tuple, out_ts: np.ndarray, end_ts: np.ndarray) -> tuple | None:
    """The ways into the kernel ends of the joined model (``job_replay.joined_model``) and of its median one
    (``job_replay._at_the_median``): each as (edges: end, source out, delay plus slack; per instance its
    ends, their starts' outs and the join from each start to each end, ``NEVER``: none). None: a kernel in
    two instances, or an edge of the median model running back in time."""
    into_end, into_out, delay, slack, own = into
    ends = np.concatenate([np.empty(0, np.int64)] + [e for e, _ in groups])
    if len(np.unique(ends)) < len(ends):
        return None
    by_end: dict = {}
    for x, e in enumerate(into_end.tolist()):
        by_end.setdefault(e, []).append(x)
    member = np.isin(into_end, ends)
    d, s = delay.copy(), slack.copy()
    pairs, medians = [], []
    for ends, outs in groups:
        ts, te = out_ts[outs], end_ts[ends]
        transfer = np.maximum(te - ts.max(), 0)
        mid = int(np.argsort(ts, kind="stable")[(len(ts) - 1) // 2])
        if (te < ts[mid]).any():
            return None
        medians.append((ends, np.full(len(ends), outs[mid]), np.minimum(transfer, te - ts[mid])))
        ok = (te[:, None] >= ts) & ~np.eye(len(ts), dtype=bool)  # [end, start]: forward, not its own
        w = np.where(ok, np.minimum(transfer[:, None], te[:, None] - ts), NEVER)
        for q, e in enumerate(ends.tolist()):  # its own time capped, its slack found anew (``rebound``)
            mine = by_end.get(e, [])
            for x in mine:
                if own[x]:
                    d[x] = min(int(d[x]), int(transfer[q]))
            at = [int(out_ts[into_out[x]] + d[x]) for x in mine]
            m = int(np.argmax(np.where(ok[q], ts + w[q], NEVER)))
            s[mine] = 0
            if at and (not ok[q, m] or max(at) >= ts[m] + w[q, m]):  # (ties: the rank's own edge, first)
                x = mine[int(np.argmax(at))]
                s[x] = int(te[q]) - max(at)
            elif ok[q, m]:
                w[q, m] = te[q] - ts[m]
        pairs.append((ends, outs, w))
    keep = ~(member & own)  # (the median model: each member's own time is the median's edge)
    median = [np.concatenate([c[keep], *(x[i] for x in medians)]) for i, c in enumerate((into_end, into_out,
                                                                                         d + s))]
    return ((into_end, into_out, d + s), pairs), (tuple(median), [])


def _times(ps: list[Ports], shift: list[int], end_at: np.ndarray, end_ts: np.ndarray, ways: tuple
           ) -> list | None:
    """Each rank's outs' replayed times (job clock; last: its latest node's) with the kernel ends joined by
    ``ways`` (``_edges``); a kernel end with no way in keeps its measured time. Relaxed until nothing
    moves: a DAG settles within its ends' count (None: it did not)."""
    (to, frm, w), pairs = ways
    has = np.zeros(len(end_ts), bool)
    has[to] = True
    for ends, _, pw in pairs:
        has[ends[(pw > LOW).any(axis=1)]] = True
    x = np.where(has, NEVER, end_ts)
    alone = [np.where(p.root > LOW, p.root - s, NEVER) for p, s in zip(ps, shift)]
    for _ in range(len(end_ts) + 2):
        vals = [np.maximum(a, (x[end_at[i]:end_at[i + 1], None] + p.dist).max(axis=0)) if len(p.ev) else a
                for i, (p, a) in enumerate(zip(ps, alone))]
        outs = np.concatenate([np.empty(0, np.int64)] + [v[:-1] for v in vals])
        new = np.where(has, NEVER, end_ts)
        np.maximum.at(new, to, outs[frm] + w)
        for ends, starts, pw in pairs:
            new[ends] = np.maximum(new[ends], (outs[starts] + pw).max(axis=1))
        if np.array_equal(new, x):
            return vals
        x = new
    return None
