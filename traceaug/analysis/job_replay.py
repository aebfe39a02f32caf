"""What-if replay of a whole job: the ranks' replay models in the job clock, joined at each matched collective
(each member's end waits for every arrival plus its transfer; ``no_stragglers``: for the median arrival)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import collectives as co
from . import job_path as jp
from . import job_ports, replay

NO_STRAGGLERS = "no-stragglers"
NEVER, LOW = job_ports.NEVER, job_ports.LOW


@dataclass
class Joined:
    """One job step's replay model (``joined``: ranks' models, then joins) and what built it: ranks, graphs,
    each rank's first edge (``edge_at``), the own-kernel edges, ``median`` (src, dst, delay)."""

    ranks: list[int]
    graphs: list[jp.RankGraph]
    joined: replay.Model
    edge_at: np.ndarray
    own_edges: list[int]
    shift: list[int]  # each rank's clock offset (``job_path.step_graphs``)
    median: tuple[np.ndarray, np.ndarray, np.ndarray]


def joined_model(parts: dict[int, jp.RankPart], matched: co.Matched, step: int) -> Joined:
    """The ranks' replay models of ``step`` in the job clock, joined at every matched instance: each member's
    end after every other's arrival plus its transfer, its own kernel's time capped at that transfer."""
    ranks, gs, shift = jp.step_graphs(parts, matched, step)
    models = [g.model.shifted(-s) for g, s in zip(gs, shift)]
    gs = [dataclasses.replace(g, model=None) for g in gs]  # (the models' arrays: ``join`` lets them go)
    node_at = np.cumsum([0] + [len(m.node_ts) for m in models])
    edge_at = np.cumsum([0] + [len(m.src) for m in models])
    ts = np.concatenate([m.node_ts for m in models])
    spans = [jp.span_into_nodes(len(m.node_ts), m.src, m.dst, m.event) for m in models]
    rank_of = np.repeat(np.arange(len(models)), np.diff(node_at))
    own_edges, joins, medians = [], [], []  # joins and medians: (src, dst, delay) per instance
    for mem in jp.members(matched, ranks, gs, node_at):
        transfer, mid, (p, q) = jp.instance(ts[mem], ts[mem + 1])
        for end, t in zip((mem + 1).tolist(), transfer.tolist()):
            i = int(rank_of[end])
            e = int(spans[i][end - node_at[i]])
            if e >= 0:
                models[i].delay[e] = min(int(models[i].delay[e]), t)
                own_edges.append(int(edge_at[i]) + e)
        joins.append((mem[p], mem[q] + 1, transfer[q]))
        medians.append((np.full(len(mem), mem[mid]), mem + 1, transfer))
    j_src, j_dst, j_w = jp.columns(joins)
    # a join's time is the destination kernel's (a --scale of it scales the transfer)
    joined = replay.join(models, j_src, j_dst, j_w, j_dst // 2)
    return Joined(ranks, gs, joined, edge_at, own_edges, shift, jp.columns(medians))


def replay_step(parts: dict[int, jp.RankPart], matched: co.Matched, step: int,
                scales: list[replay.Scale], no_launch_delay: bool, no_stragglers: bool
                ) -> replay.StepReplay:
    """One job step unchanged, then each change alone, then all (as ``replay.whatif``)."""
    j = joined_model(parts, matched, step)
    joined, gs = j.joined, j.graphs
    changes = [(s.label, joined, np.where(np.concatenate([g.picked[s.label] for g in gs]), s.factor, 1.0),
                 False) for s in scales]
    if no_launch_delay:
        changes.append((replay.NO_LAUNCH_DELAY, joined, None, True))
    if no_stragglers:
        changes.append((NO_STRAGGLERS, _at_the_median(j), None, False))
    predicted = replay.predict(changes, joined.events, changes[-1][1] if no_stragglers else joined,
                               no_launch_delay)
    cpu = np.repeat(~np.concatenate([np.empty(0, bool)] + [g.ev["gpu"] for g in gs]).astype(bool), 2)
    dep = [int(t.max()) - joined.start if len(t) else joined.end - joined.start
           for t in (joined.dependency_times(joined.start, c) for c in (None, cpu))]
    return replay.StepReplay(None if step == jp.WHOLE else step, joined.end - joined.start,
                             joined.replay(), joined.unexplained(), predicted, *dep)


def without_stragglers(parts: dict[int, jp.RankPart], matched: co.Matched, step: int,
                       graphs: Callable[[], dict] | None = None) -> tuple[int, int]:
    """The job replay of ``step`` unchanged and without stragglers (ns; ``replay_step``'s baseline and its
    ``NO_STRAGGLERS`` prediction), all a job verdict asks of it (``parts``: ``job_path.replay_part``'s): from
    the ranks' ports (``job_ports``); where they cannot tell, on every rank's graph joined (``graphs()``:
    ``job_path.rank_part``'s with models, keyed; default ``parts``)."""
    found = replayed(parts, matched, step)
    if found is not None:
        return found
    j = joined_model(graphs() if graphs is not None else parts, matched, step)
    baseline, median = j.joined.replay(), _at_the_median(j)
    del j  # (the joined model's edges: the median model has its own)
    return baseline, median.replay()


def _at_the_median(j: Joined) -> replay.Model:
    """The joined model with each collective's edges (the joins, each member's own kernel time)
    replaced by the median arrival's: end after it plus the member's transfer, no slack."""
    joined, (src, dst, delay) = j.joined, j.median
    keep = np.ones(len(joined.src), bool)
    keep[int(j.edge_at[-1]):] = False  # the joins (``replay.join`` puts them last)
    keep[np.array(j.own_edges, np.int64)] = False
    k = np.flatnonzero(keep)
    return dataclasses.replace(
        joined, src=np.r_[joined.src[k], src], dst=np.r_[joined.dst[k], dst],
        delay=np.r_[joined.delay[k], delay], slack=np.r_[joined.slack[k], np.zeros(len(src), np.int64)],
        event=np.r_[joined.event[k], dst // 2],
        launch=np.r_[joined.launch[k], np.zeros(len(src), bool)],
        what=np.r_[joined.what[k], np.full(len(src), replay.OWN)], every_node=False)


def whatif(parts: dict[int, jp.RankPart], step: int | None = None,
           scales: list[replay.Scale] | tuple = (), no_launch_delay: bool = False,
           no_stragglers: bool = False) -> list[replay.StepReplay]:
    """The job replay of every step (or ``step``) from its ranks' parts (``job_path.keyed``,
    read with the replay models and the events each of ``scales`` picks)."""
    found = jp.match_parts(parts)
    picks = [np.array([any(g.picked[s.label].any() for p in parts.values() for g in p.graphs.values())])
             for s in scales]
    replay.glob_checked(list(scales), np.concatenate([np.empty(0, object)] + [
        p.names for p in parts.values() if p.names is not None]), picks)
    return [replay_step(parts, found, k, list(scales), no_launch_delay, no_stragglers)
            for k in jp.step_keys(parts, step)]


def replayed(parts: dict[int, jp.RankPart], matched: co.Matched, step: int) -> tuple[int, int] | None:
    """``without_stragglers`` from the ranks' ports (``job_ports``; None: a rank without them, or an edge of
    the median replay running back in time, whose schedule only the joined graph gives): the joined models'
    longest paths, each rank's cut at its kernels' ends, relaxed across ranks at those ends."""
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
        each = [getattr(p, field) for p in ps]
        if at is not None:
            each = [x + at[i] for i, x in enumerate(each)]
        if clock:
            each = [x - shift[i] for i, x in enumerate(each)]
        return np.concatenate(each) if each else np.empty(0, np.int64)

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
    """The ways into the kernel ends of the joined model (``joined_model``) and of its median one
    (``_at_the_median``): each (end, source out, delay plus slack), the joins (``job_path.instance``) last,
    slack at their ends found anew (``replay.binding``), then the joined model's instances whose every end
    follows every arrival: their joins, all pairs, are one way per end (from the first of the other members'
    latest arrivals: the one a slack can be on) plus (end, members' outs, transfer) for ``_times``, ranks not
    squared. None: a kernel in two instances, or an edge of the median model running back in time."""
    into_end, into_out, delay, slack, own = into
    ends = np.concatenate([np.empty(0, np.int64)] + [e for e, _ in groups])
    if len(np.unique(ends)) < len(ends):
        return None
    member, cap = np.isin(into_end, ends), np.zeros(len(end_ts), np.int64)
    joins, medians, every = [], [], []
    for ends, outs in groups:
        ts, te = out_ts[outs], end_ts[ends]
        transfer, mid = jp.arrival(ts, te)
        if (te < ts[mid]).any():
            return None
        cap[ends] = transfer
        if te.min() >= ts.max():
            joins.append((ends, outs[_first_latest_other(ts)], transfer))
            every.append((ends, outs, transfer))
        else:
            p, q = jp.pairs(ts, te)
            joins.append((ends[q], outs[p], transfer[q]))
        medians.append((ends, np.full(len(ends), outs[mid]), transfer))
    d = np.where(member & own, np.minimum(delay, cap[into_end]), delay)  # (its own time capped)
    (j_end, j_out, j_w), at = jp.columns(joins), np.flatnonzero(member)
    _, s = replay.binding(np.r_[end_ts, out_ts], len(end_ts) + np.r_[into_out[at], j_out],
                          np.r_[into_end[at], j_end], np.r_[d[at], j_w])  # (ties: the rank's own edge)
    slack = slack.copy()
    slack[at] = s[:len(at)]
    keep = ~(member & own)  # (the median model: each member's own time is the median's edge)
    m_end, m_out, m_w = jp.columns(medians)
    sizes = np.array([len(e) for e, _, _ in every], np.int64)
    none = (*jp.columns([]), sizes[:0])  # (the median model has no joins)
    return ((np.r_[into_end, j_end], np.r_[into_out, j_out], np.r_[d + slack, j_w + s[len(at):]],
             (*jp.columns(every), np.cumsum(sizes) - sizes)),
            (np.r_[into_end[keep], m_end], np.r_[into_out[keep], m_out], np.r_[(d + slack)[keep], m_w], none))


def _first_latest_other(ts: np.ndarray) -> np.ndarray:
    """Per member, the first other member with the latest arrival of the others (``ts``: two or more)."""
    first = int(np.argmax(ts))
    rest = ts.copy()
    rest[first] = np.iinfo(np.int64).min
    found = np.full(len(ts), first, np.int64)
    found[first] = int(np.argmax(rest))
    return found


def _latest_of_others(v: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Per member of each group of ``v`` (``at``: where each starts; two members or more), the latest ``v``
    of the group's other members."""
    size = np.diff(np.r_[at, len(v)])
    top = np.repeat(np.maximum.reduceat(v, at), size)
    is_top = v == top
    alone = is_top & (np.repeat(np.add.reduceat(is_top.astype(np.int64), at), size) == 1)
    second = np.repeat(np.maximum.reduceat(np.where(is_top, np.iinfo(np.int64).min, v), at), size)
    return np.where(alone, second, top)


def _times(ps: list[job_ports.Ports], shift: list[int], end_at: np.ndarray, end_ts: np.ndarray, ways: tuple
           ) -> list | None:
    """Each rank's outs' replayed times (job clock; last: its latest node's) with the kernel ends joined by
    ``ways`` (``_edges``: edges, then each end after the latest of its instance's other arrivals plus its
    transfer); a kernel end with no way in keeps its measured time. Relaxed until nothing moves: a DAG
    settles within its ends' count (None: it did not)."""
    to, frm, w, (e_end, e_out, e_w, e_at) = ways
    has = np.zeros(len(end_ts), bool)
    has[to] = True
    x = np.where(has, NEVER, end_ts)
    alone = [np.where(p.root > LOW, p.root - s, NEVER) for p, s in zip(ps, shift)]
    for _ in range(len(end_ts) + 2):
        vals = [np.maximum(a, (x[end_at[i]:end_at[i + 1], None] + p.dist).max(axis=0)) if len(p.ev) else a
                for i, (p, a) in enumerate(zip(ps, alone))]
        outs = np.concatenate([np.empty(0, np.int64)] + [v[:-1] for v in vals])
        new = np.where(has, NEVER, end_ts)
        np.maximum.at(new, to, outs[frm] + w)
        if len(e_end):
            new[e_end] = np.maximum(new[e_end], _latest_of_others(outs[e_out], e_at) + e_w)
        if np.array_equal(new, x):
            return vals
        x = new
    return None
