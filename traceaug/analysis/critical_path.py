"""The critical path of one trace window: HTA's dependency graph (FIELD_NOTES §5) plus the waits it misses,
longest path on numpy edge arrays. Times are engine ns clipped to the window, so the path never leaves it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import TraceaugError
from ..sorted_ints import among, sorted_unique
from ..sql_text import literal, literal_list
from . import blocking, dag, graph_replay, stream_wait
from .serving import found as served
from .steps import check_step, is_comm, steps
from .tables import Columns, frame, objects, position_in, sorted_codes, take

if TYPE_CHECKING:
    from ..trace import Trace

CPU_CATEGORIES = ("cpu_op", "Operator", "cuda_runtime", "Runtime", "cuda_driver")
GPU_CATEGORIES = ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset")
SYNC_CATEGORY = "cuda_sync"
MEMORY_CATEGORIES = ("gpu_memcpy", "Memcpy", "gpu_memset", "Memset")
# HTA's bound on a kernel -> next kernel edge (FIELD_NOTES §5; HTA 0.5.0's code has none, but
# the overlay in traces/golden/ marks exactly the path this bound gives).
MAX_KERNEL_GAP_NS = 1_500_000
# The calls whose own time HTA 0.6.1 weighs 0 (its BLOCKING_SYNC_CALLS, CUDA names only): its list
# has cudaMemcpyAsync too, but HTA counts that call's time all the same, through its runtime-lock
# edge (start -> end of a cudaLaunchKernel / cudaMemcpyAsync / cudaHostAlloc).
BLOCKING_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery", "cudaEventSynchronize",
    "cudaMemcpy",
})
DEVICE_SYNC_CALLS = ("cudaDeviceSynchronize", "hipDeviceSynchronize")

# Edge kinds: HTA's five types, its sync type split into GPU -> CPU and GPU -> GPU, and
# beyond HTA a GPU -> GPU wait no cuda_sync event records (``stream_wait``).
SPAN, DEPENDENCY, LAUNCH, KERNEL_GAP, SYNC, GPU_SYNC, STREAM_WAIT = range(7)
EDGE_KINDS = ("span", "dependency", "launch_delay", "kernel_gap", "sync", "gpu_sync",
              "stream_wait")
CATEGORIES = ("cpu", "blocked", "gpu_compute", "gpu_communication", "gpu_memory", "launch_delay",
              "kernel_gap", "sync_wait", "idle")
IDLE = "idle"  # time of the window no recorded event on the path explains
# a blocking call's wait that is no work on the path: its transfer, or what no recorded event explains
BLOCKED = "blocked"
GPU_WORK = ("gpu_compute", "gpu_communication", "gpu_memory")


@dataclass(frozen=True)
class Window:
    """The analysed time range (engine ns) and what chose it."""

    start: int
    end: int
    label: str


def window(trace: Trace, step: int | None = None, annotation: str | None = None,
           instance: int = 0) -> Window:
    """One ProfilerStep, the ``instance``-th slice whose name contains ``annotation`` (HTA's
    ``annotation`` / ``instance_id``), or the whole trace."""
    if step is not None:
        windows = step_windows(trace)
        check_step(trace.path, np.array(list(windows), np.int64), step, served(trace))
        return windows[step]
    if annotation is not None:
        c = trace.columns("SELECT ts, dur FROM slice WHERE dur >= 0 AND instr(name, "
                          f"{literal(annotation)}) > 0 ORDER BY ts, id")
        if instance < 0 or instance >= len(c["ts"]):
            raise TraceaugError(f"{trace.path}: annotation {annotation!r} has {len(c['ts'])} "
                                f"instance(s); no instance {instance}")
        s, d = int(c["ts"][instance]), int(c["dur"][instance])
        return Window(s, s + d, f"{annotation} #{instance}")
    span = trace.span()
    if span is None:
        raise TraceaugError(f"{trace.path}: no complete events: no critical path")
    return Window(span[0], span[1], "whole trace")


def step_windows(trace: Trace) -> dict[int, Window]:
    """Every ProfilerStep's window by its number, in time order (none: empty)."""
    st = steps(trace)
    return {int(k): Window(int(s), int(s + d), f"ProfilerStep#{k}")
            for k, s, d in zip(st["step"].tolist(), st["ts"].tolist(), st["dur"].tolist())}


# Event groups (``events``' ``grp``) and sync kinds (``sync``).
CPU_OP, RUNTIME, GPU_OP, SYNC_EVENT = range(4)
SYNC_KINDS = ("Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event")
ARGS = {"correlation": "args.correlation", "correlation_id": "args.correlation id",
        "device": "args.device", "stream": "args.stream", "wait_stream": "args.wait_on_stream",
        "wait_record": "args.wait_on_cuda_event_record_corr_id", "sync_kind": "args.cuda_sync_kind"}
_KERNELS = tuple(c for c in GPU_CATEGORIES if c not in MEMORY_CATEGORIES)
# The graph's slices, a query per group (cheaper than a CASE over the category per row): grp, a copy or set,
# which slices, columns beyond ``_BASE`` (no kernel names: kilobytes each; ``names`` reads the path's).
_BASE = ("id", "ts", "dur", "track_id", "IFNULL(arg_set_id, -1) AS arg_set_id")
_GROUPS = (
    (CPU_OP, 0, f"category IN {literal_list(CPU_CATEGORIES[:2])} AND dur > 0", ("depth", "name")),
    (RUNTIME, 0, f"category IN {literal_list(CPU_CATEGORIES[2:])} AND dur > 0", ("depth", "name")),
    (GPU_OP, 0, f"category IN {literal_list(_KERNELS)}", ()),
    (GPU_OP, 1, f"category IN {literal_list(MEMORY_CATEGORIES)}", ("name",)),  # "... Pageable ..."
    (SYNC_EVENT, 0, f"category = {literal(SYNC_CATEGORY)}", ("name",)),
)
# CPU events that take no time: never nodes, but a launch, sync or record call all the same.
_INSTANT_GROUPS = (
    (CPU_OP, 0, f"category IN {literal_list(CPU_CATEGORIES[:2])} AND dur <= 0", ()),
    (RUNTIME, 0, f"category IN {literal_list(CPU_CATEGORIES[2:])} AND dur <= 0", ()),
)


def events(trace: Trace) -> Columns:
    """The graph's slices, by id: ``id, ts, dur, depth, track_id, pid, tid`` (lanes folded), ``name``
    (None: unread), ``grp``, ``memory``, ``blocking``, ``device_sync``, ``sync`` (1 + SYNC_KINDS index, or 0),
    ``correlation, device, stream, wait_stream, wait_record`` (-1: none); zero-time CPU ops if correlated."""
    trace.include("traceaug.base")
    args = {col: _arg(trace, key, col == "sync_kind") for col, key in ARGS.items()}
    parts = [_slices(trace, *group) for group in _GROUPS]
    named = np.concatenate([p["arg_set_id"] for p in parts[2:]])  # by GPU ops and sync events
    wanted = sorted_unique(np.r_[_correlation(args, named), _lookup(*args["wait_record"], named)])
    for group in _INSTANT_GROUPS:
        p = _slices(trace, *group)
        parts.append(take(p, among(_correlation(args, p["arg_set_id"]), wanted[wanted >= 0])))
    c = take({key: np.concatenate([p[key] for p in parts]) for key in parts[0]},
             np.argsort(np.concatenate([p["id"] for p in parts]), kind="stable"))
    # pid and tid per track (a handful of rows), joined here rather than per row in the engine
    tracks = trace.columns("SELECT track_id, pid, tid FROM _traceaug_track")
    tr = _ints(tracks["track_id"], len(tracks["track_id"]))
    for key in ("pid", "tid"):
        c[key] = _lookup(*_sorted_by(tr, _ints(tracks[key], len(tr))), c["track_id"])
    sync = _sync_rows(c)
    c["correlation"] = _correlation(args, c["arg_set_id"])
    gpu_identity = (c["grp"] == GPU_OP) | (c["grp"] == SYNC_EVENT)
    for col in ("device", "stream"):  # GPU identity only where Kineto means it
        c[col] = np.where(gpu_identity, _lookup(*args[col], c["arg_set_id"]), -1)
    for col in ("wait_stream", "wait_record"):  # only sync events have them
        c[col] = np.full(len(c["id"]), -1, np.int64)
        c[col][sync] = _lookup(*args[col], c["arg_set_id"][sync])
    kind = _lookup(*args["sync_kind"], c["arg_set_id"][sync], True)
    kind = np.where(kind == None, c["name"][sync], kind)  # noqa: E711
    c["sync"] = np.zeros(len(c["id"]), np.int64)
    for code, k in enumerate(SYNC_KINDS, 1):
        c["sync"][sync[kind == k]] = code
    return c


def _slices(trace: Trace, grp: int, memory: int, where: str, extra: tuple[str, ...]) -> Columns:
    """One group of ``events``' rows (``_GROUPS``), without its args (depth 0 and name None
    where not read); ``blocking`` and ``device_sync`` from the names of runtime calls."""
    c = trace.columns(f"SELECT {', '.join(_BASE + extra)} FROM slice WHERE {where}")
    n = len(c["id"])
    out = {k: _ints(c[k], n) for k in ("id", "ts", "dur", "track_id", "arg_set_id")}
    out["depth"] = _ints(c["depth"], n) if "depth" in extra else np.zeros(n, np.int64)
    out["name"] = c["name"] if n and "name" in extra else np.full(n, None, object)
    out["grp"], out["memory"] = np.full(n, grp, np.int64), np.full(n, memory, np.int64)
    out["blocking"], out["device_sync"] = np.zeros(n, np.int64), np.zeros(n, np.int64)
    if grp == RUNTIME and "name" in extra:
        names = out["name"].tolist()
        out["blocking"] = np.fromiter((x in BLOCKING_CALLS for x in names), np.int64, n)
        out["device_sync"] = np.fromiter((x in DEVICE_SYNC_CALLS for x in names), np.int64, n)
    return out


def _arg(trace: Trace, key: str, text: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One arg of every arg set that has it: (arg set ids, sorted; their values: int64 with
    -1 for a non-integer, or objects when ``text``)."""
    a = trace.columns(f"SELECT arg_set_id, {'string_value' if text else 'int_value'} AS v "
                      f"FROM args WHERE key = {literal(key)}")
    n = len(a["arg_set_id"])
    keys, values = _sorted_by(_ints(a["arg_set_id"], n), a["v"] if text else _ints(a["v"], n))
    return keys, values if n else np.empty(0, object if text else np.int64)


def _correlation(args: dict, arg_set_id: np.ndarray) -> np.ndarray:
    corr = _lookup(*args["correlation"], arg_set_id)
    return np.where(corr >= 0, corr, _lookup(*args["correlation_id"], arg_set_id))


def _sorted_by(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    o = np.argsort(keys, kind="stable")
    return keys[o], values[o]


def _lookup(keys: np.ndarray, values: np.ndarray, at: np.ndarray, text: bool = False) -> np.ndarray:
    """``values`` (by sorted ``keys``) at each of ``at``: int64 (-1 when missing) or objects."""
    out = np.full(len(at), None, dtype=object) if text else np.full(len(at), -1, np.int64)
    k = position_in(keys, at)
    hit = (k >= 0) & (at >= 0)
    if text:
        out[hit] = np.asarray(values, dtype=object)[k[hit]]
    else:
        out[hit] = _ints(np.asarray(values)[k[hit]], int(hit.sum()))
    return out


def names(trace: Trace, ids: np.ndarray) -> np.ndarray:
    """The names of the slices ``ids`` (objects, in that order)."""
    want = sorted_unique(ids)
    if not len(want):
        return np.empty(0, dtype=object)
    c = trace.columns(f"SELECT id, name FROM slice WHERE id IN ({', '.join(map(str, want.tolist()))})")
    found = dict(zip(c["id"].tolist(), c["name"].tolist()))
    return objects([found.get(i) for i in ids.tolist()])


def _first_index(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query, the index of the first row of ``keys`` (int64, -1 none) equal to it,
    else -1 (a join on the first match, as a launch to its GPU ops)."""
    valid = np.flatnonzero(keys >= 0)
    uniq, first = np.unique(keys[valid], return_index=True)
    at = position_in(uniq, queries)  # (every key is >= 0: a negative query is never found)
    return np.where(at >= 0, valid[first[at]], -1) if len(uniq) else at


def _ints(column: np.ndarray, n: int) -> np.ndarray:
    """int64 with -1 for NULL / non-numbers (Kineto writes ids as ints, 2021 ones as text)."""
    if len(column) != n:
        return np.full(n, -1, np.int64)
    if column.dtype.kind in "biu":
        return column.astype(np.int64)
    if column.dtype.kind == "f":
        return np.where(np.isnan(column), -1, column).astype(np.int64)
    out = np.full(n, -1, np.int64)
    for i, v in enumerate(column.tolist()):
        try:
            if v is not None and v == v:
                out[i] = int(v)
        except (TypeError, ValueError):
            pass
    return out


@dataclass
class Graph:
    """Nodes 2i (start) and 2i+1 (end) of event i; edges as arrays. ``event`` is the event an
    edge's time is attributed to (-1: none), ``ev`` the events' columns."""

    ev: Columns
    node_ts: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    kind: np.ndarray
    event: np.ndarray
    skipped: int  # edges dropped because they would run backwards in time (clock skew)
    node_order: np.ndarray  # tie-break among nodes of one time (a topological order of most)
    node_lane: np.ndarray  # each node's event's track: nodes that mostly follow one another
    inferred: dict  # waits of blocking calls no cuda_sync event gave: kind -> calls


def build(ev: Columns, win: Window, sync_wait: bool = True,
          max_gap_ns: int | None = MAX_KERNEL_GAP_NS, queued: bool = False) -> Graph:
    """HTA's dependency graph over the events of ``win`` (``events`` columns); ``sync_wait`` False weighs sync
    edges 0, as HTA does; ``max_gap_ns``: the longest kernel-to-kernel gap that is an edge (None: any);
    ``queued``: also the GPU ops launched before the window that run in it (what its calls may wait for)."""
    is_cpu = ev["grp"] <= RUNTIME
    is_gpu = ev["grp"] == GPU_OP
    ts, dur = ev["ts"].astype(np.int64), ev["dur"].astype(np.int64)
    # Launches: a CPU call sharing its correlation id with a GPU op (the first such call).
    launch = np.full(len(ts), -1, np.int64)
    launch[is_gpu] = _calls_by_corr(ev, is_cpu, ev["correlation"][is_gpu])

    # HTA's window: CPU events starting in it with dur > 0; GPU ops launched in it (beyond HTA, where
    # ``sync_wait``: with no launch in the trace, starting in it; every event clipped to the window).
    inside = (ts >= win.start) & (ts <= win.end)
    keep_cpu = is_cpu & inside & (dur > 0)
    if sync_wait:  # (one starting at the window's end would be clipped to no time, its end before its start)
        keep_cpu &= (ts < win.end) | (win.start == win.end)
    launched_in = np.where(launch >= 0, keep_cpu[np.maximum(launch, 0)], inside & sync_wait)
    if queued:
        launched_in |= ts + dur > win.start
    keep = keep_cpu | (is_gpu & (dur >= 0) & launched_in & ((ts <= win.end) | (not sync_wait)))
    idx = np.flatnonzero(keep)  # graph event i = row idx[i]
    pos = np.full(len(ts), -1, np.int64)
    pos[idx] = np.arange(len(idx))
    g = take(ev, idx)
    g["row"] = idx
    g["gpu"] = is_gpu[idx]
    g["launch"] = np.where(launch[idx] >= 0, pos[np.maximum(launch[idx], 0)], -1)
    hi = win.end if sync_wait else np.iinfo(np.int64).max
    start = np.clip(ts[idx], win.start, hi)
    end = np.clip(ts[idx] + np.maximum(dur[idx], 0), win.start, hi)
    node_ts = np.empty(2 * len(idx), np.int64)
    node_ts[0::2], node_ts[1::2] = start, end

    cpu_part = _cpu_edges(g, node_ts, hta=not sync_wait)
    inferred: dict = {}
    parts = [cpu_part[:5], _gpu_edges(g, ev, is_cpu, is_gpu, launch, pos, node_ts, max_gap_ns,
                                      inferred if sync_wait else None)]
    if sync_wait:  # beyond HTA: blocking calls wait for their GPU op without cuda_sync events
        parts.append(_blocking_waits(g, ev, is_cpu, pos, node_ts, inferred))
    # Ties at one time: GPU ends, then CPU points in their walk order, then GPU starts.
    node_order = np.arange(len(node_ts), dtype=np.int64) + 2 * len(node_ts) * np.where(
        np.arange(len(node_ts)) % 2 == 0, 2, 0)
    node_order[cpu_part[5]] = len(node_ts) + np.arange(len(cpu_part[5]))
    src, dst, kind, attributed, zero = (np.concatenate(col) for col in zip(*parts))
    weight = np.where(zero, 0, node_ts[dst] - node_ts[src])
    # A sync edge weighs the call's wait after it began and the last op it waited on ended.
    sync = np.flatnonzero(kind == SYNC)
    waited = np.roll(node_ts, 1)  # at an end node: its call's start
    np.maximum.at(waited, dst[sync], node_ts[src[sync]])
    weight[sync] = node_ts[dst[sync]] - waited[dst[sync]] if sync_wait else 0
    backwards = node_ts[dst] < node_ts[src]
    fwd = ~backwards
    # a call that waited for the GPU (a sync edge into its end; ``Result.pieces``: ``blocked``)
    g["waiting"] = np.zeros(len(g["gpu"]), bool)
    g["waiting"][dst[sync[fwd[sync]]] // 2] = sync_wait
    # (a weight never exceeds its edge's time: the rest of that time is idle on the path)
    weight = np.clip(weight, 0, node_ts[dst] - node_ts[src])
    return Graph(g, node_ts, src[fwd], dst[fwd], weight[fwd], kind[fwd],
                 attributed[fwd], int(backwards.sum()), node_order, np.repeat(g["track_id"], 2),
                 inferred)


def _blocking_waits(g: Columns, ev: Columns, is_cpu, pos, node_ts, inferred: dict):
    """Sync edges (GPU op end -> call end) of the calls ``blocking`` finds (copies and sets, stream / event
    syncs without a ``cuda_sync`` event); ``inferred`` gets how many calls of each kind."""
    calls = _calls_by_corr(ev, is_cpu, ev["correlation"][_sync_rows(ev)])
    covered = np.zeros(len(g["gpu"]), bool)
    at = pos[calls[calls >= 0]]
    covered[at[at >= 0]] = True
    c_src, c_dst, copies = blocking.copy_waits(g, node_ts)
    s_src, s_dst, syncs = blocking.sync_waits(g, node_ts, covered)
    device = int((g["device_sync"].astype(bool) & ~g["gpu"] & ~covered).sum())
    for key, n in (("blocking copies and sets (their own GPU op)", copies),
                   ("stream / event syncs without cuda_sync (the GPU op that ended last "
                    "while they ran)", syncs),
                   ("device syncs without cuda_sync (every stream)", device)):
        if n:
            inferred[key] = n
    src, dst = np.r_[c_src, s_src], np.r_[c_dst, s_dst]
    n = len(src)
    return src, dst, np.full(n, SYNC, np.int64), np.full(n, -1, np.int64), np.zeros(n, bool)


def _cpu_edges(g: Columns, node_ts: np.ndarray, hta: bool = True):
    """HTA's call-stack chain on every CPU thread: consecutive start / end points of nested ops, a zero-weight
    dependency between consecutive top-level ops; ``hta``: a blocking call's own time weighs 0."""
    cpu = np.flatnonzero(~g["gpu"])
    n = len(cpu)
    depth = g["depth"][cpu].astype(np.int64)
    track = g.get("stack", g["track_id"])[cpu].astype(np.int64)
    # Tokens: enter (start node) and exit (end node); at one time exits first, enters by
    # depth, exits deepest first: the order of a depth-first walk of the nesting.
    node = np.r_[2 * cpu, 2 * cpu + 1]
    enter = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    key = np.r_[depth, -depth]
    order = _sort_tokens(np.r_[track, track], node_ts[node], enter, key)
    node, enter = node[order], enter[order]
    tr = np.r_[track, track][order]
    open_after = np.cumsum(np.where(enter, 1, -1))  # every thread balances to 0
    a = np.flatnonzero(tr[:-1] == tr[1:])  # consecutive tokens of one thread
    b = a + 1
    top_end = open_after[a] == 0
    kind = np.where(top_end, DEPENDENCY, SPAN)
    ev_a, ev_b = node[a] // 2, node[b] // 2
    blocks = g["blocking"][ev_b] == 1
    zero = top_end | (~enter[b] & blocks & hta)
    # HTA's attribution: (start, *) -> the source event, (end, end) -> the destination,
    # (end, start) -> the op enclosing both.
    parent = _cpu_parents(node, enter, open_after, len(g["gpu"]))
    attributed = np.where(enter[a], ev_a, np.where(~enter[b], ev_b, parent[ev_a]))
    attributed = np.where(top_end, -1, attributed)
    return node[a], node[b], kind, attributed, zero, node  # node: the walk's order


def _sort_tokens(track: np.ndarray, ts: np.ndarray, enter: np.ndarray, key: np.ndarray) -> np.ndarray:
    """``np.lexsort((key, enter, ts, track))`` by one stable sort of the four packed into an int64 when their
    ranges fit (faster than lexsort)."""
    if not len(ts):
        return np.empty(0, np.int64)
    parts = [(track - track.min(), int(track.max() - track.min()) + 1),
             (ts - ts.min(), int(ts.max() - ts.min()) + 1),
             (enter.astype(np.int64), 2), (key - key.min(), int(key.max() - key.min()) + 1)]
    if np.prod([float(size) for _, size in parts]) >= 2.0**62:
        return np.lexsort((key, enter, ts, track))
    packed = parts[0][0]
    for values, size in parts[1:]:
        packed = packed * size + values
    return np.argsort(packed, kind="stable")


def _cpu_parents(node: np.ndarray, enter: np.ndarray, open_after: np.ndarray, n: int) -> np.ndarray:
    """Each CPU event's innermost enclosing CPU event (-1 at top level), from the token walk:
    the last enter one level up before its own enter."""
    parent = np.full(n, -1, np.int64)
    at = np.flatnonzero(enter)
    level = open_after[at] - 1  # open events before it
    ev = node[at] // 2
    for lv in range(1, int(level.max(initial=0)) + 1):
        mine, up = at[level == lv], at[level == lv - 1]
        k = np.searchsorted(up, mine) - 1
        parent[ev[level == lv]] = np.where(k >= 0, node[up[np.maximum(k, 0)]] // 2, -1)
    return parent


def _gpu_edges(g: Columns, ev: Columns, is_cpu, is_gpu, launch_all, pos, node_ts, max_gap_ns,
               inferred: dict | None = None):
    """Launch, kernel-gap and sync edges (HTA's ``_construct_graph_from_kernels``); with ``inferred`` (a dict
    counting what was inferred) also the cross-stream waits of ``stream_wait``."""
    out = []

    def add(s, d, k, e, z):
        s = np.asarray(s, np.int64)
        out.append((s, np.asarray(d, np.int64), np.full(len(s), k, np.int64),
                    np.broadcast_to(np.asarray(e, np.int64), s.shape),
                    np.broadcast_to(np.asarray(z, bool), s.shape)))

    gpu = np.flatnonzero(g["gpu"])
    add(2 * gpu, 2 * gpu + 1, SPAN, gpu, False)  # each op's own time

    # Streams over the whole trace (HTA takes queue lengths from the full trace).
    all_gpu = np.flatnonzero(is_gpu)
    dev_all = np.where(ev["device"] >= 0, ev["device"], ev["pid"].astype(np.int64))
    str_all = np.where(ev["stream"] >= 0, ev["stream"], ev["tid"].astype(np.int64))
    stream_code = _stream_codes(dev_all, str_all)
    codes = _code_lookup(dev_all, str_all, stream_code, all_gpu)
    launches = functools.cache(lambda: _Launches(ev, is_gpu, launch_all, stream_code))  # when needed
    # row -> idle at launch & start
    queued = _queue_free(all_gpu, launch_all, ev["ts"].astype(np.int64), stream_code)

    # Ops of the window in HTA's order on each stream: by start.
    rows = g["row"][gpu]
    sc = stream_code[rows]
    order = np.lexsort((rows, node_ts[2 * gpu], sc))
    gpu, rows, sc = gpu[order], rows[order], sc[order]
    first = np.r_[True, sc[1:] != sc[:-1]] if len(sc) else np.zeros(0, bool)
    prev = np.where(first, -1, np.r_[-1, gpu[:-1]])

    # Stream Wait Event: the op that will wait (dest) and the op it waits on (src).
    wait_src = np.full(len(g["gpu"]), -1, np.int64)
    sync = _sync_rows(ev)
    w_dest, w_src = _stream_waits(ev, sync, is_cpu, dev_all, codes, launches)
    ok = (pos[w_dest] >= 0) & (pos[w_src] >= 0)
    w_dest, w_src = pos[w_dest[ok]], pos[w_src[ok]]
    # the latest-ending source when several waits meet one op
    o = np.lexsort((node_ts[2 * w_src + 1], w_dest))
    wait_src[w_dest[o]] = w_src[o]
    add(2 * w_src + 1, 2 * w_dest, GPU_SYNC, -1, True)

    ws = wait_src[gpu]
    ws_end = np.where(ws >= 0, node_ts[2 * np.maximum(ws, 0) + 1], np.iinfo(np.int64).min)
    lch = g["launch"][gpu]
    l_ts = np.where(lch >= 0, node_ts[2 * np.maximum(lch, 0)], np.iinfo(np.int64).max)
    prev_end = np.where(prev >= 0, node_ts[2 * np.maximum(prev, 0) + 1], np.iinfo(np.int64).min)
    is_launch = (lch >= 0) & queued[rows] & (prev_end < l_ts) & (ws_end < l_ts)
    is_gap = ~is_launch & (prev >= 0) & (ws_end < prev_end)
    if max_gap_ns is not None:  # a longer idle stream waited on something else than its queue
        is_gap &= node_ts[2 * gpu] - prev_end < max_gap_ns
    if inferred is not None:  # beyond HTA: the waits on other streams no cuda_sync event records
        delays = node_ts[2 * gpu[is_launch]] - node_ts[2 * lch[is_launch]]
        a, b = stream_wait.waits(
            node_ts[2 * gpu], node_ts[2 * gpu + 1], _previous_end(ev, all_gpu, stream_code)[rows],
            np.where(lch >= 0, l_ts, dag.NEVER), dev_all[rows], sc, ws >= 0,
            float(np.median(delays)) if len(delays) else 0.0)
        add(2 * gpu[a] + 1, 2 * gpu[b], STREAM_WAIT, -1, False)
        # the wait, not its launch nor the op before it, set its start: no launch delay or
        # kernel gap into it (a replay keeps both orders, ``replay._order_edges``)
        is_launch[b], is_gap[b] = False, False
        if len(b):
            inferred["cross-stream waits without cuda_sync (the op of another stream that "
                     "ended just before)"] = len(np.unique(b))
    add(2 * lch[is_launch], 2 * gpu[is_launch], LAUNCH, gpu[is_launch], False)
    add(2 * prev[is_gap] + 1, 2 * gpu[is_gap], KERNEL_GAP, prev[is_gap], False)

    # GPU -> CPU syncs: the last op started on the stream(s) by the sync's end -> the call's end.
    s_src, s_dst = _cpu_syncs(ev, sync, gpu, sc, pos, node_ts, is_cpu, dev_all, codes, launches)
    add(s_src, s_dst, SYNC, -1, False)
    return tuple(np.concatenate(col) for col in zip(*out))


def _previous_end(ev: Columns, gpu: np.ndarray, stream_code: np.ndarray) -> np.ndarray:
    """Per row (of the GPU ops ``gpu``): the end of the op before it on its stream over the
    whole trace, by start (``dag.NEVER``: none)."""
    out = np.full(len(ev["ts"]), dag.NEVER, np.int64)
    ts = ev["ts"].astype(np.int64)
    o = gpu[np.lexsort((gpu, ts[gpu], stream_code[gpu]))]
    same = stream_code[o[1:]] == stream_code[o[:-1]]
    out[o[1:][same]] = (ts + np.maximum(ev["dur"].astype(np.int64), 0))[o[:-1][same]]
    return out


def _stream_codes(device: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """A number per (device, stream) pair."""
    key = (device.astype(np.int64) << 33) + (stream.astype(np.int64) & ((1 << 33) - 1))
    return sorted_codes(key)


def _queue_free(gpu: np.ndarray, launch: np.ndarray, ts: np.ndarray, sc: np.ndarray) -> np.ndarray:
    """Per row: HTA's launch condition, the stream idle at the launch (no other call's op launched and not
    started) and at the op's start (no later call's op queued); a graph launch's ops count as one launch."""
    out = np.zeros(len(ts), bool)
    lg = gpu[launch[gpu] >= 0]
    if not len(lg):
        return out
    L, S, call, code = ts[launch[lg]], ts[lg], launch[lg], sc[lg]
    # every stream at once: times as their rank among all, keyed by stream (the counts of the streams
    # before a key cancel out: each op has one launch and one start)
    times = np.unique(np.r_[L, S])
    span = len(times)
    l_, s_ = code * span + np.searchsorted(times, L), code * span + np.searchsorted(times, S)
    ls, ss = np.sort(l_), np.sort(s_)
    same = _same_call_counts(code * (int(call.max()) + 1) + call, S)
    at_launch = np.searchsorted(ls, l_, "right") - np.searchsorted(ss, l_, "left")
    at_start = np.searchsorted(ls, s_, "right") - np.searchsorted(ss, s_, "right")
    out[lg] = (at_launch - same[0] == 0) & (at_start - same[1] == 0)
    return out


def _same_call_counts(call: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per op: ops of its own call on its stream, and those of them starting after it."""
    o = np.lexsort((start, call))
    cs = call[o]
    first = np.r_[True, cs[1:] != cs[:-1]]
    grp = np.cumsum(first) - 1
    size = np.bincount(grp)
    rank = np.arange(len(o)) - np.flatnonzero(first)[grp]
    total, after = np.empty(len(o), np.int64), np.empty(len(o), np.int64)
    total[o] = size[grp]
    after[o] = size[grp] - 1 - rank
    return total, after


def _sync_rows(ev: Columns) -> np.ndarray:
    return np.flatnonzero(ev["grp"] == SYNC_EVENT)


def _calls_by_corr(ev: Columns, is_cpu: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """Per correlation id of ``corr``: the first CPU event (row) carrying it, else -1."""
    cpu = np.flatnonzero(is_cpu & (ev["correlation"] >= 0))
    hit = _first_index(ev["correlation"][cpu], corr)
    return np.where(hit >= 0, cpu[np.maximum(hit, 0)], -1) if len(cpu) else hit


class _Launches:
    """Every (launch call, stream) pair with the first and last op of that call there, by the
    call's (ts, id), grouped per stream and per (stream, thread) for the sync lookups."""

    def __init__(self, ev: Columns, is_gpu: np.ndarray, launch_all: np.ndarray,
                 stream_code: np.ndarray) -> None:
        ops = np.flatnonzero(is_gpu & (launch_all >= 0))
        call, sc, st = launch_all[ops], stream_code[ops], ev["ts"][ops]
        o = np.lexsort((st, sc, call))
        ops, call, sc = ops[o], call[o], sc[o]
        first = np.r_[True, (call[1:] != call[:-1]) | (sc[1:] != sc[:-1])] if len(o) else o > 0
        last = np.r_[first[1:], True] if len(o) else first
        t = {"call": call[first], "sc": sc[first], "first_op": ops[first], "last_op": ops[last]}
        t["ts"] = ev["ts"][t["call"]]
        t["thread"] = ev["track_id"][t["call"]]
        t = take(t, np.lexsort((t["call"], t["ts"])))
        self.by_stream = self._groups(t, t["sc"])
        self.by_thread = self._groups(t, t["sc"] * (1 << 32) + t["thread"])

    @staticmethod
    def _groups(t: Columns, key: np.ndarray) -> dict:
        o = np.argsort(key, kind="stable")  # keeps the (ts, id) order within a group
        k = key[o]
        cut = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else k
        ends = np.r_[cut[1:], len(k)]
        return {int(k[a]): take(t, o[a:b]) for a, b in zip(cut.tolist(), ends.tolist())}

    def previous(self, sc: int, ts: int) -> int:
        """The last op on stream ``sc`` of the last call there starting at or before ``ts``."""
        g = self.by_stream.get(sc)
        k = -1 if g is None else int(np.searchsorted(g["ts"], ts, "right")) - 1
        return int(g["last_op"][k]) if k >= 0 else -1

    def next(self, sc: int, thread: int, ts: int) -> int:
        """The first op on stream ``sc`` of the first call from ``thread`` at or after ``ts``."""
        g = self.by_thread.get(sc * (1 << 32) + thread)
        k = -1 if g is None else int(np.searchsorted(g["ts"], ts, "left"))
        return int(g["first_op"][k]) if g is not None and k < len(g["ts"]) else -1


def _stream_waits(ev, sync, is_cpu, dev_all, codes: dict, launches):
    """Stream Wait Event (dest op, src op) pairs: src = the last launch's op on the recorded stream before
    ``cudaEventRecord``, dest = the next launch's op from the waiting call's thread on the waiting stream
    (``codes``: ``_code_lookup``'s; ``launches()``: the ``_Launches``)."""
    waits = sync[ev["sync"][sync] == 1 + SYNC_KINDS.index("Stream Wait Event")]
    waits = waits[(ev["wait_record"][waits] >= 0) & (ev["wait_stream"][waits] >= 0)]
    if not len(waits):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    lt = launches()
    record = _calls_by_corr(ev, is_cpu, ev["wait_record"][waits])
    caller = _calls_by_corr(ev, is_cpu, ev["correlation"][waits])
    dest, src = [], []
    for w, r, c in zip(waits.tolist(), record.tolist(), caller.tolist()):
        dev = int(dev_all[w])
        rec_sc = codes.get((dev, int(ev["wait_stream"][w])))
        wait_sc = codes.get((dev, int(ev["stream"][w])))
        if r < 0 or c < 0 or rec_sc is None or wait_sc is None:
            continue
        s = lt.previous(rec_sc, int(ev["ts"][r]))
        d = lt.next(wait_sc, int(ev["track_id"][c]), int(ev["ts"][c]))
        if s >= 0 and d >= 0:
            dest.append(d)
            src.append(s)
    return np.array(dest, np.int64), np.array(src, np.int64)


def _code_lookup(dev, stream, code, rows) -> dict:
    """(device, stream) -> its number, over ``rows`` (the GPU ops: a handful of pairs; a
    number stands for one pair)."""
    codes, first = np.unique(code[rows], return_index=True)
    at = rows[first]
    return dict(zip(zip(dev[at].tolist(), stream[at].tolist()), codes.tolist()))


def _cpu_syncs(ev, sync, gpu, sc, pos, node_ts, is_cpu, dev_all, codes: dict, launches):
    """GPU -> CPU edges: device (context) sync on every stream of the device, stream sync on its stream, event
    sync on the op recorded; also ``cudaDeviceSynchronize`` without a ``cuda_sync`` event."""
    kind = [SYNC_KINDS[k - 1] if k > 0 else None for k in ev["sync"][sync].tolist()]
    call = _calls_by_corr(ev, is_cpu, ev["correlation"][sync])
    # Device syncs the trace has no cuda_sync event for.
    covered = set(call[call >= 0].tolist())
    dev_calls = np.flatnonzero(is_cpu & (ev["device_sync"] == 1))
    src, dst = [], []
    # Ops of the window per stream, by start (sc sorted, then start).
    starts = node_ts[2 * gpu]
    bounds = np.r_[0, np.flatnonzero(sc[1:] != sc[:-1]) + 1, len(sc)] if len(sc) else np.r_[0]
    per_stream = {int(sc[b]): (gpu[b:e], starts[b:e]) for b, e in zip(bounds[:-1], bounds[1:])}
    on_dev: dict = {}  # device -> its streams with ops in the window
    for (d, _), c in codes.items():
        if c in per_stream:
            on_dev.setdefault(d, []).append(c)

    def last_op(code, t):
        ops = per_stream.get(code)
        if ops is None:
            return -1
        k = np.searchsorted(ops[1], t, "right") - 1
        return int(ops[0][k]) if k >= 0 else -1

    def link(op, c):
        if op >= 0 and pos[c] >= 0:
            src.append(2 * op + 1)
            dst.append(2 * int(pos[c]) + 1)

    rows = list(zip(sync.tolist(), kind, call.tolist()))
    rows += [(-1, "Context Sync", c) for c in dev_calls.tolist() if c not in covered]
    for row, k, c in rows:
        if c < 0 or pos[c] < 0:
            continue
        t = int(ev["ts"][row] + ev["dur"][row]) if row >= 0 else int(ev["ts"][c] + ev["dur"][c])
        if k == "Context Sync":
            for code in on_dev.get(int(dev_all[row]), ()) if row >= 0 else per_stream:
                link(last_op(code, t), c)
        elif k == "Stream Sync":
            code = codes.get((int(dev_all[row]), int(ev["stream"][row])))
            if code is not None:
                link(last_op(code, t), c)
        elif k == "Event Sync" and ev["wait_record"][row] >= 0 and ev["wait_stream"][row] >= 0:
            rec = _calls_by_corr(ev, is_cpu, ev["wait_record"][row:row + 1])[0]
            code = codes.get((int(dev_all[row]), int(ev["wait_stream"][row])))
            if rec >= 0 and code is not None:
                op = launches().previous(code, int(ev["ts"][rec]))
                link(int(pos[op]) if op >= 0 else -1, c)
    return np.array(src, np.int64), np.array(dst, np.int64)


def category_of(graph: Graph, kind: np.ndarray, event: np.ndarray, name: np.ndarray
                ) -> np.ndarray:
    """Each path edge's category (``CATEGORIES``); ``name``: its event's name. A call that waited for
    the GPU is ``blocked``, not ``cpu``, for the time it weighs (its wait after the GPU)."""
    ev = np.maximum(event, 0)
    cpu = ~graph.ev["gpu"][ev]
    blocked = cpu & graph.ev["waiting"][ev] & np.isin(kind, (SPAN, SYNC))
    # the first condition that holds: a wait's kind, else what the edge's event is
    return np.select([kind == LAUNCH, kind == KERNEL_GAP, blocked,
                      np.isin(kind, (SYNC, GPU_SYNC, STREAM_WAIT)), cpu, graph.ev["memory"][ev] == 1,
                      is_comm(name)],
                     ["launch_delay", "kernel_gap", BLOCKED, "sync_wait", "cpu", "gpu_memory",
                      "gpu_communication"], "gpu_compute").astype(object)


NO_WAIT = np.iinfo(np.int64).max  # ``edges["wait_start"]`` of an edge into no call that waited


def _blocked_idle(p: Columns, e: Columns) -> Columns:
    """The pieces ``p`` with idle time inside a wait the path leads into (``edges["wait_start"]``; each from
    the end of the one before) made ``blocked`` and shown with its call: no work on the path explains it."""
    into, lo, hi = _waits(e)
    if not len(into):
        return p
    pts = np.unique(np.r_[lo, hi])
    ts, end = p["ts"], p["end"]
    a, b = np.searchsorted(pts, ts, "right"), np.searchsorted(pts, end, "left")
    cuts = np.where(p["category"] == IDLE, np.maximum(b - a, 0), 0)  # cut idle pieces at the waits' ends
    rep = np.repeat(np.arange(len(ts)), 1 + cuts)
    k = np.arange(len(rep)) - np.repeat(np.cumsum(1 + cuts) - 1 - cuts, 1 + cuts)
    top = len(pts) - 1
    start = np.where(k == 0, ts[rep], pts[np.clip(a[rep] + k - 1, 0, top)])
    stop = np.where(k == cuts[rep], end[rep], pts[np.clip(a[rep] + k, 0, top)])
    edge, cat = p["edge"][rep], p["category"][rep].copy()
    w = np.minimum(np.searchsorted(hi, start, "right"), len(hi) - 1)
    inside = (cat == IDLE) & (lo[w] <= start) & (start < hi[w])
    cat[inside] = BLOCKED
    return {"ts": start, "end": stop, "edge": np.where(inside, into[w], edge), "category": cat}


def _waits(e: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(path edges into a blocking call's end, each wait's start, its end): the call's time on the path,
    from its start or the end of the wait before it on the path, whichever is later."""
    if "wait_start" not in e:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    into = np.flatnonzero(e["wait_start"] != NO_WAIT)
    hi = e["end"][into].astype(np.int64)
    lo = np.maximum(e["wait_start"][into], np.r_[np.iinfo(np.int64).min, hi[:-1]])
    return into, np.minimum(lo, hi), hi


@dataclass
class Result:
    """A critical path: ``edges`` (every edge of the path, in order), ``segments`` (edges that
    take time), the window and the graph they came from."""

    window: Window
    graph: Graph
    edges: Columns
    length: int
    path: np.ndarray  # the path's edges: indices into the graph's edge arrays
    replays: Any = None  # the graph-replayed kernels attributed (``graph_replay.Replays``)

    def pieces(self) -> Columns:
        """The window cut along the path into abutting pieces: ``ts, end`` (engine ns), ``edge`` (into
        ``edges``, -1 off the path), ``category`` (``IDLE`` off the path or where an edge's weight leaves)."""
        e, w = self.edges, self.edges["weight"]
        mid = e["end"] - w
        n = len(w)
        first = int(e["ts"][0]) if n else self.window.end
        last = int(e["end"][-1]) if n else self.window.end
        ts = np.r_[self.window.start, e["ts"], mid, last]
        end = np.r_[first, mid, e["end"], self.window.end]
        edge = np.r_[-1, np.arange(n), np.arange(n), -1]
        cat = np.r_[[IDLE], np.full(n, IDLE, object), e["category"], [IDLE]].astype(object)
        order = np.r_[0, np.ravel(np.c_[np.arange(1, n + 1), np.arange(n + 1, 2 * n + 1)]),
                      2 * n + 1]
        keep = order[end[order] > ts[order]]
        return _blocked_idle({"ts": ts[keep], "end": end[keep], "edge": edge[keep],
                              "category": cat[keep]}, e)

    def summary(self, top: int = 10) -> dict:
        """Length, time and share of the window per category (``idle`` included: they sum to
        the window), the top events by time on the path, and the waits inferred."""
        p = self.pieces()
        dur = p["end"] - p["ts"]
        per_cat = {c: int(dur[p["category"] == c].sum()) for c in CATEGORIES}
        total = max(self.window.end - self.window.start, 1)
        on = p["category"] != IDLE
        names: dict = {}  # per (event, op: a graph-replayed kernel's captured op, else None)
        at = p["edge"][on]
        ops = self.edges["op"][at] if "op" in self.edges else np.full(len(at), None, object)
        for n, w in zip(zip(self.edges["event_name"][at].tolist(), ops.tolist()), dur[on].tolist()):
            names[n] = names.get(n, 0) + w
        tops = sorted(names.items(), key=lambda kv: -kv[1])[:top]
        return {
            "window": self.window.label, "start_ns": self.window.start, "end_ns": self.window.end,
            "length_ns": self.length,
            "categories": {"category": list(per_cat),
                           "ns": list(per_cat.values()),
                           "share_pct": [100 * v / total for v in per_cat.values()]},
            "top": {"event": [k for (k, _), _ in tops], "op": [o for (_, o), _ in tops],
                    "ns": [v for _, v in tops],
                    "share_pct": [100 * v / total for _, v in tops]},
            "edges": len(self.graph.src), "nodes": len(self.graph.node_ts),
            "skipped_backwards": self.graph.skipped,
            "inferred": dict(self.graph.inferred),
            "blocked": self.blocked(top),
        }

    def blocked(self, top: int = 10) -> dict:
        """The ``top`` longest waits of calls for the GPU on the path (``_waits``): the call, the op it waited
        for, the wait split into GPU work (``GPU_WORK``), other work on the path (launch delays, gaps, CPU),
        and ``blocked`` (its transfer, what no recorded event explains); the streams the path ran on."""
        e, p = self.edges, self.pieces()
        into, lo, hi = _waits(e)
        cols: dict = {k: [] for k in ("call", "waited_for", "streams", "start_ns", "wait_ns", "gpu_ns",
                                      "other_ns", "blocked_ns", "gpu_pct")}
        for k in np.argsort(lo - hi, kind="stable")[:top].tolist():
            if hi[k] <= lo[k]:
                break
            ov = np.clip(np.minimum(p["end"], hi[k]) - np.maximum(p["ts"], lo[k]), 0, None)
            gpu = np.isin(p["category"], GPU_WORK) & (ov > 0)
            ops = e["event"][p["edge"][gpu]]
            streams = self.graph.ev["stream"][ops] if self.graph is not None else ops[:0]
            per = {int(x): int(ov[gpu][streams == x].sum()) for x in set(streams.tolist())}
            by_time = sorted(per.items(), key=lambda kv: -kv[1])
            wait, busy = int(hi[k] - lo[k]), int(ov[gpu].sum())
            blocked = int(ov[p["category"] == BLOCKED].sum())
            for c, v in zip(cols, (e["event_name"][into[k]], e["waited_for"][into[k]] if "waited_for" in e
                                   else None, [x for x, _ in by_time], int(lo[k]), wait, busy,
                                   wait - busy - blocked, blocked, 100 * busy / max(wait, 1))):
                cols[c].append(v)
        return cols


def analyse(trace: Trace, step: int | None = None, annotation: str | None = None,
            instance: int = 0, sync_wait: bool = True,
            max_gap_ns: int | None = MAX_KERNEL_GAP_NS) -> Result:
    """The critical path of one window of ``trace`` (see ``window``); ``sync_wait=False``: HTA's answer
    (its weights, whole µs, the GPU ops launched in the window past its end, its thread merge)."""
    win = window(trace, step, annotation, instance)
    ev = events(trace)
    if not sync_wait:
        ev, win = _whole_us(ev, win, trace.base_ns)
        ev["stack"] = _hta_stacks(trace, ev, win)
    graph = build(ev, win, sync_wait, max_gap_ns, queued=sync_wait)
    if not sync_wait:  # HTA's path may run past the window's end, on ops launched in it
        win = Window(win.start, max(win.end, int(graph.node_ts.max(initial=win.end))), win.label)
    longest = dag.longest_path(graph)
    path = _through_waits(graph, longest)
    g = graph.ev
    src, dst = graph.src[path], graph.dst[path]
    kind, event = graph.kind[path], graph.event[path]
    # An edge with no event of its own: a launch delay / gap / sync is shown with its op.
    shown = np.where(event >= 0, event, dst // 2)
    event_name = g["name"][shown]
    unread = np.flatnonzero(event_name == None)  # noqa: E711  (GPU ops: their names on the path)
    event_name[unread] = names(trace, g["id"][shown[unread]])
    # each edge's time from the end of the one before (the way back through a wait may begin before the
    # call, or after it where no recorded event leads further back)
    end = graph.node_ts[dst]
    begin = np.r_[graph.node_ts[graph.src[longest[:1]]], end[:-1]]
    edges = {
        "src_node": src, "dst_node": dst,
        "src_event": src // 2, "dst_event": dst // 2, "src_is_start": src % 2 == 0,
        "dst_is_start": dst % 2 == 0,
        "ts": begin, "end": end,
        "weight": np.minimum(graph.weight[path], end - begin), "kind": kind, "event": shown,
        "event_id": g["id"][shown], "event_name": event_name,
        "pid": g["pid"][shown], "tid": g["tid"][shown],
        "category": category_of(graph, kind, shown, event_name),
        # into the end of a call that waited: the call's start
        "wait_start": np.where((dst % 2 == 1) & g["waiting"][dst // 2], graph.node_ts[dst - 1], NO_WAIT),
    }
    edges["waited_for"] = _waited_for(trace, graph, dst, edges["wait_start"] != NO_WAIT)
    replays = graph_replay.attribute(trace)  # a graph-replayed kernel's op: the one that captured it
    edges["op"] = graph_replay.op_of(replays, edges["event_id"])
    r = Result(win, graph, edges, 0, path, replays)
    p = r.pieces()
    r.length = int((p["end"] - p["ts"])[p["category"] != IDLE].sum())  # blocked waits included
    return r


def _whole_us(ev: Columns, win: Window, base_ns: int = 0) -> tuple[Columns, Window]:
    """HTA's rounding of a trace with fractional-µs timestamps (its parser's ``round_down_time_stamps``):
    each start up, each end down to a whole µs (``base_ns``: the engine's time base), the window too."""
    ts = ev["ts"].astype(np.int64) + base_ns
    if not (ts % 1000).any():
        return ev, win
    start, end = -(-ts // 1000) * 1000, (ts + ev["dur"].astype(np.int64)) // 1000 * 1000
    lo, hi = -(-(win.start + base_ns) // 1000) * 1000, (win.end + base_ns) // 1000 * 1000
    return dict(ev, ts=start - base_ns, dur=end - start), Window(lo - base_ns, hi - base_ns, win.label)


def _hta_stacks(trace: Trace, ev: Columns, win: Window) -> np.ndarray:
    """Each event's call stack as HTA walks them: its ``track_id``, but HTA merges its backward thread
    into its forward one (``_get_bwd_tid`` / ``_get_fwd_tid``: the one thread with ``cpu_op`` or
    ``user_annotation`` events in the window named ``*autograd*``, the one with ``*forward*`` ones)."""
    c = trace.columns(
        "SELECT s.ts, s.dur, t.pid, t.tid, instr(s.name, 'forward') > 0 AS fwd, "
        "instr(s.name, 'autograd') > 0 AS bwd FROM slice s JOIN _traceaug_track t USING (track_id) "
        "WHERE s.category IN ('cpu_op', 'user_annotation') "
        "AND (instr(s.name, 'forward') > 0 OR instr(s.name, 'autograd') > 0)")
    c, _ = _whole_us(c, win, trace.base_ns)
    inside = (c["ts"] >= win.start) & (c["ts"] <= win.end) & (c["dur"] > 0)
    fwd, bwd = (np.unique(c["tid"][inside & (c[k] == 1)]) for k in ("fwd", "bwd"))
    stack = ev["track_id"].astype(np.int64)
    if len(fwd) != 1 or len(bwd) != 1 or fwd[0] == bwd[0]:
        return stack
    for pid in np.unique(ev["pid"][ev["tid"] == bwd[0]]).tolist():
        into = stack[(ev["pid"] == pid) & (ev["tid"] == fwd[0])]
        if len(into):
            stack[(ev["pid"] == pid) & (ev["tid"] == bwd[0])] = into[0]
    return stack


def _through_waits(graph: Graph, path: np.ndarray) -> np.ndarray:
    """``path`` with the own time of each call on it that waited for the GPU replaced by the work it waited
    for: from the op that ended last, each node's way in from the latest of its sources (what had to finish
    first: GPU ops, launches, gaps, other threads' calls), back to the call's start; then the sync edge."""
    ts, src, dst = graph.node_ts, graph.src, graph.dst
    d = dst[path]
    at = np.flatnonzero((graph.kind[path] == SPAN) & (d % 2 == 1) & graph.ev["waiting"][d // 2]
                        & (ts[src[path]] >= ts[d - 1]))  # (an edge of the call's own time)
    if not len(at):
        return path
    way = _last_into(len(ts), dst, np.lexsort((-np.arange(len(src)), graph.weight, ts[src], dst)))
    before = _ended_before(graph)
    into = _last_sync(graph)
    out, prev = [], 0
    for i in at.tolist():
        start = int(ts[src[path[i]]])
        chain = [int(into[d[i]])]
        n, steps = int(src[chain[0]]), len(ts)
        while ts[n] > start and steps:
            if way[n] >= 0:
                chain.append(int(way[n]))
                n = int(src[chain[-1]])
            elif before[n] >= 0:  # a gap nothing recorded explains: the op that ended last before it
                n = int(before[n])
            else:
                break
            steps -= 1
        out += [path[prev:i], np.array(chain[::-1], np.int64)]
        prev = i + 1
    return np.concatenate(out + [path[prev:]])


def _ended_before(graph: Graph) -> np.ndarray:
    """Per node: at a GPU op's start, the end node of the op of its device that ended last by then (its
    stream's previous op, or the other stream's op it waited for unrecorded; -1: none)."""
    g, ts = graph.ev, graph.node_ts
    gpu = np.flatnonzero(g["gpu"])
    dev = np.where(g["device"] >= 0, g["device"], g["pid"].astype(np.int64))[gpu]
    out = np.full(len(ts), -1, np.int64)
    for d in np.unique(dev).tolist():  # (a handful of devices)
        ops = gpu[dev == d]
        ops = ops[np.lexsort((ops, ts[2 * ops + 1]))]  # by end
        at = np.searchsorted(ts[2 * ops + 1], ts[2 * ops], "right") - 1
        at -= (at >= 0) & (ops[np.maximum(at, 0)] == ops)  # (not itself, when it takes no time)
        ok = at >= 0
        out[2 * ops[ok]] = 2 * ops[at[ok]] + 1
    return out


def _last_sync(graph: Graph) -> np.ndarray:
    """Per node: of the sync edges into it, the one from the op that ended last (-1: none)."""
    sync = np.flatnonzero(graph.kind == SYNC)
    return _last_into(len(graph.node_ts), graph.dst,
                      sync[np.lexsort((sync, graph.node_ts[graph.src[sync]], graph.dst[sync]))])


def _last_into(nodes: int, dst: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per node: the last of ``edges`` (sorted by destination) into it, else -1."""
    out = np.full(nodes, -1, np.int64)
    d = dst[edges]
    last = edges[np.r_[d[1:] != d[:-1], True]] if len(edges) else edges
    out[dst[last]] = last
    return out


def _waited_for(trace: Trace, graph: Graph, dst: np.ndarray, into: np.ndarray) -> np.ndarray:
    """Per path edge into a call that waited (``into``): the name of the GPU op it waited for (that
    ended last), else None."""
    edge = np.where(into, _last_sync(graph)[dst], -1)
    out = np.full(len(dst), None, object)
    out[edge >= 0] = names(trace, graph.ev["id"][graph.src[edge[edge >= 0]] // 2])
    return out


def frames(trace: Trace, step: int | None = None, annotation: str | None = None,
           instance: int = 0, sync_wait: bool = True,
           max_gap_ns: int | None = MAX_KERNEL_GAP_NS, top: int = 10):
    """The path (``Result.pieces`` in order: ``ts_ns, end_ns``, ``weight_ns`` summing to the window, ``kind``
    (EDGE_KINDS or ``idle``), ``category``, ``event``, ``pid, tid``) and the summary (``category, ns,
    share_pct``; the whole summary in ``attrs["summary"]``) as pandas DataFrames."""
    r = analyse(trace, step, annotation, instance, sync_wait, max_gap_ns)
    e, p = r.edges, r.pieces()
    at = np.maximum(p["edge"], 0)
    on = p["category"] != IDLE
    kind = np.where(on, np.array(EDGE_KINDS, dtype=object)[e["kind"][at]] if len(at) else at,
                    IDLE)
    path = frame({"ts_ns": p["ts"], "end_ns": p["end"], "weight_ns": p["end"] - p["ts"],
                  "kind": kind.astype(object), "category": p["category"],
                  "event": np.where(on, e["event_name"][at] if len(at) else at, None),
                  "pid": np.where(on, e["pid"][at] if len(at) else at, -1),
                  "tid": np.where(on, e["tid"][at] if len(at) else at, -1)})
    summary = r.summary(top)
    out = frame(summary["categories"])
    out.attrs["summary"] = summary
    return path, out


MARGIN_NS = 1000  # how far inside a free stretch an arrow end sits (at most half of it)


def bind_points(trace: Trace, g: Graph, nodes: np.ndarray) -> np.ndarray:
    """Per node, a time (engine ns) at which Perfetto's importer has its event on top of its thread's stack
    (``slice_bind_points``)."""
    ev = g.ev
    events = nodes // 2
    ts = ev["ts"][events].astype(np.int64)
    return slice_bind_points(trace, ev["id"][events].astype(np.int64), ts,
                             ts + ev["dur"][events].astype(np.int64), nodes % 2 == 0)


def slice_bind_points(trace: Trace, eid: np.ndarray, ts: np.ndarray, end: np.ndarray,
                      at_start: np.ndarray) -> np.ndarray:
    """Per slice (id ``eid``, ``ts`` to ``end``: ``end`` may be cut at a child the trace did not load), a
    time (engine ns) at which Perfetto's importer has it on top of its thread's stack: MARGIN_NS into the
    stretch before its first child (``at_start``) or before its end (an ended child stays until the next
    slice begins)."""
    ids = sorted_unique(eid)
    kids = trace.columns("SELECT parent_id, MIN(ts) AS ts FROM slice WHERE dur >= 0 AND parent_id IN "
                         f"({', '.join(map(str, ids.tolist()))}) GROUP BY parent_id")
    parent = kids["parent_id"].astype(np.int64)
    o = np.argsort(parent, kind="stable")
    parent, first_child = parent[o], kids["ts"].astype(np.int64)[o]
    b = end.copy()
    at = position_in(parent, eid)
    b[at >= 0] = np.minimum(b[at >= 0], first_child[at[at >= 0]])
    step = np.minimum((b - ts) // 2, MARGIN_NS)
    return np.where(b <= ts, ts, np.where(at_start, ts + step, b - step))
