"""Split a Chrome JSON trace into header, event chunks and trailer, streaming, each cut confirmed by orjson
parsing: pass 1 finds the cuts (``scan``), pass 2 re-reads and cuts at the same offsets (``recut``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import orjson

from . import source

CHUNK = 1 << 20  # small: pass 1 holds one chunk's parsed events at a time (per process)
MAX_EVENT = 128 << 20  # no cut parses within this much text: malformed JSON
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")  # JSON whitespace only
_SPACE = b" \t\n\r"
_CONTROL_SPACE = re.compile(rb"[\n\r\t]")
_ESCAPED_QUOTE = re.compile(rb'(\\+)"')
_TRIES = 8  # boundary candidates outside strings tried (parsed) before reading on
_HEADER_LIMIT = 64 << 20
_TAIL = 64 << 10  # the end of the buffer, where cut candidates are looked for first


def skip_space(buf: bytes | bytearray, i: int = 0) -> int:
    """The first index at or after ``i`` that is not JSON whitespace, else ``len(buf)``:
    ``lstrip`` on 1 MB slices (C speed; a regex class scans at a tenth of it)."""
    while i < len(buf):
        piece = buf[i: i + (1 << 20)]
        kept = len(piece.lstrip(_SPACE))
        if kept:
            return i + len(piece) - kept
        i += len(piece)
    return max(i, len(buf))


class NotChromeJson(ValueError):
    """The text is not a Chrome JSON trace we can split (the engine may still read it)."""


def not_json(head: bytes) -> str | None:
    """Why text whose first bytes are ``head`` is not a JSON trace (None: it may be one):
    what it starts with, said as what the file is not."""
    body = head.lstrip(_SPACE)
    if not body or body[:1] in (b"{", b"["):
        return None
    if body.startswith(source.UTF8_BOM):
        return "starts with a UTF-8 byte order mark, which JSON does not allow"
    if body.startswith(source.GZIP_MAGIC):
        return "a gzip of a gzip file, not a trace (gunzip it once)"
    if body[:4] in source.ZIP_MAGICS:
        return "a zip archive, not a trace (unzip it)"
    if not body.strip(b"\0"):
        return "NUL bytes only, not JSON"
    return f"starts with {source.shown_byte(body[0])}, not {{ or [: not JSON"


class MalformedJson(ValueError):
    """A Chrome JSON trace (its header read) whose event array is not valid JSON: every
    command refuses it, at once, with where and what (never the engine's echo of the text)."""


def malformed(text: bytes, e: orjson.JSONDecodeError, offset: int, skip: int = 1) -> MalformedJson:
    """The error for ``e``, raised parsing ``text`` behind ``skip`` added bytes; ``offset``:
    where ``text`` starts in the file (near: rebasing may have shortened timestamps)."""
    at = max(e.pos - skip, 0)
    if at >= len(text.rstrip()):
        return MalformedJson("JSON trace file is incomplete: malformed JSON at its end (truncated?)")
    near = text[max(at - 20, 0): at + 20].decode("utf-8", "replace")
    return MalformedJson(f"invalid JSON near byte {offset + at}: {e.msg} (at {near!r})")


@dataclass
class Layout:
    """Where the pieces of a trace are, as offsets into the decompressed text."""

    array_form: bool = False  # a bare ``[...]`` array instead of ``{"traceEvents": [...]}``
    header: dict = field(default_factory=dict)
    trailer: dict = field(default_factory=dict)
    events_start: int = 0  # first byte after ``[``
    tail_start: int = 0  # where the last chunk starts (error messages)
    cuts: list[int] = field(default_factory=list)  # chunk i spans cuts[i-1]..cuts[i]
    has_events: bool = False


@dataclass
class Chunk:
    """One piece of the event array: its text and (in pass 1) its parsed events."""

    index: int
    text: bytes
    last: bool  # the tail piece: events, then ``]`` and the trailer
    events: list | None = None
    array_form: bool = False
    exact: bool = False  # its timestamps needed the exact (slow) rebase
    ts: object = None  # pass 1: the events' top-level ts column, when the rebase check made it
    write: bool = False  # pass 1: ``ts`` holds rebased values the events do not have yet
    skimmed: int = 0  # pass 1: events cut from the text unparsed (``read.skim``), not in ``events``


class _Buffer:
    """Accumulates blocks and tracks the stream offset of its first byte."""

    def __init__(self, blocks: Iterable[bytes]) -> None:
        self.blocks = iter(blocks)
        self.buf = bytearray()
        self.base = 0
        self.eof = False
        self.space_from = 0  # stream offset where the whitespace ending the buffer starts

    def fill(self) -> bool:
        block = None if self.eof else next(self.blocks, None)
        self.eof = block is None
        if block is not None:
            kept = len(block.rstrip(_SPACE))
            if kept:
                self.space_from = self.base + len(self.buf) + kept
            self.buf += block
        return not self.eof

    def drop_to(self, offset: int) -> None:
        del self.buf[: offset - self.base]
        self.base = offset

    def skip_space(self, pos: int, comma: bool = False) -> tuple[int, bool]:
        """(the stream offset of the first byte at or after ``pos`` that is not whitespace, whether a
        ``comma`` was passed on the way): runs of any length pass at C speed, never held."""
        passed = False
        while True:
            i = pos - self.base
            if i >= len(self.buf):
                self.drop_to(self.base + len(self.buf))
                if not self.fill():
                    return pos, passed
                continue
            i = skip_space(self.buf, i)
            pos = self.base + i
            if i == len(self.buf):
                continue
            if comma and not passed and self.buf[i] == ord(","):
                pos, passed = pos + 1, True
            else:
                return pos, passed


def _find_header(blocks: Iterable[bytes]) -> tuple[_Buffer, Layout]:
    """The buffer of ``blocks`` and the layout, once the event array is found; leading whitespace is
    skipped by one C scan per block (never rescanned), and refused past ``_HEADER_LIMIT`` or when it is
    all the input holds."""
    b = _Buffer(blocks)
    layout = Layout()
    b.fill()
    start = 0  # first byte that is not whitespace, once found
    searched = 0  # where the next search for the events key starts
    while True:
        if start == len(b.buf) or b.buf[start] in b" \t\n\r":
            start = skip_space(b.buf, start)
            searched = start
        if start < len(b.buf):
            if b.buf[start] == ord("["):
                layout.array_form = True
                layout.events_start = start + 1
                return b, layout
            if b.buf[start] != ord("{"):
                raise NotChromeJson(not_json(bytes(b.buf[start: start + 64])))
            m = _EVENTS_KEY.search(b.buf, searched)
            if m:
                try:
                    layout.header = orjson.loads(bytes(b.buf[start: m.end()]) + b"]}")
                except orjson.JSONDecodeError:
                    raise NotChromeJson("malformed JSON before traceEvents") from None
                layout.header.pop("traceEvents", None)
                layout.events_start = m.end()
                return b, layout
            searched = max(start, len(b.buf) - 64)  # a key cut by the block's end is found next time
        elif start > source.SPACE_LIMIT:
            raise MalformedJson(f"not a trace: more than {source.SPACE_LIMIT >> 20} MB of whitespace "
                                "before any JSON")
        if len(b.buf) - start > _HEADER_LIMIT or not b.fill():
            if start == len(b.buf):
                raise MalformedJson("not a trace: only whitespace")
            if len(b.buf) - start > _HEADER_LIMIT and _mostly_space(b.buf, start):
                raise MalformedJson(f"not a trace: more than {_HEADER_LIMIT >> 20} MB before "
                                    "traceEvents, most of it whitespace")  # every command's verdict
            raise NotChromeJson("no traceEvents array")


def _mostly_space(buf: bytearray, start: int) -> bool:
    """Whether whitespace is over half of ``buf`` from ``start`` (counted at C speed)."""
    text = bytes(buf[start:])
    return len(text.translate(None, _SPACE)) * 2 < len(text)


def split_header(blocks: Iterable[bytes]) -> tuple[Layout, bytes, Iterator[bytes]]:
    """A layout with the header fields, the text before ``events_start`` and the rest, streamed."""
    b, layout = _find_header(blocks)
    head, first = _copy(b.buf, 0, layout.events_start), _copy(b.buf, layout.events_start, len(b.buf))
    del b.buf[:]

    def rest() -> Iterator[bytes]:
        if first:
            yield first
        yield from b.blocks

    return layout, head, rest()


def parse(text: bytes, last: bool, layout: Layout) -> list:
    """A chunk's events (``last``: the tail piece, whose trailer goes into ``layout``)."""
    # ``join``: one copy of the text in brackets (``+`` makes two: 2 MB a chunk)
    return _parse_tail(text, layout) if last else orjson.loads(b"".join((b"[", text, b"]")))


def _as_is(text: bytes, cut: bool = True) -> tuple[bytes, int]:
    return text, 0


def parse_prepared(raw: bytes, last: bool, layout: Layout, prepare: Callable
                   ) -> tuple[bytes, list, int]:
    """``prepare(raw)``'s text, its events and how many events it cut; when a cut text does
    not parse, those of ``prepare(raw, False)`` (its errors are the whole text's)."""
    text, skimmed = prepare(raw)
    if skimmed:
        try:
            return text, parse(text, last, layout), skimmed
        except (orjson.JSONDecodeError, NotChromeJson, MalformedJson):
            text, skimmed = prepare(raw, False)
    return text, parse(text, last, layout), 0


def _parse_tail(text: bytes, layout: Layout) -> list:
    try:
        if layout.array_form:
            body = text.rstrip()
            if not body.endswith(b"]"):  # Chrome JSON allows an unclosed array
                body = body.rstrip(b", \n\r\t") + b"]"
            return orjson.loads(b"[" + body)
        obj = orjson.loads(b'{"traceEvents":[' + text)
    except orjson.JSONDecodeError as e:
        skip = 1 if layout.array_form else len(b'{"traceEvents":[')
        raise malformed(text, e, layout.tail_start, skip) from None
    events = obj.pop("traceEvents")
    layout.trailer = obj
    return events


def _quotes(buf: bytearray, start: int, end: int) -> int:
    """Unescaped ``"`` in ``buf[start:end]`` (a quote after an odd run of backslashes is escaped)."""
    n = buf.count(b'"', start, end)
    # Look for a lone backslash first (memchr, fast): finding the pair is slow, JSON being all quotes.
    if buf.find(b"\\", start, end) != -1 and buf.find(b'\\"', start, end) != -1:
        n -= sum(len(m.group(1)) % 2 for m in _ESCAPED_QUOTE.finditer(buf, start, end))
    return n


def _cut_candidates(buf: bytearray, start: int, window: int, confirm: bool) -> Iterator[re.Match]:
    """``},{`` cuts after ``window``, best first: the last in the final ``_TAIL`` bytes holding a newline,
    CR or tab (never in a string; else the last if ``confirm``), then those outside strings, last first."""
    tail = max(window, len(buf) - _TAIL)
    matches = list(_BOUNDARY.finditer(buf, tail))
    sure = next((m for m in reversed(matches) if _CONTROL_SPACE.search(m.group())), None)
    if sure is not None:
        yield sure
    elif matches and confirm:
        yield matches[-1]
    yield from _outside_strings(buf, start, matches)
    if tail > window:
        yield from _outside_strings(buf, start, list(_BOUNDARY.finditer(buf, window, tail)))


def _outside_strings(buf: bytearray, start: int, matches: list[re.Match]) -> Iterator[re.Match]:
    """Those of ``matches`` outside JSON strings, last first: quotes counted up to the last, then between
    matches (each begins with ``}``, so no backslash run crosses into the next segment)."""
    if not matches:
        return
    at = matches[-1].start()
    parity = _quotes(buf, start, at) % 2
    for match in reversed(matches):
        parity = (parity + _quotes(buf, match.start(), at)) % 2
        at = match.start()
        if parity == 0:
            yield match


def _copy(buf: bytearray, start: int, end: int) -> bytes:
    """``bytes(buf[start:end])`` with one copy, not two."""
    with memoryview(buf) as view:
        return bytes(view[start:end])


def scan(blocks: Iterable[bytes], prepare: Callable = _as_is, confirm: bool = True
         ) -> Iterator[Chunk | Layout]:
    """Pass 1: parsed chunks, then the ``Layout``. ``prepare(text, cut)`` -> (text, events cut, never first
    or last), redone uncut if unparsable. ``confirm=False``: cut unparsed; the caller rescans on a failure."""
    b, layout = _find_header(blocks)
    pos, _ = b.skip_space(layout.events_start)
    while True:
        avail = len(b.buf) - (pos - b.base)
        if not b.eof and avail < CHUNK and b.fill():
            continue
        if b.eof:
            layout.tail_start = pos
            raw = _copy(b.buf, pos - b.base, len(b.buf))
            text, events, skimmed = (parse_prepared(raw, True, layout, prepare) if confirm
                                     else (prepare(raw, False)[0], None, 0))
            layout.has_events = layout.has_events or bool(events) or skimmed > 0
            yield Chunk(len(layout.cuts), text, True, events, layout.array_form, skimmed=skimmed)
            yield layout
            return
        start = pos - b.base
        window = max(start, len(b.buf) - (2 << 20))
        last, text, events, skimmed = None, b"", None, 0
        for n, match in enumerate(_cut_candidates(b.buf, start, window, confirm)):
            raw = _copy(b.buf, start, match.start() + 1)
            if not confirm:
                text, _ = prepare(raw, False)
                last, events = match, []
                break
            try:
                text, events, skimmed = parse_prepared(raw, False, layout, prepare)
            except orjson.JSONDecodeError as e:
                text, _ = prepare(raw, False)  # the text that failed
                if e.pos <= len(text):  # before the cut: the text itself is not JSON
                    raise malformed(text, e, b.base + start) from None
                if n + 1 < _TRIES:
                    continue  # a `},{` inside an args object: try an earlier one
                break
            last = match
            break
        if last is None and (cut := _before_space(b, start)) is not None:
            raw = _copy(b.buf, start, cut)
            try:
                text, events, skimmed = (parse_prepared(raw, False, layout, prepare) if confirm
                                         else (prepare(raw, False)[0], [], 0))
            except orjson.JSONDecodeError as e:
                text, _ = prepare(raw, False)
                if e.pos <= len(text):
                    raise malformed(text, e, b.base + start) from None
            else:  # a long run of whitespace after an event: cut before it, then pass it
                layout.cuts.append(b.base + cut)
                layout.has_events = True
                yield Chunk(len(layout.cuts) - 1, text, False, events if confirm else None,
                            layout.array_form, skimmed=skimmed)
                pos = _next_event(b, b.base + cut)
                continue
        if last is None:
            if avail > MAX_EVENT or not b.fill():
                if b.eof:
                    continue
                raise NotChromeJson("malformed JSON in traceEvents")
            continue
        layout.cuts.append(b.base + last.start() + 1)
        layout.has_events = True
        yield Chunk(len(layout.cuts) - 1, text, False, events if confirm else None, layout.array_form,
                    skimmed=skimmed)
        pos = b.base + last.end() - 1
        b.drop_to(pos)


def _before_space(b: _Buffer, start: int) -> int | None:
    """Where to cut (after an event's ``}``) before the run of whitespace ending the buffer, when the
    run is over ``CHUNK`` and follows ``}`` or ``},``; else None."""
    run_at = b.space_from - b.base
    if len(b.buf) - run_at <= CHUNK or run_at <= start:
        return None
    at = max(start, run_at - 64)
    head = bytes(b.buf[at:run_at]).rstrip(_SPACE)
    if head.endswith(b","):
        head = head[:-1].rstrip(_SPACE)
    return at + len(head) if head.endswith(b"}") else None


def _next_event(b: _Buffer, cut: int) -> int:
    """Where the event after a cut at ``cut`` starts: past whitespace and the comma (streamed,
    however long); MalformedJson when no comma or ``]`` comes, or a comma comes before ``]``."""
    pos, comma = b.skip_space(cut, comma=True)
    after = b.buf[pos - b.base: pos - b.base + 1]
    if after and (comma and after == b"]" or not comma and after != b"]"):
        raise MalformedJson(f"invalid JSON near byte {pos}: "
                            f"{'a comma before ]' if comma else 'expected , or ] after an event'}")
    b.drop_to(pos)
    return pos


def recut(blocks: Iterable[bytes], layout: Layout) -> Iterator[Chunk]:
    """Pass 2: yield the same chunks' raw text (not parsed) at the recorded cuts."""
    b = _Buffer(blocks)
    pos, _ = b.skip_space(layout.events_start)
    for index, cut in enumerate(layout.cuts):
        while b.base + len(b.buf) < cut and b.fill():
            pass
        yield Chunk(index, bytes(b.buf[pos - b.base : cut - b.base]), False)
        pos, _ = b.skip_space(cut, comma=True)  # to the next event
        b.drop_to(pos)
    while b.fill():
        pass
    yield Chunk(len(layout.cuts), bytes(b.buf[pos - b.base :]), True)
