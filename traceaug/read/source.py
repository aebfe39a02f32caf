"""Open a trace file (plain or gzip) as byte blocks; read problems become one-line ``TraceaugError``s."""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import stat
import struct
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import traceaug.interrupt as interrupt

from ..errors import TraceaugError

BLOCK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first entry, or an empty zip
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
        with open(path, "rb") as f:
            head = f.read(64 << 10)
    except OSError as e:
        raise TraceaugError(f"{path}: cannot read ({e.strerror})") from None
    if size == 0:
        raise TraceaugError(f"{path}: empty file")
    if head[:2] == GZIP_MAGIC:
        inner = b""
        with contextlib.suppress(zlib.error):  # zlib refuses what gzip reads (reserved flags)
            inner = zlib.decompressobj(wbits=31).decompress(head, 4)
        if inner[:2] == GZIP_MAGIC:
            raise TraceaugError(f"{path}: a gzip of a gzip file, not a trace (gunzip it once)")
        head = inner
    if head[:4] in ZIP_MAGICS:  # Perfetto would open these, the rewriters cannot: no command does
        raise TraceaugError(f"{path}: a zip archive, not a trace (unzip it: traceaug reads "
                            ".json, .json.gz and nsys .sqlite files)")


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
    if not is_gzip(path) or size < GZIP_MINIMUM:  # a header alone, or less: reading it says what is wrong
        return size
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        isize = struct.unpack("<I", f.read(4))[0]
    return isize if isize >= size else size * 20


SQLITE_MAGIC = b"SQLite format 3\x00"
UTF8_BOM = b"\xef\xbb\xbf"
SPACE_LIMIT = 64 << 20  # leading whitespace no trace has (chunks refuses it too)
SPOOL_LIMIT_ENV = "TRACEAUG_SPOOL_MAX_MB"
SPOOL_LIMIT_MB = 64 << 10  # 64 GB: a larger stdin / FIFO / device is refused, not spooled
SPOOL_RESERVE_PCT = 5  # of the spool's file system left free (``_room``)
SIDE_LIMIT = 256 << 20  # an SQL file, config, class map or CSV read from a FIFO or device


def spool_limit() -> int:
    """Bytes a spool may copy: ``$TRACEAUG_SPOOL_MAX_MB`` MB, else 64 GB."""
    text = os.environ.get(SPOOL_LIMIT_ENV, "")
    try:
        mb = int(text) if text else SPOOL_LIMIT_MB
    except ValueError:
        raise TraceaugError(f"${SPOOL_LIMIT_ENV} is {text!r}, not a whole number of MB") from None
    return max(mb, 1) << 20


def _open_stream(name: str, path: str | None) -> BinaryIO:
    """stdin (``path`` None) or a FIFO / device, unbuffered; a FIFO with no writer reads as
    empty instead of waiting for one."""
    if path is None:
        if sys.stdin is None:
            raise TraceaugError(f"{name}: is closed, nothing to read")
        return sys.stdin.buffer
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise TraceaugError(f"{name}: cannot read ({e.strerror})") from None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb", buffering=0)


_SECOND = {b"{": (b'"', b"}"), b"[": (b"{", b"]")}  # what a JSON trace has after its first { or [


def shown_byte(c: int) -> str:
    """A byte as a message shows it."""
    return repr(chr(c)) if 32 < c < 127 else f"byte 0x{c:02x}"


class _Sniff:
    """Stops a stream once its bytes cannot be what is read (``json``: a JSON document, else text, gzip,
    SQLite): NUL in text, a first byte not ``{``/``[`` (``trace``: or a second not what a trace has after
    it, ``_SECOND``), whitespace past ``SPACE_LIMIT``, over ``limit``."""

    def __init__(self, name: str, what: str, json: bool, limit: int, trace: bool = False) -> None:
        self.name, self.what, self.json, self.limit, self.trace = name, what, json, limit, trace
        self.seen = 0
        self.head = b""  # the first bytes, until there are enough to tell a magic number
        self.state = "start"  # -> "lead" (whitespace so far) -> "open" (after { or [) -> "text" | "binary"
        self.opened = b""  # the { or [ a JSON trace starts with

    def feed(self, data: bytes, final: bool = False) -> None:
        """Check the next block (``final``: the stream ended; ``data`` is empty)."""
        name = self.name
        self.seen += len(data)
        if self.seen > self.limit:
            raise TraceaugError(f"{name}: more than {self.limit >> 20} MB from a pipe or device "
                                f"(the bound for {self.what}); save it to a file first")
        if self.state == "start":  # a pipe may give a few bytes at a time
            self.head += data
            if len(self.head) < len(SQLITE_MAGIC) and not final:
                return
            data, self.head = self.head, b""
            if not data:
                return
            if not data.strip(b"\0"):
                raise TraceaugError(f"{name}: reads as NUL bytes only (a device like "
                                    f"/dev/zero?), not {self.what}")
            if data.startswith((GZIP_MAGIC, SQLITE_MAGIC)):
                self.state = "binary"
                return
            data = data.removeprefix(UTF8_BOM)
            self.state = "lead"
        while self.state in ("lead", "open"):
            body = data.lstrip(b" \t\n\r")
            if not body:
                if self.seen > SPACE_LIMIT:
                    raise TraceaugError(f"{name}: more than {SPACE_LIMIT >> 20} MB of whitespace "
                                        f"and nothing else, not {self.what}")
                return
            if not self.json:
                self.state = "text"
            elif self.state == "lead":
                if body[:1] not in _SECOND:
                    raise TraceaugError(f"{name}: starts with {shown_byte(body[0])}, not {{ or [: "
                                        f"not {self.what}")
                self.opened, data = body[:1], body[1:]
                self.state = "open" if self.trace else "text"
            else:
                if body[:1] not in _SECOND[self.opened]:
                    raise TraceaugError(f"{name}: {shown_byte(body[0])} after its first "
                                        f"{self.opened.decode()}, not {self.what}")
                if body[:1] == b"{":  # an array's first event: a key or } next
                    self.opened, data = b"{", body[1:]
                    continue
                self.state = "text"
        if self.state == "text" and b"\0" in data:
            raise TraceaugError(f"{name}: holds NUL bytes (binary data), not {self.what}")


def _stream_blocks(name: str, path: str | None, sniff: _Sniff) -> Iterator[bytes]:
    """Blocks of stdin, a FIFO or a device, each checked by ``sniff`` before it is used."""
    stream = _open_stream(name, path)
    try:
        while True:
            interrupt.check()
            try:
                data = stream.read(BLOCK)
            except OSError as e:
                raise TraceaugError(f"{name}: cannot read ({e.strerror})") from None
            if not data:
                sniff.feed(b"", final=True)
                break
            sniff.feed(data)
            yield data
    finally:
        if path is not None:
            stream.close()
    if not sniff.seen:
        why = "nothing to read" if path is None else "nothing to read, or no writer"
        raise TraceaugError(f"{name}: empty input ({why})")


def spool(name: str, path: str | None, dest: Path, what: str | None = "a trace") -> None:
    """Copy a non-seekable input (``-``: stdin, FIFO, device; ``name`` in errors) to ``dest`` for every pass;
    stops with one line once it cannot be ``what`` (None: trace, CSV or export) or pass ``spool_limit()``."""
    sniff = _Sniff(name, what or "a trace or CSV", what is not None, spool_limit(), what is not None)
    with open(dest, "wb") as out:
        for data in _stream_blocks(name, path, sniff):
            try:
                _room(out.fileno(), len(data))
                out.write(data)
            except OSError as e:  # $TMPDIR full
                raise TraceaugError(f"{name}: cannot spool it to {dest.parent} ({e.strerror}); "
                                    "set TMPDIR to a larger disk") from None


def _room(fd: int, size: int) -> None:
    """ENOSPC before writing ``size`` bytes would leave less than ``SPOOL_RESERVE_PCT`` % (at most 1 GB)
    of the file system free: a spool stops before the disk is full, for everything else on it."""
    st = os.fstatvfs(fd)
    reserve = min(st.f_blocks * st.f_frsize * SPOOL_RESERVE_PCT // 100, 1 << 30)
    if st.f_bavail * st.f_frsize - size < reserve:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def read_side(path: str | Path, what: str, json: bool = False) -> bytes:
    """A side file's bytes (SQL, config, class map, CSV), read like traces: ``-`` is stdin, FIFOs and devices
    up to ``SIDE_LIMIT``, stopping at binary bytes; errors are one line. ``json``: must start with { or [."""
    name = str(path)
    if name == "-":
        return b"".join(_stream_blocks("stdin", None, _Sniff("stdin", what, json, SIDE_LIMIT)))
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        raise TraceaugError(f"{name}: no such file") from None
    except OSError as e:
        raise TraceaugError(f"{name}: cannot read ({e.strerror})") from None
    if stat.S_ISDIR(mode):
        raise TraceaugError(f"{name}: is a directory, expected {what}")
    if not stat.S_ISREG(mode):
        return b"".join(_stream_blocks(name, name, _Sniff(name, what, json, SIDE_LIMIT)))
    try:
        with open(name, "rb") as f:
            return f.read()
    except OSError as e:
        raise TraceaugError(f"{name}: cannot read ({e.strerror})") from None
