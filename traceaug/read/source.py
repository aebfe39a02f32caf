"""Open a trace file (plain or gzip) as a stream of byte blocks.

Every read problem becomes a one-line ``TraceaugError`` naming the file.
"""

from __future__ import annotations

import gzip
import os
import struct
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from .. import interrupt
from ..errors import TraceaugError

BLOCK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
GZIP_MINIMUM = 18  # header (10) + empty deflate (~2) + trailer (8): anything shorter is cut


def is_gzip(path: Path) -> bool:
    """True when the file starts with the gzip magic (whatever its name says)."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def check_readable(path: Path) -> None:
    """Raise a clear error for a missing, unreadable, special or empty file."""
    if not path.exists():
        raise TraceaugError(f"{path}: no such file")
    if path.is_dir():
        raise TraceaugError(f"{path}: is a directory, expected a trace file")
    if not path.is_file():
        raise TraceaugError(f"{path}: is a FIFO, device or socket; the command line reads "
                            "those (spooled), the library needs a regular file")
    try:
        size = path.stat().st_size
        with open(path, "rb"):
            pass
    except OSError as e:
        raise TraceaugError(f"{path}: cannot read ({e.strerror})") from None
    if size == 0:
        raise TraceaugError(f"{path}: empty file")


def iter_blocks(path: Path, on_progress: Callable[[int], None] | None = None,
                block: int | None = None) -> Iterator[bytes]:
    """Yield the decompressed content in blocks (``BLOCK`` bytes); report compressed bytes consumed."""
    block = block or BLOCK
    gz = is_gzip(path)
    with open(path, "rb") as raw:
        stream = gzip.GzipFile(fileobj=raw) if gz else raw
        try:
            while True:
                interrupt.check()  # Ctrl-C stops every reader, in any thread
                data = stream.read(block)
                if on_progress is not None:
                    on_progress(raw.tell())
                if not data:
                    break
                yield data
        except (EOFError, OSError, zlib.error) as e:
            raise TraceaugError(f"{path}: corrupt gzip data ({e})") from None
        finally:
            if gz:
                stream.close()


def read_all(path: Path) -> bytes:
    """The whole decompressed content (for small inputs and error reporting)."""
    return b"".join(iter_blocks(path))


def stored_size(path: Path) -> int:
    """Size on disk, used as the progress total."""
    return os.path.getsize(path)


def raw_size_estimate(path: Path) -> int:
    """Uncompressed size: gzip's ISIZE trailer (mod 4 GiB) or the file size."""
    size = stored_size(path)
    if not is_gzip(path):
        return size
    if size < GZIP_MINIMUM:  # a header alone, or less: reading it says what is wrong
        return size
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        isize = struct.unpack("<I", f.read(4))[0]
    return isize if isize >= size else size * 20


def spool(name: str, path: str | None, dest: Path) -> None:
    """Copy a non-seekable input (``-`` for stdin, a FIFO, a device, a process substitution)
    to ``dest``, so that every pass can read it; ``name`` is what error messages call it.
    A FIFO with no writer reads as empty instead of waiting for one."""
    if path is None:
        if sys.stdin is None:  # closed (<&-): Python has no stdin object at all
            raise TraceaugError(f"{name}: is closed, nothing to read")
        stream = sys.stdin.buffer
    else:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO with no writer: no wait
        except OSError as e:
            raise TraceaugError(f"{name}: cannot read ({e.strerror})") from None
        os.set_blocking(fd, True)
        stream = os.fdopen(fd, "rb", buffering=0)
    first = True
    try:
        with open(dest, "wb") as out:
            while True:
                interrupt.check()
                try:
                    data = stream.read(BLOCK)
                except OSError as e:
                    raise TraceaugError(f"{name}: cannot read ({e.strerror})") from None
                if not data:
                    break
                if first and not data.strip(b"\0"):
                    raise TraceaugError(f"{name}: reads as NUL bytes only (a device like "
                                        "/dev/zero?), not a trace")
                first = False
                try:
                    out.write(data)
                except OSError as e:  # $TMPDIR full
                    raise TraceaugError(f"{name}: cannot spool it to {dest.parent} ({e.strerror}); "
                                        "set TMPDIR to a larger disk") from None
    finally:
        if path is not None:
            stream.close()
    if first:
        why = "nothing to read" if path is None else "nothing to read, or no writer"
        raise TraceaugError(f"{name}: empty input ({why})")
