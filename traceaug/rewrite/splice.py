"""Write a copy of a trace with events added, every original byte kept in place.

The added events go right after the ``[`` that opens the event array and a
``"traceaug"`` marker key right after the opening ``{``; everything else is
copied through as it was. Output is gzip when its name ends in ``.gz``, is
written to a temporary file and renamed into place, and never replaces the
input.

A ``Copy`` starts before its events are known: for gzip output a thread deflates
the original text after the ``[`` (nearly all of it) while the caller computes the
events, so that finishing deflates only the header and the added events.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import orjson

from .. import __version__, guard
from ..atomic import atomic_output
from ..errors import TraceaugError
from ..progress import Progress
from ..read import chunks, source
from . import pgzip

GZIP_LEVEL = 3


def check_output(src: Path, dst: Path) -> None:
    """Refuse to write over the input, or where no file can be written (``guard.check``)."""
    guard.check([src], [dst])


def marker(command: str) -> bytes:
    """The top-level key that tells traceaug (and people) who wrote the file."""
    return b'"traceaug":' + orjson.dumps({"tool": "traceaug", "version": __version__,
                                          "command": command}) + b","


def _yield_to_others() -> None:
    """Lower this thread's scheduling priority (Linux sets nice per thread; elsewhere the
    call would name a process, so it is left alone)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


class _Body:
    """The original text after the event array's ``[``, deflated by a low-priority thread
    into an unnamed temporary file beside the output (its CRC and length kept for the gzip
    trailer)."""

    def __init__(self, src: Path, directory: Path) -> None:
        self.src = src
        self.file = tempfile.TemporaryFile(dir=directory)
        self.done = 0  # compressed input bytes read so far (progress)
        self.layout: chunks.Layout | None = None
        self.head = b""
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
            deflate = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
            for block in rest:
                if self._stop.is_set():
                    break
                self.crc = zlib.crc32(block, self.crc)
                self.size += len(block)
                self.file.write(deflate.compress(block))
            self.file.write(deflate.flush())  # the member's final block
        except BaseException as e:  # reported by finish()
            self.error = e
        finally:
            if rest is not None:
                rest.close()  # the input file, when stopped early

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

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.file.close()


class Copy:
    """``src`` copied to ``dst`` with events added: start it early, ``finish`` it with the
    events (or ``cancel`` it: no file is left)."""

    def __init__(self, src: Path, dst: Path, command: str) -> None:
        check_output(src, dst)
        self.src, self.dst, self.command = Path(src), Path(dst), command
        self.body = _Body(self.src, self.dst.parent) if self.dst.name.endswith(".gz") else None

    def finish(self, layout: chunks.Layout, events: list[bytes],
               show_progress: bool | None = None) -> int:
        """Write the copy with ``events`` after the ``[``; returns bytes written (raw)."""
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
        return head[:brace] + marker(self.command) + head[brace:]

    def _plain(self, layout: chunks.Layout, added: bytes, progress: Progress) -> int:
        found, head, rest = chunks.split_header(source.iter_blocks(self.src, progress.update))
        written = 0
        with atomic_output(self.dst) as out:
            for piece in (self._start(found, head, layout), added):
                out.write(piece)
                written += len(piece)
            for block in rest:
                out.write(block)
                written += len(block)
        return written

    def _gzip(self, layout: chunks.Layout, added: bytes) -> int:
        body = self.body
        with atomic_output(self.dst) as out:
            out.write(pgzip.HEADER)
            start = pgzip.ParallelDeflate(out.write, GZIP_LEVEL)
            start.write(self._start(body.layout, body.head, layout))
            start.write(added)
            crc, size = start.close()
            body.file.seek(0)
            shutil.copyfileobj(body.file, out)
            out.write(pgzip.trailer(pgzip.crc32_combine(crc, body.crc, body.size), size + body.size))
        return size + body.size

    def cancel(self) -> None:
        """Stop the background work and drop its temporary file."""
        if self.body is not None:
            self.body.close()
            self.body = None


def write(src: Path, dst: Path, layout: chunks.Layout, events: list[bytes], command: str,
          show_progress: bool | None = None) -> int:
    """Write ``src`` with ``events`` spliced in to ``dst``; returns bytes written (raw)."""
    return Copy(src, dst, command).finish(layout, events, show_progress)
