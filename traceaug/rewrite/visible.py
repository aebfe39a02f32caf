"""The byte edits (unless ``--keep-bytes``) that make the Perfetto UI show every event: negative tids made
unsigned, and events it would drop moved to ``<thread> [overlap lane N]`` threads; other bytes kept."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import orjson

from ..read import ui_import
from ..read.chunks import _BOUNDARY
from ..read.rebase import fix_negative_tids

if TYPE_CHECKING:
    from ..read.normalize import Plan

_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:,]')
NAME = "ui-visible"  # its entry in the output's marker (its block: the lane threads' metadata)


@dataclass
class Edits:
    """Per pass-1 chunk: event position -> (lane, tid after the unsigned fix, lane thread, is a slice),
    byte range in the decompressed input, event count; the lane threads' metadata events; marker summary."""

    chunks: dict[int, dict[int, tuple[int, object, str, bool]]] = field(default_factory=dict)
    ranges: dict[int, tuple[int, int | None]] = field(default_factory=dict)  # None: to the end
    counts: dict[int, int] = field(default_factory=dict)
    metadata: list[bytes] = field(default_factory=list)
    moved: list[list[int]] = field(default_factory=list)  # [event index in the input, lane]
    slices: int = 0
    flows: int = 0
    negative_tid_threads: list[list] = field(default_factory=list)  # [pid, tid as written]


def edits(plan: Plan, prior_events: int = 0, prior_bytes: int = 0) -> Edits:
    """The moves ``read.ui_import.moves`` predicts for this plan's file, placed in its chunks.
    ``prior_events`` / ``prior_bytes``: earlier traceaug additions after the ``[`` (never moved)."""
    m = ui_import.moves(plan.ui, plan.base_ns, plan.thread_names)
    m.slices = {i: v for i, v in m.slices.items() if i >= prior_events}
    m.flows = {i: v for i, v in m.flows.items() if i >= prior_events}
    metadata = [orjson.dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": name,
                              "args": {"name": name}})
                for (pid, _tid, _lane), name in m.lane_threads.items()]
    out = Edits(metadata=metadata, slices=len(m.slices), flows=len(m.flows),
                negative_tid_threads=[[pid, tid] for pid, tid in plan.ui.keys
                                      if tid.__class__ is int and tid < 0])
    if not m.slices:
        return out
    first = np.array(plan.ui.first_index, dtype=np.int64)
    everything = {**{i: (*v, True) for i, v in m.slices.items()},
                  **{i: (*v, False) for i, v in m.flows.items()}}
    index = np.array(sorted(everything), dtype=np.int64)
    chunk = np.searchsorted(first, index, side="right") - 1
    layout = plan.layout
    body_first = np.maximum(first, prior_events)  # the first event copied as it is, per chunk
    for i, c in zip(index.tolist(), chunk.tolist()):
        out.chunks.setdefault(c, {})[i - int(body_first[c])] = everything[i]
        out.moved.append([i - prior_events, everything[i][0]])
    for c in out.chunks:
        start = layout.events_start if c == 0 else layout.cuts[c - 1]
        out.ranges[c] = (max(start, layout.events_start + prior_bytes),
                         layout.cuts[c] if c < len(layout.cuts) else None)
        end = first[c + 1] if c + 1 < len(first) else plan.ui.events
        out.counts[c] = int(end - body_first[c])
    return out


def apply(plan: Plan | None, copy) -> None:
    """Make ``copy`` (a ``splice.Copy``) move what the UI would drop, unless it keeps bytes."""
    if plan is not None and not copy.keep_bytes:
        prior = copy.prior
        copy.edits = edits(plan, sum(e["events"] for e in prior.entries), prior.skip)


def changes(e: Edits | None) -> bool:
    """Whether the copy changes anything for the UI (else it gets no marker entry)."""
    return e is not None and bool(e.slices or e.negative_tid_threads)


def summary(e: Edits) -> dict:
    """The marker entry: the (pid, tid) of every negative tid made unsigned, and the events moved to lanes:
    counts and [index in the input's events after earlier traceaug additions, lane] of each."""
    return {"negative_tid_threads": e.negative_tid_threads,
            "moved_to_lanes": {"slices": e.slices, "flows": e.flows, "events": e.moved}}


def _object_end(text: bytes, start: int) -> int:
    """End of the JSON object that begins at ``start`` (its ``}`` + 1), found by parsing."""
    j = text.find(b"}", start)
    while j != -1:
        try:
            if isinstance(orjson.loads(text[start : j + 1]), dict):
                return j + 1
        except orjson.JSONDecodeError:
            pass
        j = text.find(b"}", j + 1)
    raise ValueError("no JSON object")


def _skip(text: bytes, pos: int) -> int:
    """Past white space and commas (to the next event, or to a value after its colon)."""
    n = len(text)
    while pos < n and text[pos] in b" \t\r\n,":
        pos += 1
    return pos


def event_spans(text: bytes, count: int, wanted: int) -> list[tuple[int, int]]:
    """(start, end) of the first ``wanted`` of a chunk text's ``count`` events: at the ``},{`` boundaries when
    there are exactly ``count - 1``, else object by object (a ``},{`` inside a string or nested array)."""
    start = _skip(text, 0)
    bounds = [m.span() for m in _BOUNDARY.finditer(text, start)]
    if len(bounds) == count - 1:
        starts = [start] + [e - 1 for _s, e in bounds]
        ends = [s + 1 for s, _e in bounds]
        if wanted == count:
            ends.append(_object_end(text, starts[-1]))
        return list(zip(starts, ends))[:wanted]
    spans = []
    pos = start
    while len(spans) < wanted:
        end = _object_end(text, pos)
        spans.append((pos, end))
        pos = _skip(text, end)
    return spans


def move_event(text: bytes, lane: int, tid, thread: str, is_slice: bool) -> bytes:
    """One event's text on lane ``lane`` of its thread ``tid`` (the lane thread's tid:
    ``thread``), and for a slice with the lane args; every other byte as it was."""
    members = _values(text)
    new_tid = orjson.dumps(thread)
    edits: list[tuple[int, int, bytes]] = []
    close = text.rindex(b"}")
    if b"tid" in members:
        edits.append((*members[b"tid"], new_tid))
    else:
        edits.append((close, close, b',"tid":' + new_tid))
    if is_slice:
        extra = b'"traceaug_lane":' + orjson.dumps(lane) + b',"traceaug_tid":' + orjson.dumps(tid)
        span = members.get(b"args")
        if span is None:
            edits.append((close, close, b',"args":{' + extra + b"}"))
        elif text[span[0] : span[0] + 1] == b"{":
            inner = text[span[0] + 1 : span[1] - 1].strip()
            edits.append((span[0] + 1, span[0] + 1, extra + (b"," if inner else b"")))
        else:
            edits.append((*span, b"{" + extra + b"}"))
    out = text
    for s, e, new in sorted(edits, reverse=True):
        out = out[:s] + new + out[e:]
    return out


def _values(text: bytes) -> dict[bytes, tuple[int, int]]:
    """Top-level keys of one JSON object's text -> the span of their value."""
    out: dict[bytes, tuple[int, int]] = {}
    depth = 0
    key: bytes | None = None
    expecting_key = True
    value_start = -1
    for m in _TOKEN.finditer(text):
        tok = m.group()
        c = tok[:1]
        if depth == 1:
            if c == b'"' and expecting_key:
                key = orjson.loads(tok).encode()
                continue
            if c == b":":
                expecting_key = False
                value_start = _skip(text, m.end())
                continue
            if c in b",}":
                if key is not None:
                    out[key] = (value_start, len(text[:m.start()].rstrip()))
                key, expecting_key = None, True
                if c == b"}":
                    depth -= 1
                continue
        if c in b"{[":
            depth += 1
        elif c in b"}]":
            depth -= 1
    return out


def apply_text(text: bytes, offset: int, e: Edits | None, fix_tids: bool) -> bytes:
    """Input text from byte ``offset`` of the decompressed file with the moves of every chunk inside it (none
    with moves may straddle its ends), then negative tids made unsigned."""
    if e is not None and e.chunks:
        end = offset + len(text)
        spans = []
        for c in sorted(e.chunks):
            start, stop = e.ranges[c]
            stop = end if stop is None else stop
            if offset <= start < end and stop <= end:
                spans.append((c, start - offset, stop - offset))
        text = move_in(text, spans, e)
    return fix_negative_tids(text) if fix_tids else text


def move_in(text: bytes, spans: list[tuple[int, int, int]], e: Edits) -> bytes:
    """``text`` with the moves of each chunk ``c`` whose text is ``text[lo:hi]`` ((c, lo, hi)
    in order)."""
    pieces, pos = [], 0
    for c, lo, hi in spans:
        pieces += [text[pos:lo], _edit_chunk(text[lo:hi], e.counts[c], e.chunks[c])]
        pos = hi
    pieces.append(text[pos:])
    return b"".join(pieces)


def _edit_chunk(text: bytes, count: int, moves: dict[int, tuple[int, object, str, bool]]) -> bytes:
    spans = event_spans(text, count, max(moves) + 1)
    pieces, pos = [], 0
    for k in sorted(moves):
        s, end = spans[k]
        pieces += [text[pos:s], move_event(text[s:end], *moves[k])]
        pos = end
    pieces.append(text[pos:])
    return b"".join(pieces)
