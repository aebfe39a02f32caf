"""Frequent contiguous sub-sequences (repeats) of integer sequences, by suffix array and LCP intervals in
numpy; the definition (``repeats``) is checked against ``tests/test_patterns_mining.py``'s brute force."""

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
    """All sequences end to end, each followed by its own separator (no common prefix crosses a sequence's
    end), symbols shifted above the separators; also each position's sequence and each sequence's offset."""
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
    """Common prefix length of the suffixes at ``a`` and ``b`` (distinct positions; past the end: empty), by
    binary lifting over the doubling ranks (equal rank at level k = equal 2**k symbols)."""
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
    lcp[1:] = lcp_pairs(ranks, sa[:-1], sa[1:])
    return lcp


class RangeTable:
    """``ufunc`` (np.minimum / np.maximum) of any range of ``values`` in O(1), many ranges at once: a sparse
    table (level k reduces 2**k entries), O(n log n) int32 memory (every value is under 2**31)."""

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
    """Per pattern (``group`` of each occurrence ``pos``, ``length`` n): does every occurrence sit at one
    offset 0 < j < n in a square QQ (2n symbols of period n)? Only the smallest candidate j needs a test."""
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
    """Which patterns (first occurrence ``first``, ``length`` n) are R^j with R^(j-1) >= ``min_len`` long: a
    period d dividing n with d <= n - min_len (suffixes at p and p + d share n - d symbols)."""
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
    """Every pattern of ``sequences`` (non-negative ints) with >= 2 greedy non-overlapping occurrences, less
    absorbed ones, powers and rotations; most frequent first, then longest, then by symbols."""
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
    # Each node reports at most its longest still-frequent prefix: count >= 2 exactly when the length is at
    # most its first-to-last occurrence span (range tables: a pass over occurrences is quadratic if periodic).
    first = RangeTable(sa, np.minimum)(lo, hi)  # one table at a time
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
    # A periodic pattern's occurrences as arithmetic progressions (one per run of its period
    # that holds it), the others listed one by one.
    period = _period(ranks, common, first[keep], length[keep])
    runs = _progressions(common, text, sa, lo[keep], hi[keep], first[keep], length[keep], period)
    listed = np.flatnonzero(period == 0)
    group, occ = _occurrences(sa, lo[keep][listed], hi[keep][listed])
    # Rotations of a repeated block: suppressed when every occurrence sits in a square (of
    # a progression, its first two and last two occurrences decide: see ``_ends``).
    group = listed[group]
    r_group, r_occ = _ends(*runs)
    both = np.r_[group, r_group]
    squares = _in_squares(common, np.r_[occ, r_occ], both, length[keep][both], len(keep))
    renumber = np.cumsum(~squares) - 1
    stays = ~squares[group]
    group, occ = renumber[group[stays]], occ[stays]
    stays = ~squares[runs[0]]
    runs = (renumber[runs[0][stays]], *(a[stays] for a in runs[1:]))
    keep = keep[~squares]
    if not len(keep):
        return []
    order = np.lexsort((occ, group))
    starts, counted = _counted(occ[order], group[order], length[keep])
    r_starts, r_counted = _counted_runs(*runs, length[keep])
    starts, counted = np.r_[starts, r_starts], np.r_[counted, r_counted]
    order = np.lexsort((starts, counted))
    starts, counted = starts[order], counted[order]
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
    """Each pattern's counted (greedy, non-overlapping) occurrences from ``pos`` (sorted by ``group``, then
    position): all where none overlaps the next, else ``_greedy``. Positions and groups."""
    overlaps = (group[1:] == group[:-1]) & (pos[1:] - pos[:-1] < length[group[1:]])
    kept = np.ones(len(pos), bool)
    bad = np.flatnonzero(np.bincount(group[1:][overlaps], minlength=len(length)))
    if len(bad):
        lo, hi = np.searchsorted(group, bad), np.searchsorted(group, bad, "right")
        for g, a, b in zip(bad.tolist(), lo.tolist(), hi.tolist(), strict=True):
            kept[a:b] = False
            kept[a + np.array(_greedy(pos[a:b], int(length[g])), np.int64)] = True
    return pos[kept], group[kept]


def _period(ranks: list[np.ndarray], common: Prefixes, first: np.ndarray, length: np.ndarray
            ) -> np.ndarray:
    """Per pattern (``first`` occurrence, ``length`` L): its smallest period p if p <= L / 2, else 0 (also 0,
    listed one by one then, when not settled in a few steps), from the next occurrences of its prefix."""
    n = len(ranks[0])
    period = np.zeros(len(first), np.int64)
    level = np.frexp(length.astype(np.float64))[1].astype(np.int64) - 2  # b <= L / 2 < 2b
    for k in np.unique(level[(level >= 0) & (level < len(ranks))]).tolist():
        nodes = np.flatnonzero(level == k)
        f, size, b = first[nodes], length[nodes], 1 << k
        keys = np.sort(ranks[k] * n + np.arange(n))  # positions of each b-symbol string
        want = ranks[k][f] * n
        y = f + 1
        for step in range(4):
            at = np.searchsorted(keys, want + y)
            found = keys[np.minimum(at, n - 1)] - want
            d = np.where((at < n) & (found < n), found, n) - f  # the next B at or after y
            near = 2 * d <= size
            shared = common(f, f + np.minimum(d, n - f))
            ok = near & (shared >= size - d)
            period[nodes[ok]] = d[ok]
            more = near & ~ok
            if not more.any():
                break
            skip = (step == 0) & (d <= b)
            nodes, f, size, want = nodes[more], f[more], size[more], want[more]
            y = np.where(skip[more], f + d[more] + shared[more] - b + 1, f + d[more] + 1)
    return period


def _progressions(common: Prefixes, text: np.ndarray, sa: np.ndarray, lo: np.ndarray,
                  hi: np.ndarray, first: np.ndarray, length: np.ndarray, period: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The occurrences of each periodic node (``period`` p > 0) as progressions head, head + p, ...: columns
    node, head, count, step. Tails by binary search in the node's range, heads by binary search back."""
    nodes = np.flatnonzero(period > 0)
    lo, hi, size, p = lo[nodes], hi[nodes], length[nodes], period[nodes]
    c = first[nodes] + size - p  # C: the pattern's last p symbols

    def after(j: np.ndarray, strictly: bool) -> np.ndarray:
        """Does the suffix sa[j] + L (past the pattern) start with C, or sort after it?"""
        at = sa[np.minimum(j, len(sa) - 1)] + size
        shared = np.minimum(common(at, c), p)
        tail = shared < p
        bigger = tail & (text[np.minimum(at + shared, len(text) - 1)] > text[c + shared])
        return bigger if strictly else bigger | ~tail

    inner = []
    for strictly in (False, True):  # the first j in [lo, hi) past C, or hi
        a, b = lo.copy(), hi.copy()
        while (a < b).any():
            mid = (a + b) // 2
            ok = after(mid, strictly) | (mid >= b)
            a, b = np.where(ok, a, mid + 1), np.where(ok, mid, b)
        inner.append(a)
    which, tails = _occurrences(sa, np.r_[lo, inner[1]], np.r_[inner[0], hi])
    which %= max(len(nodes), 1)
    step, size = p[which], size[which]
    a, b = np.zeros(len(tails), np.int64), tails // step  # largest j that holds
    while (a < b).any():
        mid = (a + b + 1) // 2
        at = tails - mid * step
        ok = common(at, at + step) >= (mid - 1) * step + size
        a, b = np.where(ok, mid, a), np.where(ok, b, mid - 1)
    return nodes[which], tails - a * step, a + 1, step


def _ends(node: np.ndarray, head: np.ndarray, count: np.ndarray, step: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """The first two and last two occurrences of each progression, with its node: the square test's answer on
    them is its answer on all."""
    picks = np.stack([np.zeros_like(count), np.minimum(1, count - 1),
                      np.maximum(count - 2, 0), count - 1], 1)
    return np.repeat(node, 4), (head[:, None] + picks * step[:, None]).reshape(-1)


def _counted_runs(node: np.ndarray, head: np.ndarray, count: np.ndarray, step: np.ndarray,
                  length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The counted (greedy, non-overlapping) occurrences of progressions with their node: every ceil(L / p)-th
    from the first clear of the previous pick (one node's progressions never interleave)."""
    order = np.lexsort((head, node))
    node, head, count, step = node[order], head[order], count[order], step[order]
    size = length[node]
    jump = -(-size // step)  # progression steps between two picks
    first = np.zeros(len(node), np.int64)  # index of each progression's first pick
    picks = (count - 1) // jump + 1
    end = head + (picks - 1) * jump * step + size  # just past the last pick
    clash = np.flatnonzero((node[1:] == node[:-1]) & (head[1:] < end[:-1])) + 1
    if len(clash):  # the previous pick overlaps: walk that node's progressions in order
        for g in np.unique(node[clash]).tolist():
            free = -1
            for i in np.flatnonzero(node == g).tolist():
                skip = max(0, -(-(free - head[i]) // step[i]))
                first[i] = skip
                picks[i] = max(0, (count[i] - 1 - skip) // jump[i] + 1)
                if picks[i]:
                    free = head[i] + (skip + (picks[i] - 1) * jump[i]) * step[i] + size[i]
    at = np.repeat(head + first * step, picks)
    k = np.arange(int(picks.sum())) - np.repeat(np.cumsum(picks) - picks, picks)
    return at + k * np.repeat(jump * step, picks), np.repeat(node, picks)
