"""What-if replay of a whole job: the ranks' replay models in the job clock, joined at each matched collective
(each member's end waits for every arrival plus its transfer; ``no_stragglers``: for the median arrival)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import collectives as co
from . import job_path as jp
from . import replay

NO_STRAGGLERS = "no-stragglers"


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


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
        transfer = jp.transfers(ts, mem)
        for end, w in zip((mem + 1).tolist(), transfer.tolist()):
            i = int(rank_of[end])
            e = int(spans[i][end - node_at[i]])
            if e >= 0:
                models[i].delay[e] = min(int(models[i].delay[e]), w)
                own_edges.append(int(edge_at[i]) + e)
        s, d, w = jp.all_pairs(mem, transfer)
        cross = d != s + 1  # (a member's own kernel: its delay, capped above)
        joins.append((s[cross], d[cross], w[cross]))
        median = mem[np.argsort(ts[mem], kind="stable")[(len(mem) - 1) // 2]]
        medians.append((np.full(len(mem), median), mem + 1, transfer))
    j_src, j_dst, j_w = (_cat([x[i] for x in joins]) for i in range(3))
    # a join's time is the destination kernel's (a --scale of it scales the transfer)
    joined = replay.join(models, j_src, j_dst, j_w, j_dst // 2)
    return Joined(ranks, gs, joined, edge_at, own_edges, shift,
                  tuple(_cat([x[i] for x in medians]) for i in range(3)))


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
    from .job_ports import replayed

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
    cap = np.minimum(delay, np.maximum(joined.node_ts[dst] - joined.node_ts[src], 0))
    k = np.flatnonzero(keep)
    return dataclasses.replace(
        joined, src=np.r_[joined.src[k], src], dst=np.r_[joined.dst[k], dst],
        delay=np.r_[joined.delay[k], cap], slack=np.r_[joined.slack[k], np.zeros(len(src), np.int64)],
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
