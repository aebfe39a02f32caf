"""Interval arithmetic against brute force on integer grids (analysis/intervals.py)."""

from __future__ import annotations

import numpy as np

from traceaug.analysis.intervals import clip, covered_in, union_length


def _covered_by_grid(ts, end, lo, hi) -> list[int]:
    """Per window, how many integer points x in [lo, hi) some interval [ts, end) holds."""
    out = []
    for a, b in zip(lo.tolist(), hi.tolist()):
        xs = np.arange(a, b)
        hit = np.zeros(len(xs), bool)
        for s, e in zip(ts.tolist(), end.tolist()):
            hit |= (xs >= s) & (xs < e)
        out.append(int(hit.sum()))
    return out


def test_covered_in_equals_a_point_count_per_window() -> None:
    """Overlapping, nested, touching and empty intervals; windows overlapping each other,
    outside every interval, empty and reversed (length 0)."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(0, 12))
        ts = rng.integers(0, 100, n)
        end = ts + rng.integers(0, 30, n)
        lo = rng.integers(-10, 130, 8)
        hi = lo + rng.integers(-5, 60, 8)
        got = covered_in(ts, end, lo, hi).tolist()
        assert got == _covered_by_grid(ts, end, lo, hi)
        assert got == [union_length(*clip(ts, end, a, b)) if b > a else 0
                       for a, b in zip(lo.tolist(), hi.tolist())]


def test_covered_in_known_answer() -> None:
    ts, end = np.array([0, 5, 20]), np.array([10, 12, 30])  # union [0, 12) and [20, 30)
    lo, hi = np.array([0, 11, 12, 25, 40]), np.array([100, 21, 20, 26, 50])
    assert covered_in(ts, end, lo, hi).tolist() == [22, 2, 0, 1, 0]
