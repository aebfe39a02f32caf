"""Text fixes applied to events before Perfetto sees them.

Rebase large epoch-µs timestamps exactly, on their decimal text.

Perfetto reads ``ts`` through a double: a fractional epoch-µs value such as
``1712198313370123.456`` loses its nanoseconds. Values below 10^11 µs survive
exactly, so we strip the leading digits all timestamps share (an exact
subtraction of ``prefix * 10^11`` µs done on the text, at C speed) and keep
the subtracted base to map results back.
"""

from __future__ import annotations

import re
from decimal import Decimal

KEEP = 11  # integer digits kept: 10^11 µs ≈ 27.8 hours of trace
_LARGE = re.compile(rb'"ts"(\s*):(\s*)(\d{%d,})(\.\d+)?' % (KEEP + 1))


class Rebase:
    """Chooses the prefix from the first large timestamp and strips it everywhere."""

    def __init__(self) -> None:
        self.prefix: bytes | None = None
        self._strip: re.Pattern | None = None

    @property
    def base_ns(self) -> int:
        """What was subtracted, in ns (0 when nothing was)."""
        return int(self.prefix) * 10**KEEP * 1000 if self.prefix else 0

    def __call__(self, text: bytes) -> bytes:
        if self.prefix is None:
            m = _LARGE.search(text)
            if m is None:
                return text
            self.prefix = m.group(3)[:-KEEP]
            self._strip = re.compile(
                rb'("ts"\s*:\s*)' + self.prefix + rb"(?=\d{%d}(?!\d))0{0,%d}" % (KEEP, KEEP - 1))
        assert self._strip is not None
        out = self._strip.sub(rb"\1", text)
        if _LARGE.search(out):  # a timestamp with another prefix: subtract exactly
            out = _LARGE.sub(self._subtract, out)
        return out

    def _subtract(self, m: re.Match) -> bytes:
        assert self.prefix is not None
        value = Decimal((m.group(3) + (m.group(4) or b"")).decode()) - int(self.prefix) * 10**KEEP
        return b'"ts"' + m.group(1) + b":" + m.group(2) + format(value, "f").encode()


_NEGATIVE_TID = re.compile(rb'("tid"\s*:\s*)-(\d+)')


def unsigned_tid(tid: int) -> int:
    """Kineto writes thread ids above 2^31 as negative int32; Perfetto folds those into
    the process's main thread, so give it the unsigned 32-bit value instead."""
    return tid & 0xFFFFFFFF if tid < 0 else tid


def fix_negative_tids(text: bytes) -> bytes:
    """Rewrite every negative integer ``tid`` to its unsigned 32-bit value."""
    if b'"tid"' not in text or not _NEGATIVE_TID.search(text):
        return text
    return _NEGATIVE_TID.sub(
        lambda m: m.group(1) + str(unsigned_tid(-int(m.group(2)))).encode(), text)
