"""Write a copy of a trace with events added, every original byte kept in place.

The added events go right after the ``[`` that opens the event array and a
``"traceaug"`` marker key right after the opening ``{``; everything else is
copied through as it was. Output is gzip when its name ends in ``.gz``, is
written to a temporary file and renamed into place, and never replaces the
input.

A ``Copy`` starts before its events are known: for gzip output a thread deflates
the original text after the ``[`` (nearly all of it) while the caller computes the
events, so that finishing deflates only the header and the added events.

Unless ``keep_bytes``, the copy is one the Perfetto UI shows in full (``visible``): negative
tids are made unsigned as the text streams, and the events the UI would drop are moved to
lanes once the plan says which (``visible.apply`` sets ``Copy.edits``). The thread deflates
the text in independent segments of about ``SEGMENT`` bytes, so finishing re-deflates only
the segments that hold such events, from the input read again.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from .. import __version__
from ..atomic import atomic_output
from ..errors import TraceaugError
from ..progress import Progress
from ..read import chunks, source
from . import pgzip, visible

GZIP_LEVEL = 3
SEGMENT = 1 << 20  # input bytes per independently deflated piece of the body


def check_output(src: Path, dst: Path) -> None:
    """Refuse to write over the input or into a missing directory."""
    if dst.resolve() == src.resolve() or (dst.exists() and os.path.samefile(src, dst)):
        raise TraceaugError(f"{dst}: is the input file; choose another output")
    if not dst.parent.is_dir():
        raise TraceaugError(f"{dst}: directory {dst.parent} does not exist")
    if dst.is_dir():
        raise TraceaugError(f"{dst}: is a directory, expected an output file")


def marker(command: str, ui_visible: dict | None = None) -> bytes:
    """The top-level key that tells traceaug (and people) who wrote the file, and what it
    changed for the Perfetto UI (``visible.summary``; absent when every byte was kept)."""
    record = {"tool": "traceaug", "version": __version__, "command": command}
    if ui_visible is not None:
        record["ui_visible"] = ui_visible
    return b'"traceaug":' + orjson.dumps(record) + b","


def _yield_to_others() -> None:
    """Lower this thread's scheduling priority (Linux sets nice per thread; elsewhere the
    call would name a process, so it is left alone)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


@dataclass
class _Segment:
    """One independently deflated piece of the body: its input bytes [start, end) (offsets
    in the decompressed input), where its deflated bytes are in the body file, its output
    length and the CRC-32 of the body's output up to its end."""

    start: int
    end: int
    at: int
    length: int
    size: int
    crc: int


def _deflate(text: bytes) -> bytes:
    c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(text) + c.flush(zlib.Z_SYNC_FLUSH)


class _Body:
    """The original text after the event array's ``[``, deflated by a low-priority thread
    into an unnamed temporary file beside the output: as one stream when its bytes are kept,
    else (``fix_tids``: negative tids made unsigned) in segments that can be redone."""

    def __init__(self, src: Path, directory: Path, fix_tids: bool) -> None:
        self.src = src
        self.fix_tids = fix_tids
        self.file = tempfile.TemporaryFile(dir=directory)
        self.done = 0  # compressed input bytes read so far (progress)
        self.layout: chunks.Layout | None = None
        self.head = b""
        self.segments: list[_Segment] = []
        self.crc, self.size = 0, 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        _yield_to_others()  # the caller's pass 1 and engine come first: this one can wait
        rest = None
        try:
            self.layout, self.head, rest = chunks.split_header(self._blocks())
            if not self.fix_tids:
                self._kept(rest)
                return
            offset = self.layout.events_start
            buf = bytearray()
            for block in rest:
                if self._stop.is_set():
                    break
                buf += block
                if len(buf) >= SEGMENT:
                    cut = buf.rfind(b",") + 1  # a tid is never cut in two
                    if cut:
                        self._add(bytes(buf[:cut]), offset)
                        offset += cut
                        del buf[:cut]
            if buf and not self._stop.is_set():
                self._add(bytes(buf), offset)
        except BaseException as e:  # reported by finish()
            self.error = e
        finally:
            if rest is not None:
                rest.close()  # the input file, when stopped early

    def _kept(self, rest: Iterator[bytes]) -> None:
        """Every byte as it is, in one deflate stream ended with the member's final block."""
        deflate = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        for block in rest:
            if self._stop.is_set():
                break
            self.crc = zlib.crc32(block, self.crc)
            self.size += len(block)
            self.file.write(deflate.compress(block))
        self.file.write(deflate.flush())

    def _add(self, text: bytes, offset: int) -> None:
        out = visible.apply_text(text, offset, None, self.fix_tids)
        data = _deflate(out)
        self.crc = zlib.crc32(out, self.crc)
        self.size += len(out)
        self.segments.append(_Segment(offset, offset + len(text), self.file.tell(), len(data),
                                      len(out), self.crc))
        self.file.write(data)

    def _blocks(self) -> Iterator[bytes]:
        def report(n: int) -> None:
            self.done = n

        return source.iter_blocks(self.src, report)

    def wait(self, progress: Progress) -> None:
        while self._thread.is_alive():
            self._thread.join(0.1)
            progress.update(self.done)
        if self.error is not None:
            raise self.error

    def redo(self, edits: visible.Edits | None) -> dict[int, tuple[int, bytes, int, int]]:
        """Segments holding moved events, deflated again with the moves: first segment ->
        (last segment, deflated bytes, CRC-32, output length)."""
        if edits is None or not edits.chunks:
            return {}
        starts = [s.start for s in self.segments]
        runs: list[list[int]] = []
        for c in sorted(edits.chunks):
            lo, hi = edits.ranges[c]
            first = bisect.bisect_right(starts, lo) - 1
            last = len(starts) - 1 if hi is None else bisect.bisect_left(starts, hi) - 1
            if runs and first <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], last)
            else:
                runs.append([first, last])
        texts = _read_ranges(self.src, [(self.segments[a].start, self.segments[b].end)
                                        for a, b in runs])
        out = {}
        for (a, b), text in zip(runs, texts):
            new = visible.apply_text(text, self.segments[a].start, edits, self.fix_tids)
            out[a] = (b, _deflate(new), zlib.crc32(new), len(new))
        return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.file.close()


def _read_ranges(src: Path, ranges: list[tuple[int, int]]) -> list[bytes]:
    """The decompressed input's bytes in each of ``ranges`` (sorted, disjoint)."""
    if not source.is_gzip(src):
        with open(src, "rb") as f:
            out = []
            for lo, hi in ranges:
                f.seek(lo)
                out.append(f.read(hi - lo))
            return out
    out, pos, buf = [], 0, bytearray()
    todo = iter(ranges)
    lo, hi = next(todo)
    blocks = source.iter_blocks(src)
    try:
        for block in blocks:
            end = pos + len(block)
            while True:
                if end > lo:
                    buf += block[max(lo - pos, 0) : min(hi, end) - pos]
                if end < hi:
                    break
                out.append(bytes(buf))
                buf.clear()
                nxt = next(todo, None)
                if nxt is None:
                    return out
                lo, hi = nxt
            pos = end
    finally:
        blocks.close()
    raise TraceaugError(f"{src}: the file changed while traceaug read it")


class Copy:
    """``src`` copied to ``dst`` with events added: start it early, ``finish`` it with the
    events (or ``cancel`` it: no file is left). Unless ``keep_bytes``, the copy is one the
    Perfetto UI shows in full (negative tids unsigned, and the moves in ``edits``)."""

    def __init__(self, src: Path, dst: Path, command: str, keep_bytes: bool = False) -> None:
        check_output(src, dst)
        self.src, self.dst, self.command = Path(src), Path(dst), command
        self.keep_bytes = keep_bytes
        self.edits: visible.Edits | None = None  # set by visible.apply once the plan is known
        self.body = (_Body(self.src, self.dst.parent, not keep_bytes)
                     if self.dst.name.endswith(".gz") else None)

    def finish(self, layout: chunks.Layout, events: list[bytes],
               show_progress: bool | None = None) -> int:
        """Write the copy with ``events`` after the ``[``; returns bytes written (raw)."""
        if self.edits is not None:
            events = self.edits.metadata + list(events)
        added = b",".join(events)
        if added and layout.has_events:
            added += b","
        progress = Progress(f"writing {self.dst.name}", source.stored_size(self.src), show_progress)
        try:
            if self.body is None:
                return self._plain(layout, added, progress)
            self.body.wait(progress)
            return self._gzip(layout, added)
        finally:
            progress.close()
            self.cancel()

    def _start(self, found: chunks.Layout, head: bytes, layout: chunks.Layout) -> bytes:
        if found.events_start != layout.events_start:
            raise TraceaugError(f"{self.src}: the file changed while traceaug read it")
        if found.array_form:
            return head
        brace = head.index(b"{") + 1  # the marker goes after the opening brace
        record = None if self.keep_bytes else visible.summary(self.edits)
        return head[:brace] + marker(self.command, record) + head[brace:]

    def _plain(self, layout: chunks.Layout, added: bytes, progress: Progress) -> int:
        found, head, rest = chunks.split_header(source.iter_blocks(self.src, progress.update))
        written = 0
        with atomic_output(self.dst) as out:
            body = rest if self.keep_bytes else _edited(rest, found.events_start, self.edits)
            for piece in (self._start(found, head, layout), added):
                out.write(piece)
                written += len(piece)
            for block in body:
                out.write(block)
                written += len(block)
        return written

    def _gzip(self, layout: chunks.Layout, added: bytes) -> int:
        body = self.body
        redone = body.redo(self.edits)
        with atomic_output(self.dst) as out:
            out.write(pgzip.HEADER)
            start = pgzip.ParallelDeflate(out.write, GZIP_LEVEL)
            start.write(self._start(body.layout, body.head, layout))
            start.write(added)
            crc, size = start.close()
            if not body.fix_tids:  # one stream, final block included
                body.file.seek(0)
                shutil.copyfileobj(body.file, out)
                out.write(pgzip.trailer(pgzip.crc32_combine(crc, body.crc, body.size),
                                        size + body.size))
                return size + body.size
            segments = body.segments
            i, before = 0, 0  # before: the body's running CRC before segment i
            while i < len(segments):
                if i in redone:
                    last, data, piece_crc, piece_size = redone[i]
                    out.write(data)
                    before = segments[last].crc
                    i = last + 1
                else:
                    j = i
                    while j + 1 < len(segments) and j + 1 not in redone:
                        j += 1
                    body.file.seek(segments[i].at)
                    _copy_bytes(body.file, out, segments[j].at + segments[j].length - segments[i].at)
                    piece_size = sum(s.size for s in segments[i : j + 1])
                    piece_crc = pgzip.crc32_combine(before, segments[j].crc, piece_size)
                    before = segments[j].crc
                    i = j + 1
                crc = pgzip.crc32_combine(crc, piece_crc, piece_size)
                size += piece_size
            out.write(zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS).flush())
            out.write(pgzip.trailer(crc, size))
        return size

    def cancel(self) -> None:
        """Stop the background work and drop its temporary file."""
        if self.body is not None:
            self.body.close()
            self.body = None


def _copy_bytes(src, dst, n: int) -> None:
    while n > 0:
        data = src.read(min(n, 1 << 20))
        if not data:
            raise OSError("the temporary body file is shorter than written")
        dst.write(data)
        n -= len(data)


def _edited(blocks: Iterator[bytes], offset: int, edits: visible.Edits | None) -> Iterator[bytes]:
    """The body's text (from input byte ``offset``) edited by ``visible.apply_text``, piece by
    piece: each piece ends at a comma and never inside a chunk with moves."""
    ranges = sorted(edits.ranges.values(), key=lambda r: r[0]) if edits and edits.chunks else []
    buf = bytearray()
    for block in blocks:
        buf += block
        if len(buf) < SEGMENT:
            continue
        cut = offset + buf.rfind(b",") + 1
        for lo, hi in ranges:
            if lo < cut and (hi is None or cut < hi):  # inside a chunk with moves
                cut = hi if hi is not None and hi <= offset + len(buf) else lo
                break
        if cut > offset:
            yield visible.apply_text(bytes(buf[: cut - offset]), offset, edits, True)
            del buf[: cut - offset]
            offset = cut
    if buf:
        yield visible.apply_text(bytes(buf), offset, edits, True)
