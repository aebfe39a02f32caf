"""The job's timing path computed here, for the tests: it imports nothing of traceaug.

From the raw JSON (``job_path_raw``: each rank's graph, the collectives matched and the
clocks aligned): each rank's replay model as the README states it (every edge its delay:
an op's own time, a measured wait, a launch delay, a kernel gap, a blocking call's wait
after the GPU op it waited for, which its own span weighs too; beyond the graph, each GPU
op after the op before it on its stream, delay 0, and after its launch call's start, the
median launch delay at most), joined at every collective (each member's end after every
other member's start plus its transfer, its own kernel's time at most that transfer). Each
node's binding edge is the in-edge whose source time plus delay is latest. From the step's
end (the last rank's step end; its latest node) back along binding edges: each edge's delay
(none for the gap between two top-level calls), then the rest of its time idle; before the
first node, idle to its rank's step start, and that rank's late start.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from job_path_raw import instances, nccl_kernels, offsets, rank_graph

COMM = re.compile(r"^nccl|ncclKernel|^rccl|ncclDevKernel", re.IGNORECASE)
KIND = {"span": "span", "dependency": "dependency", "launch": "launch_delay", "gap": "kernel_gap",
        "sync": "sync", "wait": "stream_wait", "join": "collective",
        "order_launch": "launch_delay", "order_stream": "kernel_gap"}


def graphs(d: Path, step: int) -> dict[int, dict]:
    """Each rank's graph of ProfilerStep#``step`` (the ranks that have it)."""
    out = {}
    for f in sorted(d.iterdir()):
        try:
            r, g = rank_graph(f, step)
        except StopIteration:
            continue
        out[r] = g
    return out


def _model(g: dict) -> list[tuple]:
    """One rank's replay edges: (src, dst, delay, kind, event shown)."""
    t = g["node_ts"]
    own = {}  # a blocking call's end: its wait after the GPU op
    for d, w, k in zip(g["dst"], g["weight"], g["kind"]):
        if k == "sync":
            own[d] = w
    edges = []
    launch_in, gap_in = set(), set()
    for s, d, w, k, e in zip(g["src"], g["dst"], g["weight"], g["kind"], g["event"]):
        delta = t[d] - t[s]
        delay = w if k == "sync" else min(delta, own[d]) if k == "span" and d in own else delta
        edges.append((s, d, delay, k, e if e >= 0 else d // 2))
        if k == "launch":
            launch_in.add(d)
        if k == "gap":
            gap_in.add(d)
    launches = [t[d] - t[s] for s, d, k in zip(g["src"], g["dst"], g["kind"]) if k == "launch"]
    typical = int(statistics.median(launches)) if launches else 0
    evs = g["events"]
    streams: dict = {}
    for i, e in enumerate(evs):
        if "stream" in e["args"] and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            streams.setdefault((e["args"]["device"], e["args"]["stream"]), []).append(i)
    for ops in streams.values():
        ops.sort(key=lambda i: t[2 * i])
        for a, b in zip(ops, ops[1:]):
            if 2 * b not in gap_in and t[2 * b] >= t[2 * a + 1]:
                edges.append((2 * a + 1, 2 * b, 0, "order_stream", b))
    for i, c in enumerate(g["launch"]):
        if c is not None and 2 * i not in launch_in and t[2 * i] >= t[2 * c]:
            edges.append((2 * c, 2 * i, min(t[2 * i] - t[2 * c], typical), "order_launch", i))
    return edges


def segments(d: Path, step: int) -> tuple[list[tuple], dict]:
    """(the timing path of job ``d``'s ``step``: (rank, ts, end, kind, category, event)
    pieces in the job clock, consecutive ones of one rank, kind, category and event merged;
    facts: ``ties`` (nodes of the walk with two binding candidates), ``window``, ``joins``:
    each collective the walk crossed as (its members' arrivals by rank, the rank it
    crossed from))."""
    gs = graphs(d, step)
    insts = instances(nccl_kernels(d))
    off = offsets(insts)
    t: dict = {}
    edges: list[tuple] = []
    for r, g in gs.items():
        for i, x in enumerate(g["node_ts"]):
            t[(r, i)] = x - off[r]
        edges += [((r, s), (r, dd), w, k, (r, e)) for s, dd, w, k, e in _model(g)]
    node_of = {r: {(ts, st): i for i, (ts, st) in enumerate(zip(g["ev_ts"], g["ev_stream"]))}
               for r, g in gs.items()}
    arrivals: dict = {}
    capped: dict = {}  # a member's own kernel: its time at most its transfer
    joined: list[tuple] = []
    for inst in insts:
        members = {}
        for r, (start, _end) in inst.items():
            if r in gs:
                i = next((i for (ts, st), i in node_of[r].items() if ts == start and st >= 0),
                         None)
                if i is not None:
                    members[r] = i
        if len(members) < 2:
            continue
        last = max(t[(r, 2 * i)] for r, i in members.items())
        for r, i in members.items():
            transfer = max(t[(r, 2 * i + 1)] - last, 0)
            capped[((r, 2 * i), (r, 2 * i + 1))] = transfer
            arrivals[(r, 2 * i + 1)] = {q: t[(q, 2 * j)] for q, j in members.items()}
            for q, j in members.items():
                u, v = (q, 2 * j), (r, 2 * i + 1)
                if q != r and t[v] >= t[u]:
                    joined.append((u, v, min(transfer, t[v] - t[u]), "join", (r, i)))
    edges = [(s, dd, min(w, capped[(s, dd)]) if (s, dd) in capped else w, k, e)
             for s, dd, w, k, e in edges] + joined
    best: dict = {}
    for s, dd, w, k, e in edges:
        at = t[s] + w
        if dd not in best or at > best[dd][0][0]:
            best[dd] = [(at, s, w, k, e)]
        elif at == best[dd][0][0]:
            best[dd].append((at, s, w, k, e))
    lo = {r: g["window"][0] - off[r] for r, g in gs.items()}
    hi = {r: g["window"][1] - off[r] for r, g in gs.items()}
    start, end = min(lo.values()), max(hi.values())
    r_end = next(r for r in sorted(gs) if hi[r] == end)
    v = max(((r_end, i) for i in range(len(gs[r_end]["node_ts"]))), key=lambda n: t[n])
    pieces = [(v[0], t[v], end, "idle", None)]
    ties = sum(t[(r_end, i)] == t[v] for i in range(len(gs[r_end]["node_ts"]))) - 1
    joins = []
    while v in best:
        ties += len(best[v]) > 1
        _, u, w, k, e = best[v][0]
        work = 0 if k == "dependency" else w
        pieces.append((v[0], t[u] + work, t[v], "idle", None))
        if k == "join":
            joins.append((arrivals[v], u[0]))
        pieces.append((e[0], t[u], t[u] + work, KIND[k], e))
        v = u
    pieces.append((v[0], lo[v[0]], t[v], "idle", None))
    pieces.append((v[0], start, lo[v[0]], "late_start", None))
    out: list[tuple] = []
    for r, a, b, kind, shown in reversed(pieces):
        if b <= a:
            continue
        if kind in ("idle", "late_start"):
            row = (r, a, b, kind, "idle", f"ProfilerStep#{step}" if kind == "late_start" else None)
        else:
            ev = gs[shown[0]]["events"][shown[1]]
            row = (r, a, b, kind, _category(kind, ev), ev["name"])
        if out and out[-1][0] == row[0] and out[-1][3:] == row[3:] and out[-1][2] == a:
            out[-1] = (*out[-1][:2], b, *out[-1][3:])
        else:
            out.append(row)
    return out, {"ties": ties, "window": (start, end), "joins": joins}


def _category(kind: str, ev: dict) -> str:
    if kind in ("launch_delay", "kernel_gap"):
        return kind
    if kind == "sync":  # a call's wait after the GPU op it waited for
        return "blocked"
    if kind == "stream_wait":
        return "sync_wait"
    cat = ev.get("cat")
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "gpu_memory"
    if cat == "kernel":
        return "gpu_communication" if COMM.search(ev["name"]) else "gpu_compute"
    return "cpu"
