"""The job's critical path computed here, for the tests: it imports nothing of traceaug.

From the raw JSON of every rank: the NCCL kernels, the k-th on a stream on each rank the
same collective; each rank's clock aligned on the lowest rank by the median difference of
those kernels' ends. Each rank's graph is given as plain edge lists (absolute ns of its own
clock); at every collective, its end on each rank depends on each rank's start plus that
rank's transfer (its end minus the last start; a rank's own kernel weighs only that). The
longest path of the joined graph: networkx's.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import networkx as nx
from rawjson import load_raw, ns


def nccl_kernels(d: Path) -> dict[int, dict[int, list[tuple[int, int]]]]:
    """rank -> stream -> (start ns, end ns) of its NCCL kernels in start order."""
    out: dict[int, dict] = {}
    for f in sorted(d.iterdir()):
        raw = load_raw(f)
        mine: dict[int, list] = {}
        for e in raw["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"].startswith("nccl"):
                mine.setdefault(int(e["args"]["stream"]), []).append(
                    (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
        out[int(raw["distributedInfo"]["rank"])] = {s: sorted(v) for s, v in mine.items()}
    return out


def instances(kernels: dict) -> list[dict[int, tuple[int, int]]]:
    """Each collective: rank -> (start, end), the k-th kernel of a stream on every rank."""
    streams = sorted({s for k in kernels.values() for s in k})
    out = []
    for s in streams:
        ranks = [r for r in sorted(kernels) if s in kernels[r]]
        for k in range(min(len(kernels[r][s]) for r in ranks)):
            out.append({r: kernels[r][s][k] for r in ranks})
    return out


def offsets(insts: list[dict]) -> dict[int, int]:
    ranks = sorted({r for i in insts for r in i})
    ref = ranks[0]
    return {r: round(statistics.median(i[r][1] - i[ref][1] for i in insts if r in i and ref in i))
            for r in ranks}


def longest(d: Path, graphs: dict[int, dict]) -> int:
    """The length (ns) of the longest path of job ``d``'s joined graph; ``graphs``: per rank
    ``node_ts, src, dst, weight`` (node 2i / 2i+1: start / end of event i) and per event
    ``ev_ts`` (its start, unclipped) and ``ev_stream``."""
    insts = instances(nccl_kernels(d))
    off = offsets(insts)
    g = nx.DiGraph()
    t: dict = {}

    def edge(u, v, w):
        if t[v] < t[u]:
            return
        w = min(w, t[v] - t[u])
        if not g.has_edge(u, v) or g[u][v]["weight"] < w:
            g.add_edge(u, v, weight=w)

    spans: dict = {}
    for r, gr in graphs.items():
        for i, x in enumerate(gr["node_ts"]):
            t[(r, i)] = x - off[r]
            g.add_node((r, i))
        for s, dd, w in zip(gr["src"], gr["dst"], gr["weight"]):
            spans[(r, s, dd)] = max(w, spans.get((r, s, dd), w))
    node_of = {r: {(ts, st): i for i, (ts, st) in enumerate(zip(gr["ev_ts"], gr["ev_stream"]))}
               for r, gr in graphs.items()}
    joined: list[tuple] = []
    for inst in insts:
        stream = None
        members = {}
        for r, (start, _end) in inst.items():
            if r not in graphs:
                continue
            for (ts, st), i in node_of[r].items():
                if ts == start and st >= 0 and (stream is None or st == stream):
                    members[r] = i
                    break
        if len(members) < 2:
            continue
        last = max(t[(r, 2 * i)] for r, i in members.items())
        for r, i in members.items():
            transfer = max(t[(r, 2 * i + 1)] - last, 0)
            own = (r, 2 * i, 2 * i + 1)
            if own in spans:
                spans[own] = min(spans[own], transfer)
            for q, j in members.items():
                if (q, j) != (r, i):
                    joined.append(((q, 2 * j), (r, 2 * i + 1), transfer))
    for (r, s, dd), w in spans.items():
        edge((r, s), (r, dd), w)
    for u, v, w in joined:
        edge(u, v, w)
    return int(nx.dag_longest_path_length(g, weight="weight", default_weight=0))
