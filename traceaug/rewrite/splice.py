"""Write a copy of a trace with events added after the ``[`` and a ``"traceaug"`` marker after the ``{``,
other bytes kept (but for ``visible``'s edits); gzip if named ``.gz``, atomic, never over the input."""

from __future__ import annotations

import bisect
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

import traceaug.guard as guard
import traceaug.interrupt as interrupt

from ..atomic import atomic_output
from ..errors import TraceaugError
from ..progress import Progress
from ..read import chunks, source
from ..read.marker import MARK_KEY, Prior, find_marker, read_prior
from ..read.rebase import fix_negative_tids_shifted
from ..version import __version__
from . import pgzip, visible

GZIP_LEVEL = 3
SEGMENT = 1 << 20  # input bytes per independently deflated piece of the body


def check_output(src: Path, dst: Path) -> None:
    """Refuse to write over the input, or where no file can be written (``guard.check``)."""
    guard.check([src], [dst])


def marker(entries: list[dict], **extra) -> bytes:
    """The top-level key that tells traceaug (and people) who wrote the file: every rewriter
    applied, in the order of their blocks of events after the ``[``."""
    return MARK_KEY + b":" + orjson.dumps({"tool": "traceaug", "version": __version__,
                                            "rewriters": entries, **extra}) + b","


def entry(name: str, options: dict | None = None, version: str = __version__) -> dict:
    """A rewriter's entry in the marker (``events`` / ``bytes`` are set when it writes)."""
    return {"name": name, "version": version, "options": options or {}}


def _skipped(blocks: Iterable[bytes], n: int) -> Iterator[bytes]:
    """``blocks`` without their first ``n`` bytes."""
    for block in blocks:
        if n >= len(block):
            n -= len(block)
            continue
        yield block[n:] if n else block
        n = 0


def _yield_to_others() -> None:
    """Lower this thread's scheduling priority (Linux sets nice per thread; elsewhere the
    call would name a process, so it is left alone)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


@dataclass
class _Segment:
    """A piece of the body deflated on its own: input bytes [start, end), its deflated bytes in the body file
    (``at``, ``length``), output ``size``, the body's CRC-32 to its end, the tid fix's ``shifts``."""

    start: int
    end: int
    at: int
    length: int
    size: int
    crc: int
    shifts: list[tuple[int, int]]

    def out(self, offset: int) -> int:
        """Where input byte ``offset`` (in this segment, never inside a tid) is in its output."""
        rel = offset - self.start
        k = bisect.bisect_right(self.shifts, (rel, float("inf"))) - 1
        return rel + (self.shifts[k][1] if k >= 0 else 0)


def _deflate(text: bytes) -> bytes:
    c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(text) + c.flush(zlib.Z_SYNC_FLUSH)


class _Body:
    """The original text after the ``[``, deflated by a low-priority thread into a temporary file beside
    the output: one stream when its bytes are kept, else (``fix_tids``) in segments that can be redone."""

    def __init__(self, src: Path, directory: Path, fix_tids: bool, skip: int = 0) -> None:
        self.src = src
        self.fix_tids = fix_tids
        self.skip = skip  # bytes after the ``[`` left out: earlier additions being replaced
        self.file = tempfile.TemporaryFile(dir=directory)
        self.done = 0  # compressed input bytes read so far (progress)
        self.layout: chunks.Layout | None = None
        self.head = b""
        self.segments: list[_Segment] = []
        self.crc, self.size = 0, 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        interrupt.started(self._thread)

    def _run(self) -> None:
        _yield_to_others()  # the caller's pass 1 and engine come first: this one can wait
        rest = None
        try:
            self.layout, self.head, rest = chunks.split_header(self._blocks())
            if self.skip:
                rest = _skipped(rest, self.skip)
            if not self.fix_tids:
                self._kept(rest)
                return
            offset = self.layout.events_start + self.skip
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
        out, shifts = fix_negative_tids_shifted(text)
        data = _deflate(out)
        self.crc = zlib.crc32(out, self.crc)
        self.size += len(out)
        self.segments.append(_Segment(offset, offset + len(text), self.file.tell(), len(data),
                                      len(out), self.crc, shifts))
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
        out = {}
        for a, b in runs:  # the run's output (inflated from the body file), the moves edited in
            segs = self.segments[a : b + 1]
            self.file.seek(segs[0].at)
            text = zlib.decompressobj(-zlib.MAX_WBITS).decompress(
                self.file.read(segs[-1].at + segs[-1].length - segs[0].at))
            spans = [(c, _run_offset(segs, edits.ranges[c][0], False),
                      len(text) if edits.ranges[c][1] is None
                      else _run_offset(segs, edits.ranges[c][1], True))
                     for c in sorted(edits.chunks)
                     if segs[0].start <= edits.ranges[c][0] < segs[-1].end]
            new = visible.move_in(text, spans, edits)
            out[a] = (b, _deflate(new), zlib.crc32(new), len(new))
        return out

    def stop(self) -> None:
        """Ask the thread to stop early (``close`` waits for it)."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.file.close()


def _run_offset(segs: list[_Segment], offset: int, end: bool) -> int:
    """Where input byte ``offset`` is in the output of the run of segments ``segs`` (``end``:
    an offset at a segment's start is the end of the one before)."""
    k = bisect.bisect_right([s.start for s in segs], offset) - 1
    if end and k > 0 and offset == segs[k].start:
        k -= 1
    return sum(s.size for s in segs[:k]) + segs[k].out(offset)


class Copy:
    """``src`` copied to ``dst`` with events added: start it early, then ``finish`` (or ``cancel``). Earlier
    traceaug blocks (``prior``) stay but this rewriter's; unless ``keep_bytes``, edited by ``visible``."""

    def __init__(self, src: Path, dst: Path, command: str | dict, prior: Prior | None = None,
                 keep_bytes: bool = True) -> None:
        check_output(src, dst)
        self.src, self.dst = Path(src), Path(dst)
        self.entry = entry(command) if isinstance(command, str) else dict(command)
        self.prior = read_prior(self.src) if prior is None else prior
        self.keep_bytes = keep_bytes
        self.edits: visible.Edits | None = None
        self.body = (_Body(self.src, self.dst.parent, not keep_bytes, self.prior.skip)
                     if self.dst.name.endswith(".gz") else None)
        self._prepared: threading.Thread | None = None
        self._redone: dict | None = None  # Body.redo's, made by ``prepare``
        self._error: BaseException | None = None

    def prepare(self, plan) -> None:
        """Once per copy, in a thread while the caller computes events (engine queries hold no GIL): the
        UI moves (``visible.apply`` sets ``edits``) and, for gzip, re-deflating the segments holding them."""
        if self._prepared is not None:
            return
        self._prepared = threading.Thread(target=self._prepare, args=(plan, self.body), daemon=True)
        interrupt.started(self._prepared)

    def _prepare(self, plan, body: _Body | None) -> None:
        try:
            visible.apply(plan, self)
            if body is not None and body.fix_tids:
                body._thread.join()
                if body.error is None and not body._stop.is_set():
                    self._redone = body.redo(self.edits)
        except BaseException as e:  # reported by finish()
            self._error = e

    def finish(self, layout: chunks.Layout, events: list[bytes],
               show_progress: bool | None = None) -> int:
        """Write the copy with ``events`` (and other rewriters' earlier ones) after the ``[``;
        returns bytes written (raw)."""
        if self._prepared is not None:
            self._prepared.join()
            if self._error is not None:
                raise self._error
        entries, blocks = self.prior.others(self.entry["name"])
        if not self.keep_bytes and visible.changes(self.edits):  # its own entry and block
            meta = b",".join(self.edits.metadata)
            entries = [*entries, {**entry(visible.NAME), "events": len(self.edits.metadata),
                                  "bytes": len(meta), **visible.summary(self.edits)}]
            blocks = [*blocks, meta]
        own = sum(map(len, events)) + max(len(events) - 1, 0)  # b",".join(events) is not made
        self.entries = [*entries, {**self.entry, "events": len(events), "bytes": own}]
        parts = [b for b in blocks if b] + (list(events) if own else [])
        follow = layout.has_events if self.prior.events_follow is None else self.prior.events_follow
        if parts and follow:
            parts.append(b"")  # the comma before the original events
        added = b",".join(parts)  # one copy of the added text
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
        old = find_marker(head)
        if old is not None:  # a traceaug output: its marker is replaced
            return head[: old[0]] + marker(self.entries) + head[old[1] :]
        brace = head.index(b"{") + 1  # the marker goes after the opening brace
        return head[:brace] + marker(self.entries) + head[brace:]

    def _plain(self, layout: chunks.Layout, added: bytes, progress: Progress) -> int:
        found, head, rest = chunks.split_header(source.iter_blocks(self.src, progress.update))
        written = 0
        with atomic_output(self.dst) as out:
            if self.prior.skip:
                rest = _skipped(rest, self.prior.skip)
            if not self.keep_bytes:
                rest = _edited(rest, found.events_start + self.prior.skip, self.edits)
            for piece in (self._start(found, head, layout), added):
                out.write(piece)
                written += len(piece)
            for block in rest:
                out.write(block)
                written += len(block)
        return written

    def _gzip(self, layout: chunks.Layout, added: bytes) -> int:
        body = self.body
        redone = self._redone if self._redone is not None else body.redo(self.edits)
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
            self.body.stop()
        if self._prepared is not None and self._prepared.is_alive():  # never reading the body file as it
            self._prepared.join()  # closes (a signal before its start: it never ran)
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


def write(src: Path, dst: Path, layout: chunks.Layout, events: list[bytes], command: str | dict,
          show_progress: bool | None = None) -> int:
    """Write ``src`` with ``events`` spliced in to ``dst``; returns bytes written (raw)."""
    return Copy(src, dst, command).finish(layout, events, show_progress)
