"""The Mann–Whitney U test (two-sided, exact for few samples, ties included) and Benjamini–Hochberg
q-values: is an op's per-step time different between two runs, or step-to-step noise?"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

EXACT_MAX = 60  # samples on both sides together: the exact null distribution up to this many


def min_p(n: int, m: int) -> float:
    """The smallest two-sided p-value ``n`` against ``m`` samples can give (every sample of one
    side above every one of the other): above the test's level, too few samples to tell."""
    return min(1.0, 2 / math.comb(n + m, n)) if n and m else 1.0


def _midranks2(values: np.ndarray) -> np.ndarray:
    """Twice each value's rank (1-based), tied values sharing their mean rank: integers."""
    order = np.argsort(values, kind="stable")
    sorted_v = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_v[1:] != sorted_v[:-1]])
    ends = np.r_[starts[1:], len(values)]
    out = np.empty(len(values), np.int64)
    out[order] = np.repeat(starts + ends + 1, ends - starts)  # 2 × (start + 1 + end) / 2
    return out


@lru_cache(maxsize=256)
def _null(scores: tuple[int, ...], k: int) -> np.ndarray:
    """How many ``k``-subsets of ``scores`` have each score sum (index: the sum)."""
    counts = np.zeros((k + 1, sum(sorted(scores)[-k:]) + 1 if k else 1))
    counts[0, 0] = 1
    for s in scores:
        counts[1:, s:] += counts[:-1, :-s or None].copy()
    return counts[k]


def mann_whitney_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value that ``x`` and ``y`` come from one distribution: exact up to ``EXACT_MAX``
    samples (midranks for ties), else the normal approximation with the tie correction. Swapping
    ``x`` and ``y`` gives the same p. NaN without samples on a side."""
    n, m = len(x), len(y)
    if not n or not m:
        return math.nan
    ranks = _midranks2(np.r_[np.asarray(x, np.float64), np.asarray(y, np.float64)])
    big = len(ranks)
    dev = abs(int(ranks[:n].sum()) - n * (big + 1))  # doubled rank sum of x from its mean
    if big <= EXACT_MAX:
        dist = _null(tuple(sorted(ranks.tolist())), n)
        sums = np.arange(len(dist))
        return float(dist[np.abs(sums - n * (big + 1)) >= dev].sum() / dist.sum())
    _, tied = np.unique(ranks, return_counts=True)
    var = n * m / 12 * ((big + 1) - float((tied**3 - tied).sum()) / (big * (big - 1)))
    if var <= 0:
        return 1.0
    z = max(dev / 2 - 0.5, 0) / math.sqrt(var)  # rank sum units, continuity corrected
    return math.erfc(z / math.sqrt(2))


def bh_q(p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg q-values of a family of p-values: reject those with q <= the level to keep
    the expected share of false changes among those named at that level."""
    k = len(p)
    if not k:
        return np.asarray(p, np.float64)
    order = np.argsort(p, kind="stable")
    scaled = np.asarray(p, np.float64)[order] * k / np.arange(1, k + 1)
    q = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(k)
    out[order] = np.minimum(q, 1.0)
    return out
