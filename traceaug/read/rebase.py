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

import numpy as np

KEEP = 11  # integer digits kept: 10^11 µs ≈ 27.8 hours of trace (values < 10^12 are exact)
_LARGE = re.compile(rb'"ts"(\s*):(\s*)(\d{%d,})(\.\d+)?' % (KEEP + 2))


def us_to_ns(value: int | float) -> int:
    """A µs number as parsed from rebased text (below 10^12, so exact to the ns) in integer ns."""
    return round(value * 1000) if isinstance(value, float) else int(value) * 1000


def us_to_ns_array(values: np.ndarray) -> np.ndarray:
    """``us_to_ns`` on a float64 column (NaN stays NaN): values below 10^12 µs are exact
    in a double, and numpy rounds halves to even as ``round`` does."""
    return np.round(values * 1000)


class Rebase:
    """Chooses the prefix from the first large timestamp and strips it everywhere.

    The shared leading digits become a single ``1`` (so no leading zero appears):
    ``"ts": 16612|03462674279.5`` -> ``"ts": 1|03462674279.5``, i.e. the exact
    subtraction of ``(prefix - 1) * 10^11`` µs, done with ``bytes.replace``.
    """

    def __init__(self) -> None:
        self.prefix: bytes | None = None
        self._odd: re.Pattern | None = None

    @property
    def base_us(self) -> int:
        return (int(self.prefix) - 1) * 10**KEEP if self.prefix else 0

    @property
    def base_ns(self) -> int:
        """What was subtracted, in ns (0 when nothing was)."""
        return self.base_us * 1000

    def __call__(self, text: bytes) -> bytes:
        if self.prefix is None:
            m = _LARGE.search(text)
            if m is None:
                return text
            self.prefix = m.group(3)[:-KEEP]
            # A large timestamp not in the fast form (prefix + exactly KEEP digits after
            # ``"ts":`` or ``"ts": ``), or the prefix with another digit count.
            self._odd = re.compile(rb'"ts"(?!: ?' + self.prefix + rb"\d{%d}(?!\d))\s*:\s*(?:%s|\d{%d,})"
                                   % (KEEP, self.prefix, KEEP + 2))
        assert self._odd is not None
        if self._odd.search(text):  # subtract exactly, one timestamp at a time
            return _LARGE.sub(self._subtract, text)
        for sep in (b'"ts":', b'"ts": '):
            old = sep + self.prefix
            if old in text:
                text = text.replace(old, sep + b"1")
        return text

    def _subtract(self, m: re.Match) -> bytes:
        value = Decimal((m.group(3) + (m.group(4) or b"")).decode()) - self.base_us
        return b'"ts"' + m.group(1) + b":" + m.group(2) + format(value, "f").encode()


_NEGATIVE_TID = re.compile(rb'("tid"\s*:\s*)-(\d+)')
# Every way ``:\s*-`` can start: "-" right after the colon or after one space, or more white space.
_COLON_MINUS = (b":-", b": -", b":  ", b": \t", b": \n", b": \r", b":\t", b":\n", b":\r")


def unsigned_tid(tid: int) -> int:
    """Kineto writes thread ids above 2^31 as negative int32; Perfetto folds those into
    the process's main thread, so give it the unsigned 32-bit value instead."""
    return tid & 0xFFFFFFFF if tid < 0 else tid


def fix_negative_tids(text: bytes) -> bytes:
    """Rewrite every negative integer ``tid`` to its unsigned 32-bit value."""
    if not any(n in text for n in _COLON_MINUS):
        return text  # no ``:`` then white space then ``-`` anywhere: a cheap check first
    if not _NEGATIVE_TID.search(text):
        return text
    return _NEGATIVE_TID.sub(
        lambda m: m.group(1) + str(unsigned_tid(-int(m.group(2)))).encode(), text)
