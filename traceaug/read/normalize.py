"""Turn a Kineto / Chrome JSON trace into input Perfetto represents exactly.

Pass 1 (``plan``) reads the events once: header metadata, the columns of
complete events and flow events, thread names, and which events Perfetto
would drop for partial overlap (they get lanes). Pass 2 (``engine_stream``)
re-reads the file and yields the bytes the engine loads: timestamps rebased
on their text, chunks with moved events re-serialized, everything else
passed through as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from . import chunks, source
from .lanes import assign_lanes
from .rebase import Rebase, fix_negative_tids, us_to_ns

FLOW_PHASES = ("s", "t", "f")
_NUMBER = (int, float)


@dataclass
class Plan:
    """What pass 1 learned and pass 2 needs."""

    path: Path
    layout: chunks.Layout
    rebase: Rebase
    events: int = 0
    moved: dict[int, int] = field(default_factory=dict)  # seq -> lane (slices and flows)
    chunk_first_seq: list[int] = field(default_factory=list)
    lane_threads: dict[tuple, str] = field(default_factory=dict)  # (pid, tid, lane) -> name
    thread_names: dict[tuple, str] = field(default_factory=dict)

    moved_slices: int = 0
    moved_flows: int = 0

    @property
    def base_ns(self) -> int:
        return self.rebase.base_ns


class _Columns:
    """Columns of complete and flow events gathered while scanning."""

    def __init__(self) -> None:
        self.keys: dict[tuple, int] = {}
        self.x: list[tuple[int, int, int, int]] = []  # key, ts, dur, seq
        self.flows: list[tuple[int, int, int]] = []  # key, ts, seq

    def key(self, ev: dict) -> int:
        k = (ev.get("pid"), ev.get("tid"))
        try:
            n = self.keys.get(k)
        except TypeError:  # unhashable pid/tid: let Perfetto judge it as is
            return -1
        if n is None:
            self.keys[k] = n = len(self.keys)
        return n

    def add(self, events: list, first_seq: int, names: dict) -> None:
        x_append, f_append, key = self.x.append, self.flows.append, self.key
        for seq, ev in enumerate(events, first_seq):
            try:
                ph = ev["ph"]
            except (KeyError, TypeError):
                continue
            if ph == "X":
                ts, dur = ev.get("ts"), ev.get("dur")
                if ts.__class__ in _NUMBER and dur.__class__ in _NUMBER:
                    x_append((key(ev), us_to_ns(ts), us_to_ns(dur), seq))
            elif ph in FLOW_PHASES:
                ts = ev.get("ts")
                if ts.__class__ in _NUMBER:
                    f_append((key(ev), us_to_ns(ts), seq))
            elif ph == "M" and ev.get("name") == "thread_name":
                args = ev.get("args")
                if isinstance(args, dict) and isinstance(args.get("name"), str):
                    try:
                        names[(ev.get("pid"), ev.get("tid"))] = args["name"]
                    except TypeError:
                        pass


def plan(path: Path, on_progress: Callable[[int], None] | None = None) -> Plan:
    """Pass 1: scan the trace; raises ``chunks.NotChromeJson`` for non-Chrome input."""
    rebase = Rebase()
    cols = _Columns()
    first_seqs: list[int] = []
    names: dict[tuple, str] = {}
    seq = 0
    layout = None
    for item in chunks.scan(source.iter_blocks(path, on_progress), rewrite=rebase):
        if isinstance(item, chunks.Layout):
            layout = item
            break
        first_seqs.append(seq)
        cols.add(item.events, seq, names)
        seq += len(item.events)
        item.events = None
    assert layout is not None
    p = Plan(path=path, layout=layout, rebase=rebase, events=seq,
             chunk_first_seq=first_seqs, thread_names=names)
    _place(p, cols)
    return p


def _place(p: Plan, cols: _Columns) -> None:
    """Assign lanes to the slices Perfetto would drop, and move their flow ends along."""
    if not cols.x:
        return
    x = np.array(cols.x, dtype=np.int64)
    lanes = assign_lanes(x[:, 0], x[:, 1], x[:, 2], x[:, 3])
    if not lanes:
        return
    p.moved.update(lanes)
    p.moved_slices = len(lanes)
    # A flow event at the same thread and time as a moved slice binds to it: move it too.
    moved_x = x[np.isin(x[:, 3], list(lanes))].tolist()
    where = {}
    for k, ts, _dur, seq in moved_x:
        where.setdefault((k, ts), lanes[seq])
    flows = 0
    for k, ts, seq in cols.flows:
        lane = where.get((k, ts))
        if lane is not None:
            p.moved[seq] = lane
            flows += 1
    p.moved_flows = flows
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


def _move(text: bytes, first_seq: int, p: Plan) -> bytes:
    events = orjson.loads(b"[" + text + b"]")
    for i, ev in enumerate(events):
        lane = p.moved.get(first_seq + i)
        if lane is None:
            continue
        tid = ev.get("tid")
        ev["tid"] = lane_tid(tid, lane)
        if ev.get("ph") == "X":
            args = ev.get("args")
            if not isinstance(args, dict):
                args = ev["args"] = {}
            args["traceaug_lane"] = lane
            args["traceaug_tid"] = tid
    return orjson.dumps(events)[1:-1]


def engine_stream(p: Plan, on_progress: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """Pass 2: the bytes to load into the engine."""
    layout = p.layout
    yield b"[" if layout.array_form else b'{"traceEvents":['
    if p.lane_threads:
        yield _lane_metadata(p)
        if layout.has_events:
            yield b","
    moved_chunks = _chunks_with_moves(p)
    for chunk in chunks.recut(source.iter_blocks(p.path, on_progress), layout):
        text = fix_negative_tids(p.rebase(chunk.text))
        if chunk.index in moved_chunks and not chunk.last:
            text = _move(text, p.chunk_first_seq[chunk.index], p)
        elif chunk.index in moved_chunks:
            text = _move_tail(text, p.chunk_first_seq[chunk.index], p)
        yield text
        if not chunk.last:
            yield b","


def _move_tail(text: bytes, first_seq: int, p: Plan) -> bytes:
    """The tail piece holds the trailer too: re-emit its events, keep the rest out."""
    events_text = orjson.dumps(chunks._parse_tail(text, chunks.Layout(array_form=p.layout.array_form)))
    return _move(events_text[1:-1], first_seq, p) + (b"]" if p.layout.array_form else b"]}")


def _chunks_with_moves(p: Plan) -> set[int]:
    if not p.moved:
        return set()
    starts = np.array(p.chunk_first_seq, dtype=np.int64)
    seqs = np.fromiter(p.moved, dtype=np.int64, count=len(p.moved))
    return set((np.searchsorted(starts, seqs, side="right") - 1).tolist())
