"""``traceaug critical-path``: the path as flow arrows along its jumps (HTA's edges; ``--all-edges``: all,
off-path ones in ``critical_path_graph``) and a "Critical path" lane with a slice per timed segment
(``--roofline``: a GPU op's with its % of roofline where ``efficiency`` models the op that launched it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import orjson

from ..analysis import critical_path as cp
from ..analysis.efficiency import of_launches
from ..analysis.steps import shorten
from .events import async_slice_events, flow_events, flow_ids, process_name_events
from .pipeline import Rewriter

if TYPE_CHECKING:
    from ..trace import Trace

ARROW_KINDS = (cp.DEPENDENCY, cp.LAUNCH, cp.SYNC, cp.GPU_SYNC, cp.STREAM_WAIT)
CATEGORY = "critical_path"
GRAPH_CATEGORY = "critical_path_graph"
LANE_NAME = "Critical path"
LANE_ID = "0xc0"  # the lane's async id (process-scoped: any value of the lane's own process)


def compute(trace: Trace, options: dict) -> tuple[dict, list[bytes]]:
    """(summary data, events to splice): the path of the window ``options`` names."""
    gap_us = options.get("max_gap_us", cp.MAX_KERNEL_GAP_NS / 1000)
    result = cp.analyse(trace, options.get("step"), options.get("annotation"),
                        options.get("instance", 0), not options.get("hta_weights", False),
                        None if not gap_us else round(gap_us * 1000))
    summary = result.summary(options.get("top", 10))
    replays = result.replays  # a path through graph replays no capture explains: said so
    if replays.attributed < replays.replayed:
        summary["reliability"] = replays.line()
    events = lane_events(trace, result, bool(options.get("roofline"))) + \
        arrow_events(trace, result, options.get("all_edges", False))
    summary["events"] = len(events)
    return summary, events


# ----- the lane ---------------------------------------------------------------------------------
def segments(result: cp.Result) -> dict[str, np.ndarray]:
    """The path's timed pieces but idle, consecutive ones of one event and category merged: ``pid, ts, dur,
    name, category`` (engine ns; names shortened: a kernel's full name can take kilobytes)."""
    e, p = result.edges, result.pieces()
    on = p["category"] != cp.IDLE
    at = p["edge"][on]
    start, end, cat = p["ts"][on], p["end"][on], p["category"][on]
    ev, pid, names = e["event"][at], e["pid"][at], e["event_name"][at]
    new = np.ones(len(at), bool)
    new[1:] = (ev[1:] != ev[:-1]) | (cat[1:] != cat[:-1]) | (start[1:] != end[:-1])
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(at) - 1] if len(first) else first
    short = {n: shorten(n) if isinstance(n, str) else str(n) for n in set(names[first].tolist())}
    return {"pid": pid[first], "ts": start[first], "dur": end[last] - start[first],
            "name": np.array([short[n] for n in names[first].tolist()], dtype=object),
            "category": cat[first], "event": ev[first]}


def lane_events(trace: Trace, result: cp.Result, roofline: bool = False) -> list[bytes]:
    """The "Critical path" lane: its own process, sorted first, one async track (one UI row for ``open`` to
    pin; a thread lane would be two nodes of one name, pinned twice) with a slice per segment."""
    seg = segments(result)
    args = lane_args(trace, result, seg, roofline) if len(seg["ts"]) else []
    return lane(seg, lane_pid(trace), LANE_NAME, trace.base_ns, args)


def lane(seg: dict[str, np.ndarray], pid: int, name: str, base_ns: int,
         args: list[bytes] | None = None) -> list[bytes]:
    """``lane_events``' lane of ``segments`` in process ``pid`` named ``name`` (ts ``base_ns`` later); each
    slice's args ``args`` (default: its category)."""
    if not len(seg["ts"]):
        return []
    if args is None:
        made = {c: orjson.dumps({"category": c}) for c in set(seg["category"].tolist())}
        args = [made[c] for c in seg["category"].tolist()]
    out = process_name_events([pid], name, sort_index=-1)
    return out + async_slice_events(pid, pid, seg["ts"], seg["dur"], seg["name"], CATEGORY,
                                    LANE_ID, args, base_ns=base_ns, track_name=name)


def lane_args(trace: Trace, result: cp.Result, seg: dict, roofline: bool) -> list[bytes]:
    """Each segment's args: its category; with ``roofline``, for a GPU op's own time the % of roofline and
    bound of the CPU op that launched it where ``efficiency`` models it (the load holds the shapes: kind
    ``sync_shapes``)."""
    ev = result.graph.ev
    gpu = ev["gpu"][seg["event"]].astype(bool) & np.isin(seg["category"], cp.GPU_WORK) & roofline
    at = seg["event"][gpu]
    found = of_launches(trace, ev["correlation"][at], ev["id"][at]) if gpu.any() else {}
    pct, bound = np.full(len(gpu), np.nan), np.full(len(gpu), "", dtype=object)
    if found:
        pct[gpu], bound[gpu] = found["roofline_pct"], found["bound"]
    keys = list(zip(seg["category"].tolist(), [None if p != p else p for p in np.round(pct, 2).tolist()],
                    bound.tolist(), strict=True))  # (None, not NaN: NaN keys never match)
    made: dict[tuple, bytes] = {}  # one dump per distinct value: each orjson result holds a ~4 KB buffer
    for key in set(keys):
        c, p, b = key
        made[key] = bytes(orjson.dumps({"category": c} if p is None else
                                       {"category": c, "roofline_pct": p, "bound": b}))
    return [made[key] for key in keys]


def lane_pid(trace: Trace) -> int:
    """A pid no process or thread of the trace uses, ignoring a lane of an earlier run: one above the largest
    below 2**31 - 2 (ids the UI reads as they are; Kineto's -1 arrives as 4294967295)."""
    limit = 2**31 - 2
    c = trace.columns(
        "SELECT MAX(v) AS v FROM (SELECT p.pid AS v FROM process p WHERE p.name IS NOT "
        f"'{LANE_NAME}' AND p.pid < {limit} UNION ALL SELECT t.tid FROM thread t LEFT JOIN "
        f"process p USING (upid) WHERE p.name IS NOT '{LANE_NAME}' AND t.tid < {limit})")
    top = c["v"][0] if len(c["v"]) else None
    return max(int(top) if top is not None and top == top else 0, 0) + 1


# ----- the arrows -------------------------------------------------------------------------------
def arrow_events(trace: Trace, result: cp.Result, all_edges: bool) -> list[bytes]:
    """Flow arrows along the path's jumps (and, with ``all_edges``, the graph's other ones)."""
    g = result.graph
    path = np.zeros(len(g.src), bool)
    path[result.path] = True
    on = np.isin(g.kind, ARROW_KINDS)
    chosen = np.flatnonzero(on if all_edges else on & path)
    chosen = chosen[_bindable(g, chosen)]
    if not len(chosen):
        return []
    src, dst = g.src[chosen], g.dst[chosen]
    src_ts, dst_ts = np.split(cp.bind_points(trace, g, np.r_[src, dst]), [len(src)])
    ev = g.ev
    cats = np.where(path[chosen], CATEGORY, GRAPH_CATEGORY)
    args = _arrow_args(g.kind[chosen], g.weight[chosen], path[chosen])
    ids = flow_ids(trace, len(chosen))
    out: list[bytes] = []
    for cat in (CATEGORY, GRAPH_CATEGORY):
        m = cats == cat
        if not m.any():
            continue
        out += flow_events(ev["pid"][src[m] // 2], ev["tid"][src[m] // 2], src_ts[m],
                           ev["pid"][dst[m] // 2], ev["tid"][dst[m] // 2], dst_ts[m], ids[m], cat,
                           CATEGORY, [a for a, k in zip(args, m.tolist()) if k],
                           base_ns=trace.base_ns)
    return out


def _arrow_args(kind: np.ndarray, weight: np.ndarray, critical: np.ndarray) -> list[bytes]:
    """Each arrow's args as JSON, ``{"type", "weight_us", "critical"}``: one template per kind
    and flag, the weights in one ``orjson.dumps``."""
    templates = {(k, c): orjson.dumps({"type": cp.EDGE_KINDS[k], "weight_us": 0.5, "critical": c}
                                      ).replace(b"0.5", b"%b") for k in set(kind.tolist())
                 for c in (False, True)}
    weights = orjson.dumps((weight / 1000).tolist())[1:-1].split(b",") if len(weight) else []
    return [templates[k, c] % w for k, c, w in zip(kind.tolist(), critical.tolist(), weights)]


def _bindable(g: cp.Graph, edges: np.ndarray) -> np.ndarray:
    """Edges both of whose events take time (an arrow cannot bind to an empty slice)."""
    ev = g.ev
    dur = ev["dur"].astype(np.int64)
    return (dur[g.src[edges] // 2] > 0) & (dur[g.dst[edges] // 2] > 0)


REWRITER = Rewriter("critical-path", "sync", compute)
MARKED = Rewriter("critical-path", "sync_shapes", compute)  # --roofline: the CPU ops' shapes loaded too
