"""Pass 1's byte scans over a chunk's text, against answers made here byte by byte."""

from __future__ import annotations

import pytest

from traceaug.read import rebase

EVERY_BYTE = bytes(range(256))


def test_the_digit_mask_marks_exactly_the_ascii_digits() -> None:
    text = EVERY_BYTE + b"0123456789" + EVERY_BYTE[::-1]
    assert rebase._digit_mask(text) == bytes(c in b"0123456789" for c in text)
    assert rebase._digit_mask(b"") == b""


@pytest.mark.parametrize(("text", "clamped"), [
    (b'{"a": 18446744073709551621}', b'{"a": 9223372036854775807}'),  # 2^64 + 5
    (b'[1, -9223372036854775809]', b'[1, -9223372036854775808]'),  # one below int64
    (b'{"a": 9223372036854775807}', b'{"a": 9223372036854775807}'),  # int64's largest: kept
    (b'{"a": 1.18446744073709551621}', b'{"a": 1.18446744073709551621}'),  # a fraction's digits
    (b'{"a": "18446744073709551621"}', b'{"a": "18446744073709551621"}'),  # a string's digits
    (b'{"ts": 18446744073709551621}', b'{"ts": 18446744073709551621}'),  # ts: refused later
    (EVERY_BYTE.replace(b'"', b"").replace(b"\\", b"") + b' 18446744073709551621',
     EVERY_BYTE.replace(b'"', b"").replace(b"\\", b"") + b' 9223372036854775807'),
])
def test_integers_past_int64_are_held_at_its_bounds(text: bytes, clamped: bytes) -> None:
    assert rebase.clamp_wide_ints(text) == clamped
