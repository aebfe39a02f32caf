"""The ``"traceaug"`` marker key after the opening ``{`` (each rewriter applied, with the events and bytes
it put after the ``[``) and those events (``Prior``), read back for ``rewrite.splice`` and ``view.server``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..errors import TraceaugError
from . import chunks, source

UI_ORDER = "ui_order"  # the diff marker's option for ``view.server``: A's groups, then B's (merge: ranks)
UI_WINDOW = "ui_window_ns"  # a merge marker's option for ``view.server``: [start, end] shown first
UI_PINS = "ui_pins"  # a diff marker's option for ``view.server``: regexes of tracks to pin

MARK_KEY = b'"traceaug"'


def find_marker(head: bytes) -> tuple[int, int, dict] | None:
    """(start, end, value) of the marker key (and the comma after it) right after the
    opening ``{`` of ``head``, or None."""
    i = chunks.skip_space(head, 0)
    if head[i : i + 1] != b"{":
        return None
    start = chunks.skip_space(head, i + 1)
    if not head.startswith(MARK_KEY, start):
        return None
    j = chunks.skip_space(head, start + len(MARK_KEY))
    if head[j : j + 1] != b":":
        return None
    j = chunks.skip_space(head, j + 1)
    text = head[j:].decode("utf-8", "surrogateescape")
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    end = chunks.skip_space(head, j + len(text[:end].encode("utf-8", "surrogateescape")))
    if not isinstance(value, dict) or head[end : end + 1] != b",":
        return None
    return start, end + 1, value


@dataclass
class Prior:
    """What traceaug added to a file before."""

    entries: list[dict] = field(default_factory=list)  # the marker's rewriter entries
    blocks: list[bytes] = field(default_factory=list)  # each entry's events, joined by ``,``
    skip: int = 0  # bytes after the ``[`` they take, with the comma after them
    events_follow: bool | None = None  # None: no prior additions (the layout says)

    def others(self, name: str) -> tuple[list[dict], list[bytes]]:
        """The entries and blocks of every rewriter but ``name``."""
        kept = [(e, b) for e, b in zip(self.entries, self.blocks) if e.get("name") != name]
        return [e for e, _ in kept], [b for _, b in kept]


def _known_entries(value: dict) -> list[dict] | None:
    entries = value.get("rewriters")
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("events"), int)
            and isinstance(e.get("bytes"), int) and e["events"] >= 0 and e["bytes"] >= 0
            for e in entries):
        return None  # an older marker: its additions cannot be told apart from the input's
    return entries


# Counter tracks an older traceaug counters (markers with "command", no event counts) put
# right after the ``[``: a run of such events is its addition, replaced like any other.
_OLDER_COUNTERS = ("Queue length", "Memory bandwidth (GB/s)")


def _older_entry(value: dict, blocks: Iterator[bytes], body: bytearray) -> dict | None:
    """The entry an older ``counters`` marker would have had: its leading run of counter events after the
    ``[`` (read from ``blocks`` into ``body``); None for other markers (their additions are kept)."""
    if value.get("command") != "counters" or "rewriters" in value:
        return None
    decoder, pos, end, count = json.JSONDecoder(), 0, 0, 0
    text = body.decode("latin-1")  # one char per byte: offsets are byte offsets
    while True:
        pos = chunks.skip_space(body, pos)
        try:
            event, after = decoder.raw_decode(text, pos)
        except ValueError:  # cut by the block's end, unless far past the last event
            block = next(blocks, None) if len(body) - end < 1 << 20 else None
            if block is None:
                break
            body += block
            text = body.decode("latin-1")
            continue
        if not (isinstance(event, dict) and event.get("ph") == "C"
                and event.get("name") in _OLDER_COUNTERS):
            break
        count, end = count + 1, after
        pos = chunks.skip_space(body, after)
        if body[pos : pos + 1] == b",":
            pos += 1
    return {"name": "counters", "version": value.get("version"), "options": {},
            "events": count, "bytes": end}


def read_prior(src: Path) -> Prior:
    """The ``Prior`` of ``src`` (empty for a file traceaug did not write); a marker that does
    not match the events after the ``[`` is an error (the file was edited)."""
    source.check_readable(src)
    try:
        layout, head, rest = chunks.split_header(source.iter_blocks(src))
    except (chunks.NotChromeJson, chunks.MalformedJson):
        return Prior()  # not a file traceaug wrote: the load reports what it is
    try:
        found = None if layout.array_form else find_marker(head)
        if found is None:
            return Prior()
        entries = _known_entries(found[2])
        body = bytearray()
        if entries is None:  # an older counters output: its counter events lead the array
            older = _older_entry(found[2], rest, body)
            entries = [older] if older and older["events"] else []
        need = sum(e["bytes"] + 1 for e in entries) + 1
        for block in rest:
            if len(body) > need + 64:
                break
            body += block
    finally:
        rest.close()
    if not entries:
        return Prior()
    pos, blocks = 0, []
    for e in entries:
        block = bytes(body[pos : pos + e["bytes"]])
        pos += e["bytes"]
        try:
            ok = len(orjson.loads(b"[" + block + b"]")) == e["events"]
        except orjson.JSONDecodeError:
            ok = False
        if not ok or (e["bytes"] and body[pos : pos + 1] not in (b",", b"]")):
            raise TraceaugError(f"{src}: its traceaug marker does not match the events after it "
                                "(was the file edited?)")
        if e["bytes"] and body[pos : pos + 1] == b",":
            pos += 1
        blocks.append(block)
    follow = body[chunks.skip_space(body, pos) : chunks.skip_space(body, pos) + 1] not in (b"]", b"")
    return Prior(entries=entries, blocks=blocks, skip=pos, events_follow=follow)


