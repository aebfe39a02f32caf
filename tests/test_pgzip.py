"""The parallel gzip writer makes one ordinary gzip member that round-trips exactly."""

from __future__ import annotations

import gzip
import io
import random
import zlib

import pytest

from traceaug.rewrite import pgzip


@pytest.mark.parametrize("size", [0, 1, pgzip.BLOCK - 1, pgzip.BLOCK, 3 * pgzip.BLOCK + 12345])
def test_round_trip_is_one_member(size: int) -> None:
    rng = random.Random(size)
    words = [bytes(rng.choice(b"abcdefgh{}\":, ") for _ in range(rng.randint(1, 12))) for _ in range(500)]
    data = b"".join(rng.choice(words) for _ in range(size // 6 + 1))[:size]
    buf = io.BytesIO()
    w = pgzip.ParallelGzipWriter(buf, level=3)
    for i in range(0, len(data), 1 << 20):  # writes that straddle block edges
        w.write(data[i : i + (1 << 20)])
    w.close()
    blob = buf.getvalue()
    assert gzip.decompress(blob) == data  # checks the CRC-32 and size trailer too
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert d.decompress(blob) == data and d.eof and d.unused_data == b""  # a single member
