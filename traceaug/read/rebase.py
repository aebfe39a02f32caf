"""Text fixes before Perfetto sees the events: large epoch-µs ``ts`` rebased exactly on their text
(Perfetto reads them through a double), wide integers clamped, negative tids made unsigned."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from decimal import Decimal
from itertools import compress, repeat

import numpy as np

KEEP = 11  # integer digits kept: 10^11 µs ≈ 27.8 hours of trace (values < 10^12 are exact)
_LARGE = re.compile(rb'"ts"(\s*):(\s*)(\d{%d,})(\.\d+)?' % (KEEP + 2))
# What ``exact`` rewrites: 13 digits or more, or any number with an exponent. Smaller values
# are below every base: a top-level one means ``BelowBase``, one inside args stays as it is.
_EXACT = re.compile(rb'"ts"(\s*):(\s*)(\d{%d,}(?:\.\d+)?|-?\d+(?:\.\d+)?[eE][+-]?\d+)' % (KEEP + 2))
_ANY = re.compile(rb'"ts"\s*:\s*-?\d')


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_RUN = b"\x01" * 19  # in ``_digit_mask``: an integer literal outside int64 has 19 digits or more
_DIGIT_RUN = re.compile(rb"\d+")
# A string (skipped whole: a name's digits are text), maybe with a wide integer as its key's value; or a wide
# integer elsewhere (an array item). Not a fraction's or exponent's digits, nor digits after a leading 0.
_WIDE = re.compile(rb'("[^"\\]*(?:\\.[^"\\]*)*")(?:(\s*:\s*)(-?)([1-9]\d{18,})(?![\d.eE]))?'
                   rb'|(?<![\w.+-])(-?)([1-9]\d{18,})(?![\d.eE])')
_RANGE_CHECKED = (b'"ts"', b'"dur"')  # pass 1 refuses these out of range, by their value


def _outside(digits: bytes, negative: bool) -> bool:
    """Whether the integer of ``digits`` (no leading 0; ``negative``: after a ``-``) lies
    outside int64, compared as text (``int`` refuses literals of 4,300 digits or more)."""
    return len(digits) > 19 or (len(digits) == 19 and digits > (b"9223372036854775808" if negative
                                                                 else b"9223372036854775807"))


def _digit_mask(text: bytes) -> bytes:
    """``text`` with each digit as byte 1 and any other byte as 0 (numpy: a third of the time
    ``bytes.translate`` took to make every digit a 0), for one ``find`` per run of digits."""
    return ((np.frombuffer(text, np.uint8) - np.uint8(48)) < 10).tobytes()


def _may_be_wide(text: bytes) -> bool:
    """Whether ``text`` may hold an integer literal outside int64: an out-of-range run of 19+ digits not
    after ``.`` or an exponent (at C speed: real traces have none, but 19-digit fractions are common)."""
    digits = _digit_mask(text)
    at = digits.find(_RUN)
    while at >= 0:
        end = _DIGIT_RUN.match(text, at).end()
        sign = at > 0 and text[at - 1] == 45  # "-"
        before = text[at - 1 - sign : at - sign]
        if (before not in (b".", b"e", b"E", b"+") and text[end : end + 1] not in (b".", b"e", b"E")
                and text[at] != 48 and _outside(text[at:end], sign)):
            return True
        at = digits.find(_RUN, end)
    return False


def _bound(sign: bytes, digits: bytes) -> bytes:
    if not _outside(digits, sign == b"-"):
        return sign + digits
    return b"%d" % (INT64_MIN if sign else INT64_MAX)


def _clamp(m: re.Match) -> bytes:
    if m.group(6) is not None:
        return _bound(m.group(5), m.group(6))
    if m.group(4) is None or m.group(1) in _RANGE_CHECKED:
        return m.group(0)
    return m.group(1) + m.group(2) + _bound(m.group(3), m.group(4))


def clamp_wide_ints(text: bytes) -> bytes:
    """Integer literals outside int64 held at its bounds before any parse, so every load reads one value
    (Perfetto wraps them, orjson some); ``ts`` and ``dur`` keep theirs: pass 1 refuses them."""
    return _WIDE.sub(_clamp, text) if _may_be_wide(text) else text


class BelowBase(Exception):
    """A timestamp lies below the chosen base (Perfetto would drop it once rebased):
    plan again with ``Rebase.without_base``."""


def us_to_ns(value: int | float) -> int:
    """A µs number as parsed from rebased text (below 10^12, so exact to the ns) in integer ns."""
    return round(value * 1000) if isinstance(value, float) else int(value) * 1000


def us_to_ns_array(values: np.ndarray) -> np.ndarray:
    """``us_to_ns`` on a float64 column (NaN stays NaN): values below 10^12 µs are exact
    in a double, and numpy rounds halves to even as ``round`` does."""
    with np.errstate(over="ignore", invalid="ignore"):  # out of range: inf, judged by the caller
        return np.round(values * 1000)


def numbers(values: list) -> np.ndarray:
    """A float64 column of JSON numbers (and numeric strings, which Perfetto reads too);
    missing values are NaN, and so is anything else once one value is not a number."""
    try:
        return np.array(values, dtype=np.float64)  # None becomes NaN
    except (TypeError, ValueError, OverflowError):
        return np.array([v if v.__class__ in (int, float) else np.nan for v in values], dtype=np.float64)


def _ts_values(events: list) -> list:
    """Every event's ``ts`` as parsed (None where there is none)."""
    try:
        return list(map(dict.get, events, repeat("ts")))  # no Python frame per event
    except TypeError:  # an item that is no object (refused by pass 1's gather)
        return [e.get("ts") if e.__class__ is dict else None for e in events]


def _int_array(values: list) -> np.ndarray | None:
    """``values`` as int64 when each is an int (or a bool) in range, else None."""
    try:
        a = np.array(values)
    except (ValueError, TypeError, OverflowError):  # nested lists of unequal length
        return None
    return a if a.dtype == np.int64 and a.ndim == 1 else None


def _integers(raw: list, valid: np.ndarray) -> bool:
    """Whether the ``valid`` (numeric) ones of ``raw`` are all of type int (not float, bool or
    a numeric string)."""
    return all(raw[i].__class__ is int for i in np.flatnonzero(valid).tolist())


def write_ts(events: list, ts: np.ndarray) -> None:
    """Put ``ts`` (``Rebase.integers``, one per event) into the events that have one."""
    valid = ~np.isnan(ts)
    deque(map(dict.__setitem__, compress(events, valid.tolist()), repeat("ts"),
              ts[valid].astype(np.int64).tolist()), maxlen=0)  # run in C: no frame per event


def top_level_ts(events: list) -> np.ndarray:
    """Every event's ``ts`` as ``numbers`` reads it (NaN where there is none)."""
    return numbers(_ts_values(events))


class Rebase:
    """Replaces the prefix of the first large timestamp by ``1`` (``fast``: ``16612|03462674279.5`` ->
    ``1|03462674279.5``, minus ``(prefix - 1) * 10^11`` µs); chunks not ``verified`` take ``exact``."""

    def __init__(self, prefix: bytes | None = None, sep: bytes | None = None,
                 numeric: bool = False, fixed: bool = False) -> None:
        self.prefix = prefix
        self.fixed = fixed or prefix is not None  # ``choose`` has decided (no prefix: no base)
        self.sep = sep  # the spacing ``fast`` handles: ``"ts":`` or ``"ts": `` (None: none)
        # Rebase parsed integers (``integers``), not text: for loads that re-serialize events,
        # unless the first large timestamp has a fraction (its writer's are not integers).
        self.numeric = numeric
        self.replaced = 0  # by the last ``rewrite``
        self.last_text = b""  # the last text given to ``rewrite``, as it was

    def without_base(self) -> Rebase:
        """A rebase that subtracts nothing, for a trace with a timestamp below the base."""
        return Rebase(numeric=self.numeric, fixed=True)

    @property
    def base_us(self) -> int:
        return (int(self.prefix) - 1) * 10**KEEP if self.prefix else 0

    @property
    def base_ns(self) -> int:
        """What was subtracted, in ns (0 when nothing was)."""
        return self.base_us * 1000

    def choose(self, text: bytes) -> None:
        """Take the prefix (and spacing) from the first large timestamp; none for good if the first text
        with a timestamp has no large one (an earlier unrebased chunk must not lie below a later base)."""
        if self.fixed:
            return
        m = _LARGE.search(text)
        if m is None:
            self.fixed = _ANY.search(text) is not None
        else:
            self.fixed = True
            self.prefix = m.group(3)[:-KEEP]
            self.numeric = self.numeric and m.group(4) is None
            self.sep = b'"ts":' + m.group(2) if not m.group(1) and m.group(2) in (b"", b" ") else None

    def fast(self, text: bytes) -> tuple[bytes, int]:
        """The text with the prefix replaced after ``sep``, and how many were (none when
        ``numeric``: ``integers`` rebases the parsed events)."""
        if self.prefix is None or self.sep is None or self.numeric:
            return text, 0
        old, new = self.sep + self.prefix, self.sep + b"1"
        out = text.replace(old, new)  # the prefix has 2+ digits: the length says how many
        return out, (len(text) - len(out)) // (len(old) - len(new))

    def rewrite(self, text: bytes, skim: Callable | None = None) -> tuple[bytes, int]:
        """``choose`` on the whole text, then ``clamp_wide_ints`` and ``fast`` on what ``skim`` leaves
        (less to scan), kept for ``verified``; returns (text, events cut)."""
        self.choose(text)
        self.last_text = text
        short, cut = skim(text) if skim is not None else (text, 0)
        out, self.replaced = self.fast(clamp_wide_ints(short))
        return out, cut

    def exact(self, text: bytes) -> bytes:
        """Every large timestamp minus the base, exactly (Decimal), whatever its form."""
        return _EXACT.sub(self._subtract, text) if self.prefix is not None else text

    def verified(self, ts: np.ndarray | None, replaced: int) -> bool:
        """Whether ``fast`` was exact for the events parsed from its output (``ts``: their
        ``top_level_ts``, None without a prefix): every timestamp replaced, so in [10^11, 2 * 10^11)."""
        if self.prefix is None:
            return True  # no base
        fast_form = int(((ts >= 10**KEEP) & (ts < 2 * 10**KEEP)).sum())
        return fast_form == replaced and fast_form == len(ts) - int(np.isnan(ts).sum())

    def check(self, original: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """``ts`` (``top_level_ts`` of events parsed from ``exact``'s text), after raising ``BelowBase`` if
        an ``original`` one lies below the base or one is negative once rebased."""
        if (original < self.base_us).any() or (ts < 0).any():
            raise BelowBase(f"a timestamp lies below the base {self.base_us} µs")
        return ts

    def integers(self, events: list) -> np.ndarray | None:
        """``top_level_ts`` of events parsed from unrebased text minus the base if all are integers below
        2^53, else None (rebase the text); ``BelowBase`` below the base. ``write_ts`` sets them."""
        raw = _ts_values(events)
        if self.prefix is None:
            return numbers(raw)  # no base
        ints = _int_array(raw)  # every event has an integer ts: the usual case
        ts = numbers(raw) if ints is None else ints.astype(np.float64)
        valid = ~np.isnan(ts)
        if not valid.any():
            return ts
        base = self.base_us
        if (ts[valid] < base).any():  # a fraction below the base may round up: ``check`` sees it
            raise BelowBase(f"a timestamp lies below the base {base} µs")
        if (ts[valid] >= 2**53).any() or (ints is None and not _integers(raw, valid)):
            return None
        ts[valid] -= base  # exact: both are integers below 2^53
        return ts

    def _subtract(self, m: re.Match) -> bytes:
        value = Decimal(m.group(3).decode()) - self.base_us
        return b'"ts"' + m.group(1) + b":" + m.group(2) + format(value, "f").encode()


_NEGATIVE_TID = re.compile(rb'("tid"\s*:\s*)-(\d+)')


def unsigned_tid(tid: int) -> int:
    """Kineto writes thread ids above 2^31 as negative int32; Perfetto folds those into
    the process's main thread, so give it the unsigned 32-bit value instead."""
    return tid & 0xFFFFFFFF if tid < 0 else tid


def fix_negative_tids(text: bytes) -> bytes:
    """Rewrite every negative integer ``tid`` to its unsigned 32-bit value."""
    return fix_negative_tids_shifted(text)[0]


def fix_negative_tids_shifted(text: bytes) -> tuple[bytes, list[tuple[int, int]]]:
    """``fix_negative_tids``, and where it moved the text: per rewritten tid, its end in
    ``text`` and the total length change up to there (to map offsets into the result)."""
    if not _NEGATIVE_TID.search(text):  # cheaper than checking for ``: -`` first
        return text, []
    pieces, shifts, pos, delta = [], [], 0, 0
    for m in _NEGATIVE_TID.finditer(text):
        new = m.group(1) + str(unsigned_tid(-int(m.group(2)))).encode()
        pieces += [text[pos : m.start()], new]
        delta += len(new) - (m.end() - m.start())
        shifts.append((m.end(), delta))
        pos = m.end()
    pieces.append(text[pos:])
    return b"".join(pieces), shifts
