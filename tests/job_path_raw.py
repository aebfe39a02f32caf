"""The job's critical path computed here, for the tests: it imports nothing of traceaug.

From the raw JSON of every rank: the NCCL kernels, the k-th on a stream on each rank the
same collective; each rank's clock aligned on the lowest rank by the median difference of
those kernels' ends. Each rank's graph (``rank_graph``: HTA's rules as the README states
them, for traces without ``cuda_sync`` events) as plain edge lists (absolute ns of its own
clock); at every collective, its end on each rank depends on each rank's start plus that
rank's transfer (its end minus the last start; a rank's own kernel weighs only that). The
longest path of the joined graph: networkx's.
"""

from __future__ import annotations

import bisect
import re
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


# ----- one rank's graph, from its raw JSON ---------------------------------------------------
CPU_CATS = ("cpu_op", "cuda_runtime", "cuda_driver")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
MAX_GAP_NS = 1_500_000
_STREAM_SYNC = re.compile(r"^cuda(Stream|Event)Synchronize$")


def rank_graph(path: Path, step: int) -> tuple[int, dict]:
    """(the rank, its graph of ProfilerStep#``step``): nodes 2i / 2i+1 the start / end of
    event i (CPU ops and runtime calls that take time, GPU ops), times clipped to the step;
    edges: each thread's walk through its nested calls (the time between two points, 0
    between top-level calls), each GPU op's own time, launch -> op where its stream was idle
    (the others' ops launched then all started), op -> next op on its stream otherwise (a gap
    under 1.5 ms), and the waits of blocking calls: a copy to or from pageable memory on its
    own op, a stream sync on the op launched before it that ended last while it ran, a device
    sync on the last op started on each stream by its end (weighing the call's end minus the
    latest of its start and those ops' ends), and the cross-stream waits the trace does not
    record (``_stream_waits``: an op held long after its stream and its launch allowed, just
    after an op of another stream ended; their time apart, in place of its launch or
    kernel-gap edge)."""
    raw = load_raw(path)
    evs = [e for e in raw["traceEvents"] if e.get("ph") == "X"]
    win = next(e for e in evs if e.get("name") == f"ProfilerStep#{step}")
    lo, hi = ns(win["ts"]), ns(win["ts"]) + ns(win["dur"])
    corr_of = {}  # correlation -> the launching call (first in the file)
    for e in evs:
        if e.get("cat") in CPU_CATS and "correlation" in e.get("args", {}):
            corr_of.setdefault(e["args"]["correlation"], e)
    gpu_all = [e for e in evs if e.get("cat") in GPU_CATS]
    queued = _queue_free(gpu_all, corr_of)
    nodes = []  # (event, is_gpu)
    for e in evs:
        ts, dur = ns(e["ts"]), ns(e["dur"])
        if e.get("cat") in CPU_CATS and dur > 0 and lo <= ts <= hi:
            nodes.append(e)
        elif e.get("cat") in GPU_CATS and dur >= 0 and ts <= hi:
            call = corr_of.get(e["args"].get("correlation"))
            at = ns(call["ts"]) if call is not None else ts
            if lo <= at <= hi and (call is None or ns(call["dur"]) > 0):
                nodes.append(e)
    index = {id(e): i for i, e in enumerate(nodes)}
    t = []
    for e in nodes:
        t += [min(max(ns(e["ts"]), lo), hi), min(max(ns(e["ts"]) + ns(e["dur"]), lo), hi)]
    src, dst, w, kinds, attributed = [], [], [], [], []

    def edge(a, b, weight, kind="span", event=-1):
        src.append(a)
        dst.append(b)
        w.append(weight)
        kinds.append(kind)
        attributed.append(event)

    _cpu_walk(nodes, t, edge)
    streams: dict = {}
    for i, e in enumerate(nodes):
        if e.get("cat") in GPU_CATS:
            edge(2 * i, 2 * i + 1, t[2 * i + 1] - t[2 * i], "span", i)
            streams.setdefault((e["args"]["device"], e["args"]["stream"]), []).append(i)
    order_edges, launch_delays = [], []  # launch -> op where its stream was idle, else op -> op
    for ops in streams.values():
        ops.sort(key=lambda i: (t[2 * i], i))
        for k, i in enumerate(ops):
            call = corr_of.get(nodes[i]["args"].get("correlation"))
            c = index.get(id(call)) if call is not None else None
            prev_end = t[2 * ops[k - 1] + 1] if k else None
            if (c is not None and queued[id(nodes[i])]
                    and (prev_end is None or prev_end < t[2 * c])):
                order_edges.append((2 * c, 2 * i, "launch", i))
                launch_delays.append(t[2 * i] - t[2 * c])
            elif k and t[2 * i] - prev_end < MAX_GAP_NS:
                order_edges.append((2 * ops[k - 1] + 1, 2 * i, "gap", ops[k - 1]))
    waits = _stream_waits(nodes, t, index, corr_of, gpu_all, launch_delays)
    waited = {2 * b for _, b in waits}  # the wait, not the launch nor the op before, set these
    for a, b, kind, ev in [e for e in order_edges if e[1] not in waited] + [
            (2 * a + 1, 2 * b, "wait", -1) for a, b in waits]:
        edge(a, b, t[b] - t[a], kind, ev)
    blocked = _blocking(nodes, t, index, corr_of, streams)
    for call_end, ops in blocked.items():
        weight = t[call_end] - max([t[call_end - 1]] + [t[o] for o in ops])
        for o in ops:
            edge(o, call_end, weight, "sync", -1)
    keep = [k for k in range(len(src)) if t[dst[k]] >= t[src[k]]]
    graph = {"node_ts": t, "src": [src[k] for k in keep], "dst": [dst[k] for k in keep],
             "weight": [max(0, min(w[k], t[dst[k]] - t[src[k]])) for k in keep],
             "ev_ts": [ns(e["ts"]) for e in nodes],
             "ev_stream": [e["args"]["stream"] if e.get("cat") in GPU_CATS else -1
                           for e in nodes],
             "stream_waits": len({b for _, b in waits}),  # ops that waited on another stream
             # for a replay (``job_timing_raw``): each edge's kind and the event it is
             # attributed to (-1: none), the events, the window, the GPU ops' launch calls
             "kind": [kinds[k] for k in keep], "event": [attributed[k] for k in keep],
             "events": nodes, "window": (lo, hi),
             "launch": [index.get(id(corr_of[e["args"]["correlation"]]))
                        if e.get("cat") in GPU_CATS and e["args"].get("correlation") in corr_of
                        else None for e in nodes]}
    return int(raw["distributedInfo"]["rank"]), graph


def _cpu_walk(nodes: list[dict], t: list[int], edge) -> None:
    """Each thread's points in the order of a depth-first walk of its nesting (at one time:
    ends before starts, inner ends first, outer starts first), an edge between consecutive
    points: their time apart, 0 between top-level calls."""
    threads: dict = {}
    for i, e in enumerate(nodes):
        if e.get("cat") in CPU_CATS:
            threads.setdefault((e["pid"], e["tid"]), []).append(i)
    for ops in threads.values():
        ops.sort(key=lambda i: (t[2 * i], -t[2 * i + 1]))
        depth, stack = {}, []
        for i in ops:  # nesting depth among the thread's calls
            while stack and t[2 * stack[-1] + 1] <= t[2 * i] and not (
                    t[2 * stack[-1] + 1] == t[2 * i] and t[2 * stack[-1]] == t[2 * i]):
                stack.pop()
            depth[i] = len(stack)
            stack.append(i)
        points = sorted([(t[2 * i], 1, depth[i], 2 * i) for i in ops]
                        + [(t[2 * i + 1], 0, -depth[i], 2 * i + 1) for i in ops])
        open_, inside = 0, []
        for (_, enter_a, _, a), (_, _, _, b) in zip(points, points[1:]):
            open_ += 1 if enter_a else -1
            if enter_a:
                inside.append(a // 2)
            else:
                inside.remove(a // 2)
            # the time from a start is its op's; to an end, that op's; else the enclosing op's
            owner = a // 2 if enter_a else b // 2 if b % 2 else inside[-1] if inside else -1
            edge(a, b, 0 if open_ == 0 else t[b] - t[a], "dependency" if open_ == 0 else "span",
                 -1 if open_ == 0 else owner)


LATE_NS, NEAR_NS = 50_000, 10_000


def _stream_waits(nodes, t, index, corr_of, gpu_all, launch_delays) -> list[tuple[int, int]]:
    """(a, b) node events: GPU op b started more than 50 us after both the end of the op before
    it on its stream (over the whole file) and its launch call's start plus the median launch
    delay (of the launch edges), and op a of another stream of its device ended at most 10 us
    before b started (the latest such end; each op ending then)."""
    typical = statistics.median(launch_delays) if launch_delays else 0
    prev_end = {}
    per_stream: dict = {}
    for e in gpu_all:
        per_stream.setdefault((e["args"]["device"], e["args"]["stream"]), []).append(e)
    for ops in per_stream.values():
        ops.sort(key=lambda e: ns(e["ts"]))
        for p, e in zip(ops, ops[1:]):
            prev_end[id(e)] = ns(p["ts"]) + max(ns(p["dur"]), 0)
    gpu = [i for i, e in enumerate(nodes) if e.get("cat") in GPU_CATS]
    out = []
    for b in gpu:
        eb = nodes[b]
        start = t[2 * b]
        if id(eb) in prev_end and start - prev_end[id(eb)] <= LATE_NS:
            continue
        call = corr_of.get(eb["args"].get("correlation"))
        c = index.get(id(call)) if call is not None else None
        if c is not None and start - t[2 * c] - typical <= LATE_NS:
            continue
        near = [a for a in gpu if nodes[a]["args"]["device"] == eb["args"]["device"]
                and nodes[a]["args"]["stream"] != eb["args"]["stream"]
                and 0 <= start - t[2 * a + 1] <= NEAR_NS]
        if near:
            last = max(t[2 * a + 1] for a in near)
            out += [(a, b) for a in near if t[2 * a + 1] == last]
    return out


def _queue_free(gpu: list[dict], corr_of: dict) -> dict:
    """Per GPU op (by id): no op of another call on its stream was launched and not started
    at its launch, nor at its start."""
    out = {}
    streams: dict = {}
    for e in gpu:
        streams.setdefault((e["args"]["device"], e["args"]["stream"]), []).append(e)
    for ops in streams.values():
        launched = [(ns(corr_of[o["args"]["correlation"]]["ts"]), o) for o in ops
                    if o["args"].get("correlation") in corr_of]
        ls = sorted(x for x, _ in launched)
        ss = sorted(ns(o["ts"]) for _, o in launched)
        for L, o in launched:
            S = ns(o["ts"])
            call = corr_of[o["args"]["correlation"]]
            mine = [ns(p["ts"]) for x, p in launched
                    if corr_of[p["args"]["correlation"]] is call]
            at_launch = bisect.bisect_right(ls, L) - bisect.bisect_left(ss, L) - len(mine)
            at_start = (bisect.bisect_right(ls, S) - bisect.bisect_right(ss, S)
                        - sum(1 for m in mine if m > S))
            out[id(o)] = at_launch == 0 and at_start == 0
    for e in gpu:
        out.setdefault(id(e), False)
    return out


def _blocking(nodes, t, index, corr_of, streams) -> dict:
    """Per blocking call's end node, the end nodes of the GPU ops it waited for."""
    out: dict = {}
    gpu = [i for i, e in enumerate(nodes) if e.get("cat") in GPU_CATS]
    for i in gpu:  # copies to or from pageable memory wait for their own op
        call = corr_of.get(nodes[i]["args"].get("correlation"))
        c = index.get(id(call)) if call is not None else None
        name = call["name"] if call is not None else ""
        if c is None or not re.match(r"^cudaMemcpy", name):
            continue
        if ("Async" not in name or "Pageable" in nodes[i]["name"]) and t[2 * i + 1] <= t[2 * c + 1]:
            out.setdefault(2 * c + 1, []).append(2 * i + 1)
    by_end = sorted(gpu, key=lambda i: t[2 * i + 1])
    for c, e in enumerate(nodes):
        if e.get("cat") not in CPU_CATS:
            continue
        s, end = t[2 * c], t[2 * c + 1]
        if _STREAM_SYNC.match(e["name"]):
            best = None
            for i in by_end:
                call = corr_of.get(nodes[i]["args"].get("correlation"))
                launched = (t[2 * index[id(call)]] if call is not None and id(call) in index
                            else t[2 * i])
                if s < t[2 * i + 1] <= end and launched <= s:
                    best = i
            if best is not None:
                out.setdefault(2 * c + 1, []).append(2 * best + 1)
        elif e["name"] == "cudaDeviceSynchronize":
            for ops in streams.values():
                started = [i for i in ops if t[2 * i] <= end]
                if started:
                    out.setdefault(2 * c + 1, []).append(2 * started[-1] + 1)
    return out
