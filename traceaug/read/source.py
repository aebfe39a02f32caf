"""Open a trace file (plain or gzip) as a stream of byte blocks.

Every read problem becomes a one-line ``TraceaugError`` naming the file.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import TraceaugError

BLOCK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    """True when the file starts with the gzip magic (whatever its name says)."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def check_readable(path: Path) -> None:
    """Raise a clear error for a missing, unreadable or empty file."""
    if not path.exists():
        raise TraceaugError(f"{path}: no such file")
    if path.is_dir():
        raise TraceaugError(f"{path}: is a directory, expected a trace file")
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
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        isize = struct.unpack("<I", f.read(4))[0]
    return isize if isize >= size else size * 20
