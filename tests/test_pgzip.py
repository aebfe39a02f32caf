"""Parallel deflate segments join into one ordinary gzip member that round-trips exactly."""

from __future__ import annotations

import gzip
import io
import random
import zlib

import pytest

from traceaug.rewrite import pgzip


def _text(size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefgh{}\":, ") for _ in range(rng.randint(1, 12))) for _ in range(500)]
    return b"".join(rng.choice(words) for _ in range(size // 6 + 1))[:size]


@pytest.mark.parametrize("sizes", [(0, 0), (1, 0), (0, 1), (pgzip.BLOCK - 1, pgzip.BLOCK),
                                   (12345, 3 * pgzip.BLOCK + 12345)])
def test_segments_make_one_member(sizes: tuple[int, int]) -> None:
    head, body = _text(sizes[0], 1), _text(sizes[1], 2)
    buf = io.BytesIO()
    buf.write(pgzip.HEADER)
    first = pgzip.ParallelDeflate(buf.write, 3)
    for i in range(0, len(head), 100_000):  # writes that straddle block edges
        first.write(head[i : i + 100_000])
    crc1, n1 = first.close()
    last = zlib.compressobj(3, zlib.DEFLATED, -zlib.MAX_WBITS)  # as splice deflates the body
    buf.write(last.compress(body) + last.flush())
    crc2, n2 = zlib.crc32(body), len(body)
    assert (crc1, n1) == (zlib.crc32(head), len(head))
    buf.write(pgzip.trailer(pgzip.crc32_combine(crc1, crc2, n2), n1 + n2))
    blob = buf.getvalue()
    assert gzip.decompress(blob) == head + body  # checks the CRC-32 and size trailer too
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert d.decompress(blob) == head + body and d.eof and d.unused_data == b""  # one member


def test_crc32_combine_matches_zlib() -> None:
    rng = random.Random(7)
    for n1, n2 in [(0, 5), (5, 0), (1, 1), (1000, 3), (3, 70_000), (1 << 16, (1 << 20) + 7)]:
        a, b = rng.randbytes(n1), rng.randbytes(n2)
        assert pgzip.crc32_combine(zlib.crc32(a), zlib.crc32(b), n2) == zlib.crc32(a + b)
