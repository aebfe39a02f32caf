"""The longest path of a DAG as numpy edge arrays (a million nodes on a large trace), nodes ordered by time:
one-way runs (a thread's calls, a stream's kernels) are cumulative sums; only edges between runs relax."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ..errors import TraceaugError

NEVER = np.iinfo(np.int64).min // 4  # a time before any (none: no op before, no way in yet)


@dataclass
class Dag:
    """A DAG as arrays: nodes by time (``node_order`` breaks ties; ``node_lane``, a hint: nodes following one
    another, any grouping works) and weighted edges ``src`` -> ``dst``."""

    node_ts: np.ndarray
    node_order: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    node_lane: np.ndarray | None = None


def longest_path(g: Dag) -> np.ndarray:
    """Edge indices of the longest path (from any node), in order; of equal ways in, the first edge by index
    (networkx's ``dag_longest_path``). ``g``: a ``Dag`` or anything with its fields."""
    if not len(g.src):
        return np.empty(0, np.int64)
    topo, runs, dist, best = _lengths(g)
    by_topo = np.empty(len(topo), np.int64)
    by_topo[topo] = np.arange(len(topo))
    at = int(by_topo[np.argmax(dist[by_topo])])  # the first node, topologically, of the greatest length
    return _walk_back(at, best, g.src, runs)


def longest_paths(g: Dag, node_win: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``longest_path`` of each window of a graph no edge of which joins two windows (``node_win``: each
    node's): (the paths' edges, each path in order; each edge's window), every window walked at once."""
    src, dst = g.src, g.dst
    if not len(src):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    topo, _, dist, best = _lengths(g)
    o = np.lexsort((topo, -dist, node_win))  # per window: the first node, by topo, of the greatest length
    at = o[np.r_[True, node_win[o][1:] != node_win[o][:-1]]]
    edges, step = [], 0
    while len(at):
        e = best[at]
        at, e = at[e >= 0], e[e >= 0]
        edges.append((e, np.full(len(e), step)))
        at, step = src[e], step - 1
    e = np.concatenate([x for x, _ in edges])
    o = np.lexsort((np.concatenate([x for _, x in edges]), node_win[dst[e]]))
    return e[o], node_win[dst[e[o]]]


def _lengths(g: Dag):
    """(topological positions, ``Runs``, each node's longest way in (ns), each node's best edge in, -1:
    none); of equal ways in, the first edge by index."""
    src, dst, w = g.src, g.dst, g.weight
    topo = positions(g.node_ts, g.node_order, src, dst)
    runs = chains(topo, src, dst, w, g.node_lane)
    rest = np.flatnonzero(~runs.link)  # every edge into a run's head
    rest = rest[np.lexsort((rest, topo[dst[rest]]))]  # by destination, ties by edge index
    length, way = [0] * len(runs.head), [-1] * len(runs.head)  # per run: its head's
    for e, a, d, x in zip(rest.tolist(), runs.run[src[rest]].tolist(), runs.run[dst[rest]].tolist(),
                          (runs.base[src[rest]] + w[rest]).tolist()):
        x += length[a]
        if way[d] < 0 or x > length[d]:
            length[d], way[d] = x, e
    best = runs.into.copy()  # each node's best way in
    best[runs.order[runs.head]] = way
    return topo, runs, np.array(length, np.int64)[runs.run] + runs.base, best


@dataclass
class Runs:
    """Nodes in runs joined by chain edges (see ``longest_path``), numbered along the sort
    (``order``: the nodes in that sort; ``rank``: each node's place in it)."""

    order: np.ndarray
    rank: np.ndarray
    run: np.ndarray  # each node's run
    head: np.ndarray  # each run's first rank
    base: np.ndarray  # each node's length from its run's head
    into: np.ndarray  # each node's chain edge in (-1 at a head)
    link: np.ndarray  # which edges are chain edges


def chains(topo: np.ndarray, src: np.ndarray, dst: np.ndarray, w: np.ndarray,
           lane: np.ndarray | None) -> Runs:
    """The ``Runs`` of nodes sorted by ``lane`` (if given), then ``topo``: an edge to the next node is a chain
    edge when it is the only way out of the one and the only way into the other."""
    n = len(topo)
    order = np.empty(n, np.int64)
    order[topo] = np.arange(n)  # nodes in topological order
    if lane is not None:
        key = lane[order]
        if len(key) and key.min() >= 0 and key.max() < 1 << 16:
            key = key.astype(np.uint16)  # a radix sort
        order = order[np.argsort(key, kind="stable")]
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    single_in = np.bincount(dst, minlength=n) == 1
    single_out = np.bincount(src, minlength=n) == 1
    link = (rank[dst] == rank[src] + 1) & single_in[dst] & single_out[src]
    linked = np.zeros(n, bool)  # by rank: joined to the node before it
    linked[rank[dst[link]]] = True
    step = np.zeros(n, np.int64)
    step[rank[dst[link]]] = w[link]
    total = np.cumsum(step)
    head = np.flatnonzero(~linked)
    run_by_rank = np.cumsum(~linked) - 1
    run, base, into = np.empty(n, np.int64), np.empty(n, np.int64), np.full(n, -1, np.int64)
    run[order] = run_by_rank
    base[order] = total - total[head][run_by_rank]
    into[dst[link]] = np.flatnonzero(link)
    return Runs(order, rank, run, head, base, into, link)


def _walk_back(at: int, best: np.ndarray, src: np.ndarray, runs: Runs) -> np.ndarray:
    """The edges of the best way into ``at``, in order: back along its run's chain edges in
    one slice, then by the best way into the run's head, run after run."""
    pieces = []
    while True:
        p, h = int(runs.rank[at]), int(runs.head[runs.run[at]])
        if p > h:
            pieces.append(runs.into[runs.order[h + 1 : p + 1]])
            at = int(runs.order[h])
        e = int(best[at])
        if e < 0:
            break
        pieces.append(np.array([e], np.int64))
        at = int(src[e])
    return np.concatenate(pieces[::-1]) if pieces else np.empty(0, np.int64)


def positions(node_ts: np.ndarray, node_order: np.ndarray, src: np.ndarray, dst: np.ndarray
              ) -> np.ndarray:
    """Each node's position in a topological order: by time, ties by ``node_order``; the nodes of a time an
    edge still joins backwards are reordered by Kahn's algorithm (a handful)."""
    n = len(node_ts)
    order = np.lexsort((node_order, node_ts))
    topo = np.empty(n, np.int64)
    topo[order] = np.arange(n)
    bad = topo[src] >= topo[dst]
    if not bad.any():
        return topo
    tied = np.isin(node_ts, np.unique(node_ts[src[bad]]))
    nodes = np.flatnonzero(tied)
    local = {v: i for i, v in enumerate(nodes.tolist())}
    inner = tied[src] & tied[dst] & (node_ts[src] == node_ts[dst])
    succ: list[list[int]] = [[] for _ in nodes]
    deg = [0] * len(nodes)
    for u, v in zip(src[inner].tolist(), dst[inner].tolist()):
        succ[local[u]].append(local[v])
        deg[local[v]] += 1
    key = topo[nodes].tolist()
    heap = [(key[i], i) for i in range(len(nodes)) if deg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, i = heapq.heappop(heap)
        out.append(i)
        for j in succ[i]:
            deg[j] -= 1
            if deg[j] == 0:
                heapq.heappush(heap, (key[j], j))
    if len(out) != len(nodes):
        raise TraceaugError("the dependency graph has a cycle: no longest path")
    topo[nodes[np.array(out, np.int64)]] = np.sort(topo[nodes])
    return topo
