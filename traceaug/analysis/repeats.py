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

Every pattern left is a node (or, for overlapping repeats, a point on an edge) of the
suffix tree of the sequences, so the suffix array and its LCP array enumerate them all:
the suffix array by prefix doubling (numpy, O(n log^2 n)), the LCP array by binary lifting
over the doubling ranks (numpy, O(n log n)), the LCP intervals by one stack pass (O(n)).
Counting walks each reported pattern's occurrences once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
    _, rank = np.unique(text, return_inverse=True)
    rank = rank.reshape(-1).astype(np.int64)
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


def lcp_array(sa: np.ndarray, ranks: list[np.ndarray]) -> np.ndarray:
    """``lcp[i]`` = common prefix length of suffixes ``sa[i-1]`` and ``sa[i]`` (``lcp[0]`` = 0),
    by binary lifting over the doubling ranks (equal rank at level k = equal 2**k symbols)."""
    n = len(sa)
    lcp = np.zeros(n, np.int64)
    if n < 2:
        return lcp
    a, b = sa[:-1].copy(), sa[1:].copy()
    out = np.zeros(n - 1, np.int64)
    for k in range(len(ranks) - 1, -1, -1):
        step = 1 << k
        ok = (a + step <= n) & (b + step <= n)
        ia, ib = np.minimum(a, n - 1), np.minimum(b, n - 1)
        same = ok & (ranks[k][ia] == ranks[k][ib])
        a, b, out = a + step * same, b + step * same, out + step * same
    lcp[1:] = out
    return lcp


def _greedy(pos: np.ndarray, length: int) -> np.ndarray:
    """Non-overlapping occurrences of one pattern, greedily left to right (``pos`` sorted)."""
    picked = []
    i, n = 0, len(pos)
    while i < n:
        picked.append(i)
        i = int(np.searchsorted(pos, pos[i] + length))
    return pos[picked]


def _root_period(p: np.ndarray) -> int:
    """Length of the primitive root R of ``p`` = R^j (``len(p)`` itself if ``p`` is primitive)."""
    n = len(p)
    for d in range(1, n // 2 + 1):
        if n % d == 0 and np.array_equal(p[d:], p[:-d]):
            return d
    return n


def repeats(sequences: list[np.ndarray], min_len: int = 3) -> list[Repeat]:
    """Every reported pattern (see the module's definition) of ``sequences`` (arrays of
    non-negative ints), most frequent first, then longest, then by symbols."""
    min_len = max(int(min_len), 1)
    sequences = [np.asarray(s, np.int64) for s in sequences]
    if not sequences or sum(len(s) for s in sequences) < 2:
        return []
    text, seq_of, offsets = _text(sequences)
    n = len(text)
    sa, ranks = suffix_array(text)
    lcp = lcp_array(sa, ranks)
    m = len(sequences)

    found: list[Repeat] = []
    stack: list[list[int]] = [[0, 0]]  # [lcp, left bound]
    for i in range(1, n + 1):
        cur = int(lcp[i]) if i < n else 0
        lb = i - 1
        while cur < stack[-1][0]:
            depth, left = stack.pop()
            parent = max(cur, stack[-1][0])
            if depth >= min_len:
                _report(found, text, sa[left:i], depth, parent, min_len, m)
            lb = left
        if cur > stack[-1][0]:
            stack.append([cur, lb])
    for r in found:  # text positions -> (sequence, start within it)
        s = seq_of[r.start]
        object.__setattr__(r, "seq", s)
        object.__setattr__(r, "start", r.start - offsets[s])
    found.sort(key=lambda r: (-r.count, -len(r.symbols), r.symbols))
    return found


def _report(found: list[Repeat], text: np.ndarray, occ: np.ndarray, depth: int, parent: int,
            min_len: int, m: int) -> None:
    """The one pattern (if any) an LCP interval reports: the longest prefix of length in
    (parent, depth] that is still frequent, unless absorbed on the left or a power."""
    pos = np.sort(occ)
    span = int(pos[-1] - pos[0])  # count >= 2 exactly when length <= span
    length = min(depth, span)
    if length < max(parent + 1, min_len):
        return
    before = text[pos - 1] if pos[0] > 0 else None
    if before is not None and before[0] >= m and (before == before[0]).all() and span >= length + 1:
        return  # always preceded by the same symbol, and that longer pattern is frequent
    symbols = text[pos[0]:pos[0] + length]
    if length - _root_period(symbols) >= min_len:
        return  # R^j whose R^(j-1) is a pattern itself
    found.append(Repeat(tuple((symbols - m).tolist()), np.empty(0, np.int64),
                        _greedy(pos, length)))
