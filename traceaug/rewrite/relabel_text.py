"""A file's events relabelled (``merge.Relabel``) on their own text: the new ts, pids and flow ids put in
place of the old, as the rewriters splice (never the events written again, but for process metadata and
global instants), checked against the relabelled events; one chunk in memory at a time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from ..read import chunks, pass1, source
from ..read.rebase import Rebase, fix_negative_tids
from . import visible

if TYPE_CHECKING:
    from .merge_job import RankRelabel


def spliced(file: Path, chosen: Rebase, relabel: RankRelabel) -> Iterator[bytes]:
    """``file``'s events (read with the rebase ``chosen``) ``relabel``-ed, chunk by chunk: their own text
    with the new values spliced in (``merge_job.RankRelabel``: it learns process labels first)."""
    rebase = Rebase(chosen.prefix, chosen.sep, chosen.numeric, fixed=True)
    for item in pass1.rebased_chunks(source.iter_blocks(file), rebase):
        if isinstance(item, chunks.Layout):
            return
        if item.events:
            yield _chunk(item.text, item.events, item.last, relabel)


_VALUE = rb'(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|"(?:[^"\\]|\\.)*")'
_KEYS = {k: re.compile(rb'("%b"\s*:\s*)' % k.encode() + _VALUE) for k in ("ts", "pid", "id")}


def _chunk(text: bytes, events: list, last: bool, relabel: RankRelabel) -> bytes:
    """A chunk's events relabelled: its ``text`` (``last``: with the array's end and trailer) with each
    event's new ts, pid and flow id put in place of the old, tids unsigned, process metadata and global
    instants written again; re-serialized only if that text does not parse to the relabelled events."""
    relabel.learn(events)
    if not all(ev.__class__ is dict for ev in events):
        relabelled = [ev for ev in events if ev.__class__ is dict]
        for ev in relabelled:
            relabel.event(ev)
        return orjson.dumps(relabelled)[1:-1]
    if last:  # the events' text, without what follows the array
        text = _events_text(text)
    values: dict[str, list] = {"ts": [], "pid": [], "id": []}
    named = []
    for i, ev in enumerate(events):
        had = "ts" in ev, ev.get("id"), _rewritten(ev)
        ts = relabel.event(ev)
        if had[0]:
            values["ts"].append(ts)
        if "pid" in ev:
            values["pid"].append(_text(ev["pid"]))
        if "id" in ev:
            values["id"].append(None if ev["id"] is had[1] else _text(ev["id"]))
        if had[2]:
            named.append(i)
    out: bytes | None = text
    for key, new in values.items():
        out = _put(out, key, new) if out is not None else None
    if out is not None:
        out = fix_negative_tids(out)
        out = _renamed(out, [events[i] for i in named]) if named else out
    if out is not None and _same(_parsed(out), events, values["ts"]):
        return out
    return orjson.dumps(events)[1:-1]


def _same(parsed: list | None, events: list, ts: list) -> bool:
    """Whether ``parsed`` are the relabelled ``events``: their new ts (``ts``, the texts of those with a ts,
    None: kept) read as numbers for the comparison (``float`` and orjson both round correctly), then put
    back as the texts unless they are the same."""
    if parsed is None:
        return False
    timed = [(ev, t) for ev, t in zip((ev for ev in events if "ts" in ev), ts) if t is not None]
    for ev, t in timed:
        ev["ts"] = float(t) if b"." in t else int(t)
    if parsed == events:
        return True
    for ev, t in timed:
        ev["ts"] = orjson.Fragment(t)
    return False


def _parsed(text: bytes) -> list | None:
    """The events of a text of events (None: not JSON)."""
    try:
        return orjson.loads(b"".join((b"[", text, b"]")))
    except orjson.JSONDecodeError:
        return None


def _rewritten(ev: dict) -> bool:
    """Whether ``_chunk`` writes the event again (process metadata, a global instant)."""
    return (ev.get("ph") == "M" and ev.get("name") in ("process_name", "process_sort_index")) or (
        ev.get("ph") in ("i", "I") and ev.get("s") == "g")


def _renamed(text: bytes, named: list[dict]) -> bytes | None:
    """``text`` with its ``_rewritten`` events (``named``, relabelled, in order) written again; None
    unless there are as many as found."""
    pieces, pos, k = [], 0, 0
    for m in _REWRITTEN.finditer(text):
        if m.start() < pos:  # inside the one just written
            continue
        start = _event_start(text, pos, m.start())
        end = visible._object_end(text, start)
        if k == len(named) or not _rewritten(orjson.loads(text[start:end])):
            return None
        pieces += [text[pos:start], orjson.dumps(named[k])]
        pos, k = end, k + 1
    return b"".join([*pieces, text[pos:]]) if k == len(named) else None


def _event_start(text: bytes, lo: int, at: int) -> int:
    """Where the event holding ``at`` starts: after the last ``},{`` in ``text[lo:at]`` (else the first
    ``{`` from ``lo``); a ``},{`` in its args fails the caller's check."""
    bounds = list(chunks._BOUNDARY.finditer(text, lo, at))
    return bounds[-1].end() - 1 if bounds else text.index(b"{", lo)


_REWRITTEN = re.compile(rb'"name"\s*:\s*"process_(?:name|sort_index)"|"s"\s*:\s*"g"')


def _events_text(tail: bytes) -> bytes:
    """The text of the events that start the last chunk ``tail``: up to the last ``}`` closing an array
    after which the rest of the object parses (the caller's check confirms it)."""
    for m in reversed(list(_ARRAY_END.finditer(tail))):
        rest = tail[m.end():]
        try:
            if not rest.strip() or isinstance(orjson.loads(b'{"":0' + rest), dict):
                return tail[: m.start() + 1]
        except orjson.JSONDecodeError:
            continue
    return b""  # not found: the caller's check fails, and the events are written again


_ARRAY_END = re.compile(rb"\}\s*\]")


def _text(value) -> bytes:
    """A JSON value's text (an int without ``orjson.dumps``, whose result keeps a 4 KB buffer)."""
    return b"%d" % value if value.__class__ is int else orjson.dumps(value)


def _put(text: bytes, key: str, values: list) -> bytes | None:
    """``text`` with the value of each ``"key": value`` replaced by the next of ``values`` (None: kept);
    None unless there are as many as values."""
    it = iter(values)

    def put(m: re.Match) -> bytes:
        new = next(it, None)
        return m.group(0) if new is None else m.group(1) + new

    out, n = _KEYS[key].subn(put, text)
    return out if n == len(values) else None
