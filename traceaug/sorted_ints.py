"""Sorted int64 arrays used as sets: what pass 1, the analyses and the rewriters share
(flow ids, sequence numbers, correlation ids). Numpy only: pass-1 workers import it."""

from __future__ import annotations

import numpy as np


def sorted_unique(values) -> np.ndarray:
    """Integers sorted, each once: ``np.unique`` by a sort and a compare, far faster than its hashing."""
    a = np.sort(np.asarray(values, dtype=np.int64))
    return a[np.r_[True, a[1:] != a[:-1]]] if len(a) else a


def among(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in ``sorted_keys`` (sorted integers), by one binary search."""
    if not len(sorted_keys):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return sorted_keys[at] == values
