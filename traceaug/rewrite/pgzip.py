"""gzip pieces: raw deflate of blocks in threads, pigz-style (each primed with the previous 32 KiB,
sync-flushed), and joining segments' CRCs; the result is an ordinary single-member gzip file."""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

WINDOW = 32 << 10
BLOCK = 256 << 10  # pigz uses 128 KiB; larger blocks only hold more memory (no speed or size gain)
# magic, deflate, no flags, mtime 0, no extra flags, unknown OS
HEADER = b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + b"\x00\xff"


def trailer(crc: int, size: int) -> bytes:
    """The gzip member's end: CRC-32 and size mod 2^32 of the whole uncompressed text."""
    return struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)


def _deflate(block: bytes, dictionary: bytes, level: int) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 9, zlib.Z_DEFAULT_STRATEGY,
                         **({"zdict": dictionary} if dictionary else {}))
    return c.compress(block) + c.flush(zlib.Z_SYNC_FLUSH)


class ParallelDeflate:
    """Raw deflate of the bytes written, in order, to ``sink``, ended unfinished on a byte
    boundary: the member's last segment follows it (``splice`` deflates that as one stream)."""

    def __init__(self, sink: Callable[[bytes], object], level: int, threads: int = 2) -> None:
        self.sink, self.level = sink, level
        self.pool = ThreadPoolExecutor(max_workers=threads)
        self.max_pending = 2 * threads
        self.pending: list[Future] = []
        self.buffer = bytearray()
        self.previous = b""  # the end of the last submitted block: the next one's dictionary
        self.crc, self.size = 0, 0

    def write(self, data: bytes) -> int:
        self.buffer += data
        while len(self.buffer) >= BLOCK:
            self._submit(bytes(self.buffer[:BLOCK]))
            del self.buffer[:BLOCK]
        return len(data)

    def _submit(self, block: bytes) -> None:
        self.crc = zlib.crc32(block, self.crc)
        self.size += len(block)
        self.pending.append(self.pool.submit(_deflate, block, self.previous, self.level))
        self.previous = block[-WINDOW:]
        while len(self.pending) > self.max_pending:
            self.sink(self.pending.pop(0).result())

    def close(self) -> tuple[int, int]:
        """Deflate what is left; return the CRC-32 and length of the text written."""
        try:
            self._submit(bytes(self.buffer))
            for f in self.pending:
                self.sink(f.result())
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pending = []
        return self.crc, self.size


def _gf2_times(matrix: list[int], vector: int) -> int:
    total, i = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, row) for row in matrix]


@functools.cache
def _zero_bytes(k: int) -> tuple[int, ...]:
    """The GF(2) operator that shifts a CRC-32 over 2**k zero bytes (squares of the one for
    a zero bit), made once: zlib's ``crc32_combine`` squares its way up on every call."""
    if k == 0:
        op = [0xEDB88320] + [1 << n for n in range(31)]  # one zero bit
        for _ in range(3):  # two, four, eight zero bits
            op = _gf2_square(op)
        return tuple(op)
    return tuple(_gf2_square(list(_zero_bytes(k - 1))))


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A+B from crc32(A), crc32(B) and len(B): zlib's ``crc32_combine``, which Python's zlib
    does not expose (shifts crc1 over len2 zero bytes in GF(2))."""
    k = 0
    while len2 > 0:
        if len2 & 1:
            crc1 = _gf2_times(_zero_bytes(k), crc1)
        len2 >>= 1
        k += 1
    return crc1 ^ crc2
