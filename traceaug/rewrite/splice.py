"""Write a copy of a trace with events added, every original byte kept in place.

The added events go right after the ``[`` that opens the event array and a
``"traceaug"`` marker key right after the opening ``{``; everything else is
copied through as it was. Output is gzip when its name ends in ``.gz``, is
written to a temporary file and renamed into place, and never replaces the
input.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from .. import __version__
from ..atomic import atomic_output
from ..errors import TraceaugError
from ..progress import Progress
from ..read import source
from ..read.chunks import Layout
from .pgzip import ParallelGzipWriter

GZIP_LEVEL = 3


def check_output(src: Path, dst: Path) -> None:
    """Refuse to write over the input or into a missing directory."""
    if dst.resolve() == src.resolve() or (dst.exists() and os.path.samefile(src, dst)):
        raise TraceaugError(f"{dst}: is the input file; choose another output")
    if not dst.parent.is_dir():
        raise TraceaugError(f"{dst}: directory {dst.parent} does not exist")
    if dst.is_dir():
        raise TraceaugError(f"{dst}: is a directory, expected an output file")


def marker(command: str) -> bytes:
    """The top-level key that tells traceaug (and people) who wrote the file."""
    return b'"traceaug":' + orjson.dumps({"tool": "traceaug", "version": __version__,
                                          "command": command}) + b","


def write(src: Path, dst: Path, layout: Layout, events: list[bytes], command: str,
          show_progress: bool | None = None) -> int:
    """Write ``src`` with ``events`` spliced in to ``dst``; returns bytes written (raw)."""
    check_output(src, dst)
    added = b",".join(events)
    if added and layout.has_events:
        added += b","
    inserts = [(layout.events_start, added)]
    mark = marker(command)
    progress = Progress(f"writing {dst.name}", source.stored_size(src), show_progress)
    written = 0
    try:
        with atomic_output(dst) as raw:
            out = ParallelGzipWriter(raw, GZIP_LEVEL) if dst.name.endswith(".gz") else raw
            offset = 0
            first = True
            for block in source.iter_blocks(src, progress.update):
                if first and not layout.array_form:  # the marker goes after the opening brace
                    inserts.insert(0, (block.index(b"{") + 1, mark))
                    first = False
                end = offset + len(block)
                pos = 0
                while inserts and inserts[0][0] <= end:
                    at, data = inserts.pop(0)
                    out.write(block[pos : at - offset])
                    out.write(data)
                    written += at - offset - pos + len(data)
                    pos = at - offset
                out.write(block[pos:])
                written += len(block) - pos
                offset = end
            if out is not raw:
                out.close()
    finally:
        progress.close()
    return written
