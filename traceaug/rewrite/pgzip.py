"""gzip on both cores: one valid gzip member, its blocks deflated in parallel.

Each block is deflated on its own (zlib releases the GIL), primed with the
previous block's last 32 KiB as dictionary and ended on a byte boundary with a
sync flush, the way pigz does; the CRC and size are combined in order. The
result is an ordinary single-member gzip file any reader takes.
"""

from __future__ import annotations

import struct
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO

WINDOW = 32 << 10
BLOCK = 256 << 10  # pigz uses 128 KiB; larger blocks only hold more memory (no speed or size gain)


def _deflate(block: bytes, dictionary: bytes, level: int, last: bool) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 9, zlib.Z_DEFAULT_STRATEGY,
                         **({"zdict": dictionary} if dictionary else {}))
    return c.compress(block) + c.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


class ParallelGzipWriter:
    """A write-only binary file object that gzips to ``raw`` with ``threads`` threads."""

    def __init__(self, raw: BinaryIO, level: int, threads: int = 2) -> None:
        self.raw, self.level = raw, level
        self.pool = ThreadPoolExecutor(max_workers=threads)
        self.max_pending = 2 * threads
        self.pending: list[Future] = []
        self.buffer = bytearray()
        self.previous = b""  # the end of the last submitted block: the next one's dictionary
        self.crc, self.size = 0, 0
        # gzip header: magic, deflate, no flags, mtime 0, no extra flags, unknown OS
        raw.write(b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + b"\x00\xff")

    def write(self, data: bytes) -> int:
        self.buffer += data
        while len(self.buffer) >= BLOCK:
            self._submit(bytes(self.buffer[:BLOCK]), last=False)
            del self.buffer[:BLOCK]
        return len(data)

    def _submit(self, block: bytes, last: bool) -> None:
        self.crc = zlib.crc32(block, self.crc)
        self.size += len(block)
        self.pending.append(self.pool.submit(_deflate, block, self.previous, self.level, last))
        self.previous = block[-WINDOW:]
        while len(self.pending) > self.max_pending:
            self.raw.write(self.pending.pop(0).result())

    def close(self) -> None:
        """Deflate what is left, write the trailer (CRC-32 and size mod 2^32)."""
        try:
            self._submit(bytes(self.buffer), last=True)
            for f in self.pending:
                self.raw.write(f.result())
            self.raw.write(struct.pack("<II", self.crc & 0xFFFFFFFF, self.size & 0xFFFFFFFF))
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pending = []
