"""Kineto / Chrome JSON -> input Perfetto represents exactly: ``plan`` (pass 1) scans once; ``engine_stream``
(pass 2) yields the engine's bytes, re-reading the file for a full load, else from chunks pass 1 held."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from ..sorted_ints import among, sorted_unique
from . import chunks, pass1, source, ui_import
from .kinds import LoadKind, kind_of
from .lanes import assign_lanes
from .rebase import BelowBase, Rebase, clamp_wide_ints, fix_negative_tids

PARALLEL_ABOVE = 48 << 20  # raw bytes from which pass 1 runs in worker processes
WORKERS = 2


@dataclass
class Plan:
    """What pass 1 learned and pass 2 needs."""

    path: Path
    layout: chunks.Layout
    rebase: Rebase
    kind: str = "full"  # what the load keeps: a name of kinds.KINDS
    span_ns: tuple[int, int] | None = None  # a subset load: first start, last end of all events
    held: list[list[bytes] | None] | None = None  # an analysis load: each chunk's kept events
    exact_chunks: set[int] = field(default_factory=set)  # rebased one timestamp at a time
    events: int = 0
    memory_events: int = 0  # Kineto's ``[memory]`` instants in the file, whatever the load kept
    moved: dict[int, int] = field(default_factory=dict)  # seq -> lane (slices and flows)
    chunk_first_seq: list[int] = field(default_factory=list)
    lane_threads: dict[tuple, str] = field(default_factory=dict)  # (pid, tid, lane) -> name
    thread_names: dict[tuple, str] = field(default_factory=dict)
    # What the UI imports; None for a skimmed load (``kinds.LoadKind.skim``: pass 1 did
    # not see every event), as ``flow_ids`` and ``span_ns``.
    ui: ui_import.Columns | None = field(default_factory=ui_import.Columns)
    flow_ids: np.ndarray | None = None  # every flow id of the file (``pass1.used_flow_ids``)

    moved_slices: int = 0
    moved_flows: int = 0
    # A ``holding_ops`` load: the sorted seqs of the held CPU ops not fed to the engine (``holding``), and
    # per chunk each held event's end in its piece (``pass1.ChunkResult.ends``)
    left_out: np.ndarray | None = None
    ends: list[np.ndarray] = field(default_factory=list)

    @property
    def base_ns(self) -> int:
        return self.rebase.base_ns

    @property
    def full(self) -> bool:
        """Every arg and flow event (the ``"full"`` kind)."""
        return kind_of(self.kind).full

    @property
    def only(self) -> str | None:
        """A subset load's kind ("gpu", "ops", "sync"), else None (every event)."""
        return self.kind if kind_of(self.kind).subset else None


def plan(path: Path, on_progress: Callable[[int], None] | None = None, full: bool = True,
         workers: int | None = None, only: str | None = None,
         kind: str | LoadKind | None = None) -> Plan:
    """Pass 1 for a load of ``kind`` (``kinds.KINDS``; ``full`` / ``only``: the older spelling), in
    ``WORKERS`` processes above ``PARALLEL_ABOVE`` raw bytes; ``chunks.NotChromeJson`` if not Chrome."""
    load_kind = kind_of(kind, full=full and not only, only=only)
    if workers is None:
        workers = WORKERS if source.raw_size_estimate(path) > PARALLEL_ABOVE else 0
    rebase = Rebase(numeric=not load_kind.full)  # a full load's pass 2 rebases the text itself
    try:
        return _confirmed_plan(path, on_progress, load_kind, workers, rebase)
    except BelowBase:  # rare ("ts": 0 beside epoch values): read every timestamp as it is
        return _confirmed_plan(path, on_progress, load_kind, workers, rebase.without_base())


def _confirmed_plan(path: Path, on_progress, kind: LoadKind, workers: int, rebase: Rebase) -> Plan:
    if workers:
        try:
            return _plan(path, on_progress, kind, workers, rebase)
        except pass1.Unconfirmed:
            pass  # a cut a worker could not parse (or a worker failed): confirm every cut here
    return _plan(path, on_progress, kind, 0, rebase)


def _plan(path: Path, on_progress, kind: LoadKind, workers: int, rebase: Rebase) -> Plan:
    blocks = source.iter_blocks(path, on_progress)
    results = (pass1.parallel(blocks, rebase, kind, workers) if workers
               else pass1.sequential(blocks, rebase, kind))
    cols = ui_import.Columns()  # the engine's events: global keys, seqs (``first_index``: per chunk)
    held: list[list[bytes] | None] | None = None if kind.full else []
    names: dict[tuple, str] = {}
    exact_chunks: set[int] = set()
    spans: list[tuple[int, int]] = []
    flow_ids: list[np.ndarray] = []
    memory = 0
    layout = None
    ui = ui_import.Columns()
    ops: list[np.ndarray] | None = [] if kind.holding_ops and held is not None else None
    anchors: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    for r in results:
        if isinstance(r, chunks.Layout):
            layout = r
            break
        if r.exact:
            exact_chunks.add(len(cols.first_index))
        cols.merge(r.keys, r.x, r.flows, r.events)
        if ops is not None:
            ops = _global_rows(cols, r, ops, anchors, ends)
        memory += r.memory
        ui.merge(r.ui_keys, r.ui_x, r.ui_flows, r.parsed)
        names.update(r.names)
        if held is not None:
            held.append(r.held)
        if r.span is not None:
            spans.append(r.span)
        flow_ids.append(np.frombuffer(r.flow_ids, dtype=np.int64))
    assert layout is not None
    flow_ids.append(np.array(pass1.nested_flow_ids([layout.header, layout.trailer]), np.int64))
    layout.has_events = layout.has_events or cols.events > 0
    whole = not kind.skim  # pass 1 saw every event
    p = Plan(path=path, layout=layout, rebase=rebase, kind=kind.name, held=held, events=cols.events,
             memory_events=memory,
             chunk_first_seq=cols.first_index, thread_names=names, exact_chunks=exact_chunks,
             ui=ui if whole else None,
             span_ns=(min(s for s, _ in spans), max(e for _, e in spans)) if spans else None,
             flow_ids=sorted_unique(np.concatenate(flow_ids)) if whole else None)
    _place(p, cols)
    if ops:
        p.left_out, p.ends = holding(np.concatenate(ops), np.concatenate(anchors)), ends
        p.events -= len(p.left_out)
    return p


def _global_rows(cols: ui_import.Columns, r: pass1.ChunkResult, ops: list[np.ndarray],
                 anchors: list[np.ndarray], ends: list[np.ndarray]) -> list[np.ndarray] | None:
    """Add a chunk's ``holding_ops`` rows (just merged into ``cols``) with the trace's keys and seqs; None
    (every op kept) once a chunk cannot tell."""
    if r.anchors is None:
        return None
    to_global = np.array([cols.keys[k] for k in r.keys] + [-1], dtype=np.int64)
    rows = np.frombuffer(r.ops, dtype=np.int64).reshape(-1, 4).copy()
    rows[:, 0] = to_global[rows[:, 0]]
    rows[:, -1] += cols.first_index[-1]
    at = np.frombuffer(r.anchors, dtype=np.int64).reshape(-1, 2).copy()
    at[:, 0] = to_global[at[:, 0]]
    ops.append(rows)
    anchors.append(at)
    ends.append(np.frombuffer(r.ends, dtype=np.int64))
    return ops


def holding(ops: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """The sorted seqs of the CPU ops (rows key, ts, dur, seq) whose span holds no anchor (rows key, ts) of
    their thread: no launch's op nor any op around one or around a [memory] event, so none that efficiency
    or memory reads (each op of a launch's or an allocation's ancestry holds it)."""
    out = []
    anchors = anchors[np.lexsort((anchors[:, 1], anchors[:, 0]))]
    for key in sorted_unique(ops[:, 0]).tolist():
        mine = ops[ops[:, 0] == key]
        ts = anchors[anchors[:, 0] == key, 1]
        held = np.searchsorted(ts, mine[:, 1] + mine[:, 2], "right") > np.searchsorted(ts, mine[:, 1], "left")
        out.append(mine[~held & (mine[:, 2] >= 0), 3])
    return np.sort(np.concatenate(out)) if out else np.empty(0, np.int64)


def _place(p: Plan, cols: ui_import.Columns) -> None:
    """Assign lanes to the slices Perfetto would drop, and move their flow ends along."""
    x, f = cols.x, cols.flows
    lanes = assign_lanes(x[:, 0], x[:, 1], x[:, 2], x[:, 3])
    p.moved.update(lanes)
    p.moved_slices = len(lanes)
    # A flow event at the same thread and time as a moved slice binds to it: move it too.
    moved_x = x[among(x[:, 3], sorted_unique(list(lanes)))].tolist()
    where = {}
    for k, ts, _dur, seq in moved_x:
        where.setdefault((k, ts), lanes[seq])
    for k, ts, seq in f[among(f[:, 1], sorted_unique([ts for _k, ts in where]))].tolist():
        lane = where.get((k, ts))
        if lane is not None:
            p.moved[seq] = lane
            p.moved_flows += 1
    inverse = {v: k for k, v in cols.keys.items()}
    for k, _ts, _dur, seq in moved_x:
        pid, tid = inverse[k]
        lane = lanes[seq]
        base = p.thread_names.get((pid, tid)) or f"{tid}"
        p.lane_threads[(pid, tid, lane)] = f"{base} [overlap lane {lane}]"


def lane_tid(tid, lane: int) -> str:
    """The synthetic thread id of an overlap lane (a string, so it never clashes)."""
    return f"{tid}~lane{lane}"


def _lane_metadata(p: Plan) -> bytes:
    events = [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": lane_tid(tid, lane),
         "args": {"name": name}}
        for (pid, tid, lane), name in p.lane_threads.items()
    ]
    return orjson.dumps(events)[1:-1]


def _move(text: bytes, first_seq: int, p: Plan, gone: np.ndarray | None = None) -> bytes:
    """Re-serialize a piece of events with its moved ones on their lanes (and without those at ``gone``)."""
    with pass1.no_gc():
        events = orjson.loads(b"[" + text + b"]")
        for seq, lane in p.moved.items():
            if not 0 <= seq - first_seq < len(events):
                continue
            ev = events[seq - first_seq]
            tid = ev.get("tid")
            ev["tid"] = lane_tid(tid, lane)
            if ev.get("ph") == "X":
                args = ev.get("args")
                if not isinstance(args, dict):
                    args = ev["args"] = {}
                args["traceaug_lane"] = lane
                args.setdefault("traceaug_tid", tid)  # a lane's event moved again keeps its thread
        if gone is not None and len(gone):
            events = [e for e, g in zip(events, np.isin(np.arange(len(events)), gone).tolist()) if not g]
        return orjson.dumps(events)[1:-1]


def _without(text: bytes, ends: np.ndarray, gone: np.ndarray) -> bytes:
    """A held piece (its events ending at ``ends``) less the events at ``gone``: the runs between sliced."""
    keep = np.ones(len(ends), dtype=np.int8)
    keep[gone] = 0
    edges = np.flatnonzero(np.diff(np.r_[0, keep, 0]))  # each run of kept events: its first, its end
    starts = np.r_[0, ends[:-1] + 1]
    return b",".join(text[a:b] for a, b in zip(starts[edges[0::2]].tolist(), ends[edges[1::2] - 1].tolist()))


def engine_stream(p: Plan, on_progress: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """Pass 2: the bytes to load into the engine."""
    if p.held is not None:
        yield from _held_stream(p, on_progress)
        return
    layout = p.layout
    yield b"[" if layout.array_form else b'{"traceEvents":['
    if p.lane_threads:
        yield _lane_metadata(p)
        if layout.has_events:
            yield b","
    moved_chunks = set(_chunk_of_moves(p)[0].tolist())
    for chunk in chunks.recut(source.iter_blocks(p.path, on_progress), layout):
        text = clamp_wide_ints(chunk.text)  # as pass 1 saw it (``Rebase.rewrite``)
        text = p.rebase.exact(text) if chunk.index in p.exact_chunks else p.rebase.fast(text)[0]
        text = fix_negative_tids(text)
        if chunk.index in moved_chunks:
            text = (_move_tail if chunk.last else _move)(text, p.chunk_first_seq[chunk.index], p)
        if chunk.index and not text.startswith(b"]"):  # a tail of no events: no comma before it
            yield b","
        yield text


def _held_stream(p: Plan, on_progress: Callable[[int], None] | None) -> Iterator[bytes]:
    """Pass 2 from the pieces pass 1 held (each chunk freed once fed), then the trailer keys."""
    assert p.held is not None
    if any(pieces is None for pieces in p.held):
        raise RuntimeError("the held chunks were already fed; plan again")
    layout = p.layout
    yield b"[" if layout.array_form else b'{"traceEvents":['
    first = True
    if p.lane_threads:
        yield _lane_metadata(p)
        first = False
    chunk, local = _chunk_of_moves(p)
    moved = set(zip(chunk.tolist(), (local // pass1.SEGMENT).tolist()))
    stored = source.stored_size(p.path)
    for i, pieces in enumerate(p.held):
        p.held[i] = None
        for j, text in enumerate(pieces):
            seq = p.chunk_first_seq[i] + j * pass1.SEGMENT  # the piece's first event's
            gone = ends = None
            if p.left_out is not None:
                ends = p.ends[i][j * pass1.SEGMENT: (j + 1) * pass1.SEGMENT]
                lo, hi = np.searchsorted(p.left_out, [seq, seq + len(ends)])
                gone = p.left_out[lo:hi] - seq
            if (i, j) in moved:
                text = _move(text, seq, p, gone)
            elif gone is not None and len(gone):
                text = _without(text, ends, gone)
            if text:
                if not first:
                    yield b","
                yield text
                first = False
        if on_progress is not None:
            on_progress(stored * (i + 1) // len(p.held))
    if layout.array_form:
        yield b"]"
    else:
        trailer = orjson.dumps(layout.trailer)[1:-1]
        yield b"]" + (b"," + trailer if trailer else b"") + b"}"


def _move_tail(text: bytes, first_seq: int, p: Plan) -> bytes:
    """The tail piece holds the trailer too: re-emit its events, keep the rest out."""
    events_text = orjson.dumps(chunks._parse_tail(text, chunks.Layout(array_form=p.layout.array_form)))
    return _move(events_text[1:-1], first_seq, p) + (b"]" if p.layout.array_form else b"]}")


def _chunk_of_moves(p: Plan) -> tuple[np.ndarray, np.ndarray]:
    """For each moved seq: its chunk and its index within the chunk."""
    starts = np.array(p.chunk_first_seq, dtype=np.int64)
    seqs = np.fromiter(p.moved, dtype=np.int64, count=len(p.moved))
    chunk = np.searchsorted(starts, seqs, side="right") - 1
    return chunk, seqs - starts[chunk]
