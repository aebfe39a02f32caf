"""Unions of time intervals [ts, end) in exact integer ns: busy time, idle gaps, overlaps."""

from __future__ import annotations

import numpy as np

from .sums import total
from .tables import first_appearance


def int_groups(*keys: np.ndarray) -> np.ndarray:
    """Each row's group over integer ``keys`` (device, stream, ...), numbered in order of first
    appearance; ``tables.groups`` without hashing one Python value per row."""
    if not len(keys[0]):
        return np.empty(0, np.int64)
    return first_appearance(sorted_groups(*keys)[0])


def sorted_groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's group over integer ``keys`` in sorted key order, and each group's first row: the inverse and
    index of ``np.unique(..., axis=0)``, by one lexsort (faster than its sort of rows as records)."""
    order = np.lexsort(keys[::-1])
    new = np.zeros(len(order), bool)
    new[:1] = True
    for k in keys:
        k = k[order]
        new[1:] |= k[1:] != k[:-1]
    inverse = np.empty(len(order), np.int64)
    inverse[order] = np.cumsum(new) - 1
    return inverse, order[new]


def merge(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [ts, end) as disjoint sorted intervals (touching ones join)."""
    if not len(ts):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(ts, kind="stable")
    ts, end = np.asarray(ts, np.int64)[order], np.asarray(end, np.int64)[order]
    reach = np.maximum.accumulate(end)
    starts_new = np.r_[True, ts[1:] > reach[:-1]]
    first = np.flatnonzero(starts_new)
    return ts[first], np.maximum.reduceat(end, first)


def union_length(ts: np.ndarray, end: np.ndarray) -> int:
    """Total length of the union of intervals [ts, end)."""
    lo, hi = merge(ts, end)
    return total(hi - lo)


def covered_in(ts: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window [lo, hi): the length of the union of intervals [ts, end) inside it (int64); one merge and
    binary searches, not ops clipped to every window (too slow for many steps)."""
    a, b = merge(ts, end)
    return covered_by_mask(a, b, np.zeros(len(a), np.int64), lo, hi, 1)[:, 0]


def clip(ts: np.ndarray, end: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The parts of intervals inside [lo, hi) (empty parts dropped)."""
    a, b = np.maximum(ts, lo), np.minimum(end, hi)
    keep = b > a
    return a[keep], b[keep]


def gaps(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The idle gaps between the merged intervals: (gap start, gap end), sorted."""
    lo, hi = merge(ts, end)
    return hi[:-1], lo[1:]


def exclusive(spans: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[frozenset, int]:
    """Time covered by exactly each combination of the named interval sets (a sweep over
    their unions, as HTA's kernel-type overlap): frozenset of names -> ns."""
    names = list(spans)
    lo, hi, mask = combination_segments(spans)
    length = hi - lo
    out: dict[frozenset, int] = {}
    if not len(mask):
        return out
    running = np.sort(mask)  # its distinct sets (np.unique would import numpy.ma, which is slow)
    for m in running[np.r_[True, running[1:] != running[:-1]]].tolist():
        if m > 0:
            key = frozenset(n for bit, n in enumerate(names) if m & (1 << bit))
            out[key] = int(length[mask == m].sum())
    return out


def combination_segments(spans: dict[str, tuple[np.ndarray, np.ndarray]]
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sweep over the named sets' unions: consecutive segments [lo, hi) and the bit mask of the sets
    running in each (bit i: the i-th name; 0: none)."""
    points, delta = [], []
    for bit, name in enumerate(spans):
        lo, hi = merge(*spans[name])
        points += [lo, hi]
        delta += [np.full(len(lo), 1 << bit, np.int64), np.full(len(hi), -(1 << bit), np.int64)]
    if not points or not sum(len(p) for p in points):
        empty = np.empty(0, np.int64)
        return empty, empty, empty
    t, d = np.concatenate(points), np.concatenate(delta)
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    mask = np.cumsum(d)  # the set running after each point
    return t[:-1], t[1:], mask[:-1]


def covered_by_mask(seg_lo: np.ndarray, seg_hi: np.ndarray, mask: np.ndarray, lo: np.ndarray,
                    hi: np.ndarray, masks: int) -> np.ndarray:
    """Per window [lo, hi) (rows) and mask 0 .. ``masks`` - 1 (columns): the time in the window of the
    disjoint sorted segments of ``combination_segments`` carrying that mask (int64), not merged again."""
    out = np.zeros((len(lo), masks), np.int64)
    if not len(seg_lo) or not len(lo):
        return out
    length = seg_hi - seg_lo
    ends = []
    for x in (np.asarray(lo, np.int64), np.asarray(hi, np.int64)):
        k = np.searchsorted(seg_lo, x, side="right") - 1  # the segment starting last by x
        kk = np.maximum(k, 0)
        part = np.where(k >= 0, np.clip(x - seg_lo[kk], 0, length[kk]), 0)  # of it, below x
        ends.append((kk, k >= 0, part))
    for m in range(masks):
        mine = np.where(mask == m, length, 0)
        before = np.r_[0, np.cumsum(mine)]  # mask m's time in the segments before each
        upto = [np.where(has, before[kk] + np.where(mask[kk] == m, part, 0), 0)
                for kk, has, part in ends]
        out[:, m] = np.maximum(upto[1] - upto[0], 0)
    return out
