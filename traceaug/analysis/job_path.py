"""The critical path of a whole job: every rank's graph (made in its task) joined at each matched collective,
whose end on each member depends on every member's arrival plus its transfer: the path runs via the last."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from . import collectives as co
from . import critical_path as cp
from . import dag, replay
from .collective_rank import RankTables
from .collective_rank import tables as rank_tables
from .job_ports import Ports, ports, span_into_nodes

if TYPE_CHECKING:
    from ..trace import Trace

LOAD = {"kind": "job_path"}
JOIN = len(cp.EDGE_KINDS)  # the kind of a collective's edges between ranks
EDGE_KINDS = (*cp.EDGE_KINDS, "collective")
WHOLE = -1  # the step key of a trace without ProfilerSteps (its whole span)


@dataclass
class RankGraph:
    """One rank's graph of one step as plain arrays (absolute ns, the rank's clock): ``coll_event`` (per
    collectives row, its event; -1: none), the replay model (a verdict's part, ``replay_part``: its ports
    instead); then (None in a verdict's part) nodes, edges and events as ``critical_path.Graph``, ``bind_ns``
    (where a UI arrow binds), ``ev["name"]`` codes into ``RankPart.names``."""

    start: int
    end: int
    coll_event: np.ndarray
    model: replay.Model | None = None  # the step's replay model (absolute ns)
    picked: dict | None = None  # per ``--scale`` label: the events it picks (bool per event)
    inferred: dict | None = None  # the waits its graph inferred (``critical_path.Graph``)
    node_ts: np.ndarray | None = None
    node_order: np.ndarray | None = None
    node_lane: np.ndarray | None = None
    bind_ns: np.ndarray | None = None
    src: np.ndarray | None = None
    dst: np.ndarray | None = None
    weight: np.ndarray | None = None
    kind: np.ndarray | None = None
    event: np.ndarray | None = None
    ev: dict | None = None
    ports: Ports | None = None  # a verdict's part: the model reduced to its collectives


class Packed(Mapping):
    """A rank's graphs by step, each kept pickled and zstd-compressed until asked for: a job verdict holds
    every rank's steps but replays one step at a time, so its memory holds one step's graphs unpacked."""

    bare = False  # (``without_models``)

    def __init__(self, graphs: dict) -> None:
        import pickle

        import zstandard

        pack = zstandard.ZstdCompressor().compress
        self.packed = {k: pack(pickle.dumps(g, protocol=5)) for k, g in graphs.items()}

    def __getitem__(self, step: int) -> RankGraph:
        import pickle

        import zstandard

        g = pickle.loads(zstandard.ZstdDecompressor().decompress(self.packed[step]))
        return dataclasses.replace(g, model=None, picked=None) if self.bare else g

    def __contains__(self, step: object) -> bool:  # (Mapping's would unpack the graph)
        return step in self.packed

    def __iter__(self):
        return iter(self.packed)

    def only(self, step: int | None) -> Packed:
        """The graph of ``step`` alone (None: every one), still packed."""
        out = Packed({})
        out.packed, out.bare = {k: g for k, g in self.packed.items() if step in (None, k)}, self.bare
        return out

    def without_models(self) -> Packed:
        """The same graphs, each unpacked without its replay model and picks."""
        out = self.only(None)
        out.bare = True
        return out

    def __len__(self) -> int:
        return len(self.packed)


@dataclass
class RankPart:
    """What one rank's task returns: its collectives (``colls`` and ``steps`` only) and its
    graph per step."""

    tables: RankTables
    graphs: Mapping[int, RankGraph]  # (``Packed``)
    names: np.ndarray | None = None  # the event names the graphs' ``ev["name"]`` codes number


def rank_part(trace: Trace, rank: int | None = None, scales: tuple | None = None) -> RankPart:
    """One rank's ``RankPart`` (one load of kind ``LOAD``), picklable: nothing of the engine; its graphs
    packed (a job holds every rank's, its replay unpacks one step's at a time). ``scales``: with each step's
    replay model and, for each (``replay.Scale``), the events it picks (None: no models)."""
    tables = rank_tables(trace, causes=False)  # the path needs no cause windows
    if tables.rank is None:
        tables.rank = rank
    part = _part(trace, tables, cp.step_windows(trace) or {WHOLE: cp.window(trace)}, scales, True)
    return dataclasses.replace(part, graphs=Packed(part.graphs))


def replay_part(trace: Trace, tables: RankTables, step: int | None = None) -> RankPart:
    """A job verdict's part of one rank (``job_replay.without_stragglers``): each step's (or ``step``'s)
    collectives in its graph and its replay model reduced to them (``job_ports``), no model: a few numbers."""
    windows = cp.step_windows(trace) or {WHOLE: cp.window(trace)}
    part = _part(trace, tables, {k: w for k, w in windows.items() if step in (None, k)}, (), False)
    return dataclasses.replace(part, graphs=Packed({k: _ported(g) for k, g in part.graphs.items()}))


def _ported(g: RankGraph) -> RankGraph:
    """A verdict's graph of a step: ``g``'s window, where its collectives are, its model's ports."""
    return RankGraph(g.start, g.end, g.coll_event, ports=ports(g.model, g.coll_event))


def whole_part(trace: Trace, tables: RankTables) -> tuple[RankPart, RankPart]:
    """Every step's graph with its replay model and the path's arrays, on ``tables`` (with cause
    windows), and its ``replay_part``, both packed: ``rank_part`` without scales and ``replay_part`` of
    any step are views of them (``as_rank_part``, ``as_replay_part``), made without unpacking a graph."""
    whole = _part(trace, tables, cp.step_windows(trace) or {WHOLE: cp.window(trace)}, (), True)
    replay = RankPart(tables, Packed({k: _ported(g) for k, g in whole.graphs.items()}))
    return dataclasses.replace(whole, graphs=Packed(whole.graphs)), replay


def as_replay_part(whole: tuple[RankPart, RankPart], step: int | None = None) -> RankPart:
    """``replay_part`` (of ``step``, None: every step's) from the ``whole_part`` of the same trace."""
    replay = whole[1]
    return dataclasses.replace(replay, graphs=replay.graphs.only(step))


def as_rank_part(whole: tuple[RankPart, RankPart], rank: int | None, models: bool) -> RankPart:
    """``rank_part`` with no scales (``models``: ``scales=()``, else None) from the ``whole_part`` of the same
    trace: its tables without the cause windows, which the path does not read."""
    part = whole[0]
    tables = dataclasses.replace(part.tables, windows=None)
    if tables.rank is None:
        tables.rank = rank
    return RankPart(tables, part.graphs if models else part.graphs.without_models(), part.names)


def _part(trace: Trace, tables: RankTables, windows: dict, scales: tuple | None, path: bool
          ) -> RankPart:
    """``tables`` and the graph of each of ``windows`` (with replay models unless ``scales`` is None; with
    the path's arrays if ``path``)."""
    base = trace.base_ns
    ev = cp.events(trace)
    if path:  # the GPU ops' names read once, not again for each window's graph
        unread = np.flatnonzero(ev["name"] == None)  # noqa: E711  (an object column)
        ev["name"][unread] = cp.names(trace, ev["id"][unread])
    colls = tables.colls
    key_ts = colls["ts"].to_numpy(np.int64) - base if len(colls) else np.empty(0, np.int64)
    graphs = {}
    codes: dict = {}  # each name once per rank (kernel names run to kilobytes)
    for k, win in windows.items():
        g = cp.build(ev, win)
        e = g.ev
        gpu = np.flatnonzero(e["gpu"])
        at = {(int(t), s): int(i) for t, s, i in zip(e["ts"][gpu].tolist(),
                                                     e["stream"][gpu].tolist(), gpu.tolist())}
        coll_event = np.array([at.get((int(t), int(s) if s == s and s is not None else -1), -1)
                               for t, s in zip(key_ts.tolist(), colls["stream"].tolist())],
                              np.int64)
        graphs[k] = rg = RankGraph(win.start + base, win.end + base, coll_event)
        if scales is not None:
            rg.model = replay.model(g, win).shifted(base).compact()
        if not path:
            continue
        nodes = np.arange(len(g.node_ts))
        names = e["name"]  # (every GPU op's read above)
        if scales is not None:
            rg.picked = {s.label: replay.selected(g.ev, names, s.selector) for s in scales}
        rg.inferred = dict(g.inferred)
        rg.node_ts, rg.node_order, rg.node_lane = g.node_ts + base, g.node_order, g.node_lane
        rg.bind_ns = cp.bind_points(trace, g, nodes) + base if len(nodes) else nodes
        rg.src, rg.dst, rg.weight, rg.kind, rg.event = g.src, g.dst, g.weight, g.kind, g.event
        rg.ev = {"gpu": e["gpu"].astype(bool), "memory": e["memory"], "waiting": e["waiting"],
                 "pid": e["pid"], "tid": e["tid"], "dur": e["dur"].astype(np.int64),
                 "name": np.fromiter((codes.setdefault(x, len(codes)) for x in names.tolist()),
                                     np.int64, len(names))}
    table = np.empty(len(codes), object)
    table[:] = list(codes)
    return RankPart(tables, graphs, table if path else None)


def keyed(done: dict) -> dict[int, RankPart]:
    """Each rank's ``RankPart`` ({file's rank: part}, as the job runner gives them) by its rank:
    the file's, else the trace's, else 0."""
    co.ranked({r: part.tables for r, part in done.items()})  # (sets each one's rank)
    return {part.tables.rank: part for part in done.values()}


@dataclass
class JobPath:
    """One step's path across ranks: ``edges`` (columns as ``critical_path.Result.edges`` plus ``rank``,
    ``src_bind``, ``dst_bind``; the timing path's also ``idle_kind``, ``idle_event``: an idle piece's named
    cause, or None), its length, the step's window (job clock)."""

    step: int | None
    window: cp.Window
    edges: dict
    length: int
    inferred: dict = dataclasses.field(default_factory=dict)  # over the ranks' graphs

    def pieces(self) -> dict:
        """The step cut along the path (``critical_path.Result.pieces``), with each piece's
        rank (-1 outside the path)."""
        p = cp.Result(self.window, None, self.edges, self.length, np.empty(0)).pieces()
        on = len(self.edges["weight"]) > 0  # (else one piece: the step, idle)
        at = np.maximum(p["edge"], 0)
        p["rank"] = np.where(p["edge"] >= 0, self.edges["rank"][at] if on else -1, -1)
        p["kind"] = np.where(p["category"] == cp.IDLE, cp.IDLE, np.array(EDGE_KINDS, object)[
            self.edges["kind"][at]] if on else cp.IDLE).astype(object)
        p["event"] = np.where(p["category"] == cp.IDLE, None,
                              self.edges["event_name"][at] if on else None).astype(object)
        if "idle_kind" in self.edges and on:  # idle with a named cause (``job_timing``)
            named = (p["edge"] >= 0) & (self.edges["idle_kind"][at] != None)  # noqa: E711
            p["kind"][named] = self.edges["idle_kind"][at][named]
            p["event"][named] = self.edges["idle_event"][at][named]
        return p


def match_parts(parts: dict[int, RankPart]) -> co.Matched:
    """The collectives of every rank matched, the clocks aligned."""
    return co.align(co.match([parts[r].tables for r in sorted(parts)]))


def join(parts: dict[int, RankPart], matched: co.Matched, step: int) -> JobPath | None:
    """The path of ``step`` over every rank that has it (None: no rank has it)."""
    ranks, gs, shift = step_graphs(parts, matched, step)
    if not ranks:
        return None
    node_at = np.cumsum([0] + [len(g.node_ts) for g in gs])
    ev_at = node_at // 2
    ts = np.concatenate([g.node_ts - s for g, s in zip(gs, shift)])
    order = np.concatenate([g.node_order + 8 * node_at[i] for i, g in enumerate(gs)])
    lane_at = np.cumsum([0] + [int(g.node_lane.max(initial=0)) + 1 for g in gs])
    lane = np.concatenate([g.node_lane + lane_at[i] for i, g in enumerate(gs)])
    src_all = np.concatenate([g.src + node_at[i] for i, g in enumerate(gs)])
    dst_all = np.concatenate([g.dst + node_at[i] for i, g in enumerate(gs)])
    weight = np.concatenate([g.weight for g in gs])
    event = np.concatenate([np.where(g.event >= 0, g.event + ev_at[i], -1) for i, g in enumerate(gs)])
    j_src, j_dst, j_w = _joins(matched, ranks, gs, node_at, ts)
    # a member's own kernel weighs its transfer only (its wait is for the others' arrival)
    span_into = span_into_nodes(len(ts), src_all, dst_all, event)
    own = (j_src + 1 == j_dst) & (span_into[j_dst] >= 0)
    weight[span_into[j_dst[own]]] = np.minimum(weight[span_into[j_dst[own]]], j_w[own])
    cross = ~own
    src_all = np.r_[src_all, j_src[cross]]
    dst_all = np.r_[dst_all, j_dst[cross]]
    weight = np.r_[weight, j_w[cross]]
    kind_all = np.r_[np.concatenate([g.kind for g in gs]), np.full(int(cross.sum()), JOIN, np.int64)]
    event_all = np.r_[event, j_dst[cross] // 2]
    path = dag.longest_path(dag.Dag(ts, order, src_all, dst_all, weight, lane))
    s, d = src_all[path], dst_all[path]
    edges = path_edges(parts, ranks, gs, shift, s, d, ts[s], ts[d], weight[path],
                       kind_all[path], event_all[path])
    return JobPath(None if step == WHOLE else step, step_window(gs, shift, step), edges,
                   int(edges["weight"].sum()), step_inferred(gs))


def path_edges(parts: dict[int, RankPart], ranks: list[int], gs: list[RankGraph],
               shift: list[int], src: np.ndarray, dst: np.ndarray, ts: np.ndarray,
               end: np.ndarray, weight: np.ndarray, kind: np.ndarray, event: np.ndarray
               ) -> dict:
    """A path's edges (joined node numbering; ``event`` -1: the destination's) as ``JobPath.edges``: event,
    rank, pid, tid, both ends and their bind times (job clock), category."""
    ev = {k: np.concatenate([g.ev[k] for g in gs]) for k in gs[0].ev if k != "name"}
    ev["name"] = np.concatenate([parts[r].names[g.ev["name"]] for r, g in zip(ranks, gs)])
    ev_rank = np.repeat(ranks, [len(g.node_ts) // 2 for g in gs])
    bind = np.concatenate([g.bind_ns - x for g, x in zip(gs, shift)])
    shown = np.where(event >= 0, event, dst // 2)
    names = ev["name"][shown]
    return {"src_node": src, "dst_node": dst, "ts": ts, "end": end, "weight": weight,
            "kind": kind, "event": shown, "event_name": names, "pid": ev["pid"][shown],
            "tid": ev["tid"][shown], "rank": ev_rank[shown],
            "src_rank": ev_rank[src // 2], "dst_rank": ev_rank[dst // 2],
            "src_pid": ev["pid"][src // 2], "src_tid": ev["tid"][src // 2],
            "dst_pid": ev["pid"][dst // 2], "dst_tid": ev["tid"][dst // 2],
            "src_dur": ev["dur"][src // 2], "dst_dur": ev["dur"][dst // 2],
            "src_bind": bind[src], "dst_bind": bind[dst],
            "category": cp.category_of(SimpleNamespace(ev=ev), kind, shown, names)}


def step_window(gs: list[RankGraph], shift: list[int], step: int) -> cp.Window:
    """A job step: the first rank's step start to the last rank's step end (job clock)."""
    return cp.Window(min(g.start - x for g, x in zip(gs, shift)),
                     max(g.end - x for g, x in zip(gs, shift)),
                     "whole trace" if step == WHOLE else f"ProfilerStep#{step}")


def step_inferred(gs: list[RankGraph]) -> dict:
    """The waits the ranks' graphs inferred, summed over the ranks."""
    out: dict = {}
    for g in gs:
        for what, n in (g.inferred or {}).items():
            out[what] = out.get(what, 0) + n
    return out


def step_graphs(parts: dict[int, RankPart], matched: co.Matched, step: int
                ) -> tuple[list[int], list[RankGraph], list[int]]:
    """The ranks that have ``step`` (in order), their graphs of it, and each one's clock
    offset (ns: its times minus this are the job clock's)."""
    ranks = [r for r in sorted(parts) if step in parts[r].graphs]
    off = matched.offsets()
    return ranks, [parts[r].graphs[step] for r in ranks], [int(off.get(r, 0)) for r in ranks]


def members(matched: co.Matched, ranks: list[int], gs: list[RankGraph], node_at: np.ndarray
            ) -> list[np.ndarray]:
    """Per matched instance of this step with two members or more: the start nodes of its
    kernels (joined numbering: rank ``ranks[i]``'s nodes from ``node_at[i]``)."""
    a = matched.arrivals[matched.arrivals["rank"].isin(ranks).to_numpy()]
    where = {r: i for i, r in enumerate(ranks)}
    i_of = a["rank"].map(where).to_numpy(np.int64)
    e = np.array([gs[i].coll_event[row] for i, row in zip(i_of.tolist(), a["row"].tolist())],
                 np.int64)
    on = e >= 0
    start = node_at[i_of[on]] + 2 * e[on]
    iid = a["iid"].to_numpy(np.int64)[on]
    o = np.argsort(iid, kind="stable")
    iid, start = iid[o], start[o]
    cut = np.flatnonzero(np.r_[True, iid[1:] != iid[:-1]]) if len(iid) else iid
    groups = [start[lo:hi] for lo, hi in zip(cut.tolist(), np.r_[cut[1:], len(iid)].tolist())]
    return [m for m in groups if len(m) >= 2]


def instance(ts: np.ndarray, te: np.ndarray, own: bool = False) -> tuple[np.ndarray, int, tuple]:
    """A matched instance's joins from its members' kernel starts ``ts`` and ends ``te``: each end's transfer
    (end minus last arrival, at least 0: a join's weight, never above the time since any start), the median
    arrival's member, and the forward joins' (start, end) members (a member's own kernel: if ``own``)."""
    return (*arrival(ts, te), pairs(ts, te, own))


def arrival(ts: np.ndarray, te: np.ndarray) -> tuple[np.ndarray, int]:
    """``instance``'s transfers and median arrival's member."""
    return np.maximum(te - ts.max(), 0), int(np.argsort(ts, kind="stable")[(len(ts) - 1) // 2])


def pairs(ts: np.ndarray, te: np.ndarray, own: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``instance``'s forward joins: (start, end) members, an end at or after the start."""
    return np.nonzero((te >= ts[:, None]) & (own | ~np.eye(len(ts), dtype=bool)))


def _joins(matched, ranks, gs, node_at, ts):
    """(src, dst, weight) of every matched instance's forward joins in this step (``instance``), each
    member's own kernel too."""
    found = []
    for m in members(matched, ranks, gs, node_at):
        transfer, _, (p, q) = instance(ts[m], ts[m + 1], own=True)
        found.append((m[p], m[q] + 1, transfer[q]))
    return columns(found)


def columns(rows: list[tuple]) -> tuple:
    """Rows of arrays (e.g. each instance's src, dst, weight) joined column by column (none: three empty)."""
    return tuple(np.concatenate(c) for c in zip(*rows)) if rows else (np.empty(0, np.int64),) * 3


def step_keys(parts: dict[int, RankPart], step: int | None = None) -> list[int]:
    """The steps of the job (every rank's, in order), or ``step`` alone."""
    from ..errors import TraceaugError

    found = sorted({k for p in parts.values() for k in p.graphs})
    if step is None:
        return found
    if step not in found:
        have = ", ".join(str(k) for k in found if k != WHOLE) or "none"
        where = Path(next(iter(parts.values())).tables.path).parent if parts else "job"
        raise TraceaugError(f"{where}: no rank has ProfilerStep#{step} (steps: {have})")
    return [step]


# ----- tables -----------------------------------------------------------------------------------
def segments(p: JobPath) -> pd.DataFrame:
    """The step cut along the path, consecutive pieces of one rank, event and category merged: ``step, rank,
    ts_ns, end_ns, weight_ns`` (job clock; summing to the step), ``kind, category, event``."""
    q = p.pieces()
    n = len(q["ts"])
    new = np.ones(n, bool)
    if n:
        new[1:] = ((q["rank"][1:] != q["rank"][:-1]) | (q["category"][1:] != q["category"][:-1])
                   | (q["event"][1:] != q["event"][:-1]) | (q["kind"][1:] != q["kind"][:-1]))
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, n - 1] if len(first) else first
    return pd.DataFrame({"step": p.step, "rank": q["rank"][first], "ts_ns": q["ts"][first],
                         "end_ns": q["end"][last],
                         "weight_ns": q["end"][last] - q["ts"][first],
                         "kind": q["kind"][first], "category": q["category"][first],
                         "event": q["event"][first]})


def summary(p: JobPath) -> dict:
    """Per category (idle included: they sum to the step) and per rank (its time on the
    path, idle apart), with shares of the step."""
    seg = segments(p)
    total = max(p.window.end - p.window.start, 1)
    cats = seg.groupby("category")["weight_ns"].sum()
    cat_ns = [int(cats.get(c, 0)) for c in cp.CATEGORIES]
    timed = seg[seg["category"] != cp.IDLE]
    by_rank = timed.groupby("rank")["weight_ns"].sum()
    return {"step": p.step, "window": p.window.label, "start_ns": p.window.start,
            "end_ns": p.window.end, "step_ns": p.window.end - p.window.start,
            "length_ns": p.length, "inferred": dict(p.inferred),
            "categories": {"category": list(cp.CATEGORIES), "ns": cat_ns,
                           "share_pct": [100 * v / total for v in cat_ns]},
            "ranks": {"rank": [int(r) for r in by_rank.index],
                      "ns": [int(v) for v in by_rank.tolist()],
                      "share_pct": [100 * v / total for v in by_rank.tolist()]}}
