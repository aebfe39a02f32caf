"""Frequent contiguous sub-sequences (repeats) of integer sequences, by suffix array.

The definition (``tests/test_patterns_mining.py`` checks it against a brute force):

- A pattern is a string P of symbols, ``len(P) >= min_len``. Its *count* is the number of
  non-overlapping occurrences, taken greedily left to right in each sequence (the most
  there can be); occurrences never span two sequences. P is frequent when count >= 2.
- A frequent P is *absorbed*, and not reported, when every occurrence of P extends by the
  same symbol on one side (always followed by x, or always preceded by c) and that longer
  pattern is frequent too: it is reported in P's place.
- A power P = R^j (j >= 2, R primitive) is not reported when R^(j-1) is itself at least
  ``min_len`` long: a block repeated 24 times is R with count 24, not also R^2, R^3, ...
- A rotation of a repeated block is not reported: P (length n) is left out when, for one
  offset 0 < j < n, every occurrence of P starts j symbols into a square QQ (2n symbols
  with period n; Q is P rotated). Three identical steps ABC ABC ABC are ABC with count 3,
  not also BCA and CAB with count 2.

Every pattern left is a node (or, for overlapping repeats, a point on an edge) of the
suffix tree of the sequences, so the suffix array and its LCP array enumerate them all:
the suffix array by prefix doubling (numpy, O(n log^2 n)), the LCP array by binary lifting
over the doubling ranks (numpy, O(n log n)), the LCP intervals by one stack pass (O(n)).
The square and power tests read common prefix lengths of any two suffixes in O(1) from a
sparse table over the LCP array, for all candidates at once. Counting takes every
occurrence of a pattern whose occurrences never overlap, and walks the others greedily.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tables import sorted_codes


@dataclass(frozen=True)
class Repeat:
    """One reported pattern: its symbols and its counted (non-overlapping) occurrences as
    (sequence index, start index within that sequence), in text order."""

    symbols: tuple[int, ...]
    seq: np.ndarray
    start: np.ndarray

    @property
    def count(self) -> int:
        return len(self.start)


def _text(sequences: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All sequences end to end, each followed by its own separator symbol (so no common
    prefix crosses a sequence's end); symbols shifted above the separators. Also each
    text position's sequence and the start offset of every sequence."""
    m = len(sequences)
    lengths = np.array([len(s) for s in sequences], np.int64)
    offsets = np.r_[0, np.cumsum(lengths + 1)[:-1]].astype(np.int64)
    text = np.empty(int(lengths.sum()) + m, np.int64)
    seq_of = np.repeat(np.arange(m, dtype=np.int64), lengths + 1)
    for s, off, n in zip(sequences, offsets.tolist(), lengths.tolist(), strict=True):
        text[off:off + n] = np.asarray(s, np.int64) + m
    text[offsets + lengths] = np.arange(m, dtype=np.int64)  # separators: unique, below symbols
    return text, seq_of, offsets


def suffix_array(text: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The suffix array of ``text`` (non-negative ints) and the rank arrays of every doubling
    round (``ranks[k][i]``: rank of ``text[i:i + 2**k]`` among all such prefixes)."""
    n = len(text)
    rank = sorted_codes(text)
    ranks = [rank]
    k = 1
    sa = np.argsort(rank, kind="stable")
    while k < n:
        second = np.full(n, -1, np.int64)
        second[:n - k] = rank[k:]
        sa = np.lexsort((second, rank))
        key_r, key_s = rank[sa], second[sa]
        new = np.empty(n, np.int64)
        new[sa] = np.r_[0, np.cumsum((key_r[1:] != key_r[:-1]) | (key_s[1:] != key_s[:-1]))]
        rank = new
        ranks.append(rank)
        if rank.max(initial=0) == n - 1:
            break
        k *= 2
    return sa.astype(np.int64), ranks


def lcp_pairs(ranks: list[np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Common prefix length of the suffixes at ``a`` and at ``b`` (pairs of distinct text
    positions; a position past the end is an empty suffix), by binary lifting over the
    doubling ranks (equal rank at level k = equal 2**k symbols)."""
    n = len(ranks[0])
    a, b = a.astype(np.int64), b.astype(np.int64)
    out = np.zeros(len(a), np.int64)
    for k in range(len(ranks) - 1, -1, -1):
        step = 1 << k
        ok = (a + step <= n) & (b + step <= n)
        ia, ib = np.clip(a, 0, n - 1), np.clip(b, 0, n - 1)
        same = ok & (ranks[k][ia] == ranks[k][ib])
        a, b, out = a + step * same, b + step * same, out + step * same
    return out


def lcp_array(sa: np.ndarray, ranks: list[np.ndarray]) -> np.ndarray:
    """``lcp[i]`` = common prefix length of suffixes ``sa[i-1]`` and ``sa[i]`` (``lcp[0]`` = 0)."""
    lcp = np.zeros(len(sa), np.int64)
    if len(sa) > 1:
        lcp[1:] = lcp_pairs(ranks, sa[:-1], sa[1:])
    return lcp


class RangeTable:
    """``ufunc`` (np.minimum or np.maximum) of any range of ``values`` in O(1), for many
    ranges at once: a sparse table (level k: the reduction of 2**k consecutive entries),
    O(n log n) int32 memory (every value is under 2**31)."""

    def __init__(self, values: np.ndarray, ufunc: np.ufunc) -> None:
        n = len(values)
        levels = max(n - 1, 1).bit_length()
        self.table = np.zeros((levels, max(n, 1)), np.int32)
        self.table[0, :n] = values
        for k in range(1, levels):
            h, width = 1 << (k - 1), n - (1 << k) + 1
            self.table[k, :width] = ufunc(self.table[k - 1, :width], self.table[k - 1, h:h + width])
        self.ufunc = ufunc

    def __call__(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The reduction of each non-empty range ``values[lo:hi]`` (int64)."""
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        k = np.frexp((hi - lo).astype(np.float64))[1].astype(np.int64) - 1
        flat = self.table.reshape(-1)
        width = self.table.shape[1]
        return self.ufunc(flat[k * width + lo], flat[k * width + hi - (1 << k)]).astype(np.int64)


class Prefixes:
    """Common prefix length of any two suffixes of a text, each in O(1): the minimum of the
    LCP array between their places in the suffix array (a ``RangeTable``)."""

    def __init__(self, sa: np.ndarray, lcp: np.ndarray) -> None:
        n = self.n = len(sa)
        self.place = np.empty(n, np.int64)
        self.place[sa] = np.arange(n)
        self.smallest = RangeTable(lcp, np.minimum)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Common prefix length of the suffixes at ``a`` and ``b`` (text positions; a
        position at or past the end is an empty suffix)."""
        n = self.n
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        out = np.zeros(len(a), np.int64)
        both = (a < n) & (b < n)
        same = both & (a == b)
        out[same] = n - a[same]
        q = np.flatnonzero(both & ~same)
        pa, pb = self.place[a[q]], self.place[b[q]]
        out[q] = self.smallest(np.minimum(pa, pb) + 1, np.maximum(pa, pb) + 1)  # lcp[lo..hi]
        return out


def _in_squares(common: Prefixes, pos: np.ndarray, group: np.ndarray, length: np.ndarray,
                groups: int) -> np.ndarray:
    """Per pattern (``group`` of each occurrence ``pos``; ``length`` n per occurrence): does
    every occurrence sit at one same offset 0 < j < n inside a square QQ (2n symbols with
    period n)? Around p, period n holds on [p - B, p + n + F) (F: common prefix of the
    suffixes at p and p + n; B likewise backwards), so the offsets that work at p are
    n - F <= j <= B. The smallest common candidate is j* = max(1, max(n - F)); it works
    everywhere exactly when B >= j* everywhere, i.e. the suffixes at p - j* and p - j* + n
    share j* symbols."""
    forward = common(pos, pos + length)
    j = np.ones(groups, np.int64)
    np.maximum.at(j, group, length - forward)
    jp = j[group]
    ok = (jp < length) & (pos - jp >= 0)
    ok[ok] = common(pos[ok] - jp[ok], pos[ok] - jp[ok] + length[ok]) >= jp[ok]
    every = np.ones(groups, bool)
    np.logical_and.at(every, group, ok)
    return every


_DIVISORS: dict[int, list[int]] = {}


def _proper_divisors(n: int) -> list[int]:
    if n not in _DIVISORS:
        small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
        _DIVISORS[n] = sorted({*small, *(n // d for d in small)} - {n})
    return _DIVISORS[n]


def _powers(common: Prefixes, first: np.ndarray, length: np.ndarray, min_len: int) -> np.ndarray:
    """Which patterns (first occurrence ``first``, ``length`` n) are R^j with R^(j-1) at least
    ``min_len`` long: P has a period d dividing n with d <= n - min_len (the suffixes at p
    and p + d share n - d symbols); the primitive root divides every such d."""
    which, at, d = [], [], []
    for i, (p, n) in enumerate(zip(first.tolist(), length.tolist())):
        for q in _proper_divisors(n):
            if q > n - min_len:
                break
            which.append(i)
            at.append(p)
            d.append(q)
    out = np.zeros(len(first), bool)
    if which:
        w, at, d = np.array(which, np.int64), np.array(at, np.int64), np.array(d, np.int64)
        out[w[common(at, at + d) >= length[w] - d]] = True
    return out


def _greedy(pos: np.ndarray, length: int) -> list[int]:
    """Non-overlapping occurrences of one pattern, greedily left to right (``pos`` sorted):
    their indices in ``pos``."""
    picked = []
    i, n = 0, len(pos)
    while i < n:
        picked.append(i)
        i = int(np.searchsorted(pos, pos[i] + length))
    return picked


def range_reduce(ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 fill) -> np.ndarray:
    """``ufunc`` over each range ``values[lo:hi]`` (every range non-empty; ranges may overlap),
    by one ``reduceat`` on (lo, hi) pairs: no index array of the ranges' total length."""
    if not len(lo):
        return np.zeros(0, values.dtype)
    padded = np.r_[values, np.array([fill], values.dtype)]  # hi may be len(values)
    pairs = np.empty(2 * len(lo), np.int64)
    pairs[0::2], pairs[1::2] = lo, hi
    return ufunc.reduceat(padded, pairs)[0::2]


def lcp_intervals(lcp: np.ndarray, min_depth: int) -> tuple[np.ndarray, ...]:
    """Every LCP interval (suffix-tree internal node) of depth >= ``min_depth``: its depth,
    its suffix-array range [lo, hi) and its parent's depth; one stack pass."""
    n = len(lcp)
    depth, lo, hi, parent = [], [], [], []
    stack: list[list[int]] = [[0, 0]]  # [lcp, left bound]
    values = lcp.tolist() + [0]
    for i in range(1, n + 1):
        cur = values[i]
        lb = i - 1
        while cur < stack[-1][0]:
            d, left = stack.pop()
            if d >= min_depth:
                depth.append(d)
                lo.append(left)
                hi.append(i)
                parent.append(max(cur, stack[-1][0]))
            lb = left
        if cur > stack[-1][0]:
            stack.append([cur, lb])
    return tuple(np.array(c, np.int64) for c in (depth, lo, hi, parent))


def repeats(sequences: list[np.ndarray], min_len: int = 3) -> list[Repeat]:
    """Every reported pattern (see the module's definition) of ``sequences`` (arrays of
    non-negative ints), most frequent first, then longest, then by symbols."""
    min_len = max(int(min_len), 1)
    sequences = [np.asarray(s, np.int64) for s in sequences]
    if not sequences or sum(len(s) for s in sequences) < 2:
        return []
    text, seq_of, offsets = _text(sequences)
    m = len(sequences)
    sa, ranks = suffix_array(text)
    lcp = lcp_array(sa, ranks)
    common = Prefixes(sa, lcp)
    depth, lo, hi, parent = lcp_intervals(lcp, min_len)
    # Each node reports at most its longest still-frequent prefix below it: count >= 2
    # exactly when the length is at most the span between its first and last occurrence.
    # (Range tables, not a pass over each node's occurrences: in a periodic text the nodes
    # R, R^2, ... hold m, m - 1, ... occurrences, quadratic in all.)
    first = RangeTable(sa, np.minimum)(lo, hi)
    span = RangeTable(sa, np.maximum)(lo, hi) - first
    length = np.minimum(depth, span)
    # Left extension: every occurrence preceded by the same symbol (never a separator, each
    # unique; position 0 has none) and that longer pattern frequent too (span >= length + 1).
    before = np.where(sa > 0, text[np.maximum(sa - 1, 0)], -1)
    changes = np.r_[0, np.cumsum(before[1:] != before[:-1])]  # same symbol on [lo, hi)
    absorbed = (changes[hi - 1] == changes[lo]) & (before[lo] >= m) & (span >= length + 1)
    keep = np.flatnonzero((length >= np.maximum(parent + 1, min_len)) & ~absorbed)
    # R^j whose R^(j-1) is a pattern itself (first: it leaves out R^2, R^3, ... of a run).
    keep = keep[~_powers(common, first[keep], length[keep], min_len)]
    # Rotations of a repeated block: suppressed when every occurrence sits in a square.
    group, occ = _occurrences(sa, lo[keep], hi[keep])
    keep = keep[~_in_squares(common, occ, group, length[keep][group], len(keep))]
    if not len(keep):
        return []
    group, occ = _occurrences(sa, lo[keep], hi[keep])
    order = np.lexsort((occ, group))
    starts, counted = _counted(occ[order], group[order], length[keep])
    seq = seq_of[starts]
    start = starts - offsets[seq]
    cut = np.cumsum(np.bincount(counted, minlength=len(keep)))[:-1].tolist()
    found = [Repeat(tuple((text[f:f + n] - m).tolist()), s, t) for f, n, s, t in zip(
        first[keep].tolist(), length[keep].tolist(), np.split(seq, cut), np.split(start, cut),
        strict=True)]
    found.sort(key=lambda r: (-r.count, -len(r.symbols), r.symbols))
    return found


def _occurrences(sa: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every text position in the suffix-array ranges [lo, hi), with its range's number."""
    sizes = hi - lo
    group = np.repeat(np.arange(len(lo)), sizes)
    return group, sa[np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes - lo, sizes)]


def _counted(pos: np.ndarray, group: np.ndarray, length: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The counted (non-overlapping, greedy) occurrences of each pattern, from its occurrences
    ``pos`` (sorted by ``group``, then position; pattern g is ``length[g]`` long): every
    one where none overlaps the next, ``_greedy`` for the others. Positions and groups."""
    overlaps = (group[1:] == group[:-1]) & (pos[1:] - pos[:-1] < length[group[1:]])
    kept = np.ones(len(pos), bool)
    bad = np.flatnonzero(np.bincount(group[1:][overlaps], minlength=len(length)))
    if len(bad):
        lo, hi = np.searchsorted(group, bad), np.searchsorted(group, bad, "right")
        for g, a, b in zip(bad.tolist(), lo.tolist(), hi.tolist(), strict=True):
            kept[a:b] = False
            kept[a + np.array(_greedy(pos[a:b], int(length[g])), np.int64)] = True
    return pos[kept], group[kept]
