"""The longest path of a directed acyclic graph given as edge arrays, nodes ordered by time.

Why here: the critical path's graph has a node per event start and end and an edge per
dependency, a million of each on a large trace; kept as numpy arrays, it never becomes
Python objects, and one pass over the edges in topological order finds the path. Every
edge runs forward in time or stays at one time, so sorting nodes by time (ties by a given
order) is a topological order but for a few ties, which Kahn's algorithm settles.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..errors import TraceaugError


def longest_path(node_ts: np.ndarray, node_order: np.ndarray, src: np.ndarray, dst: np.ndarray,
                 w: np.ndarray) -> np.ndarray:
    """Edge indices of the longest path (a path may start at any node), in order: one pass
    over the edges sorted by their destination's topological position (``positions``). Of
    equal ways into a node the first edge (by index) is kept, so a path runs back through
    zero-weight edges as far as they go, as networkx's ``dag_longest_path`` does."""
    n = len(node_ts)
    if not len(src):
        return np.empty(0, np.int64)
    topo = positions(node_ts, node_order, src, dst)
    ps, pd_ = topo[src], topo[dst]
    order = np.argsort(pd_, kind="stable")  # ties by edge index
    dist = [0] * n
    best = [-1] * n
    for e, s, d, x in zip(order.tolist(), ps[order].tolist(), pd_[order].tolist(),
                          w[order].tolist()):
        x += dist[s]
        if best[d] < 0 or x > dist[d]:
            dist[d], best[d] = x, e
    dist_a = np.array(dist, np.int64)
    at = int(np.argmax(dist_a))  # the first node (topologically) of the greatest length
    edges = []
    while best[at] >= 0:
        e = best[at]
        edges.append(e)
        at = int(topo[src[e]])
    return np.array(edges[::-1], np.int64)


def positions(node_ts: np.ndarray, node_order: np.ndarray, src: np.ndarray, dst: np.ndarray
              ) -> np.ndarray:
    """Each node's position in a topological order: by time, ties by ``node_order``; where an
    edge still joins two nodes of one time backwards, those times' nodes are reordered by
    Kahn's algorithm (a handful of nodes)."""
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
