"""Sums of int64 ns that cannot wrap: every analysis adding times up adds through here, and a sum past int64
(292 years of ns: absurd values, each in range) is refused in one line."""

from __future__ import annotations

import numpy as np

from ..errors import SumTooLarge

# A wrapped int64 sum is off by a multiple of 2^64; the float sum beside it is off by far
# less than this, so a difference this large can only be a wrap.
_WRAPPED = 2.0**62


def group_sums(code: np.ndarray, values: np.ndarray, n: int, what: str = "durations") -> np.ndarray:
    """Exact int64 sums of ``values`` per group ``code`` (0 .. n-1); ``SumTooLarge`` when one
    would not fit in int64 (``what`` names the values in the message)."""
    v = np.asarray(values, np.int64)
    exact = np.zeros(n, np.int64)
    np.add.at(exact, code, v)
    approx = np.bincount(code, v.astype(np.float64), n) if len(v) else np.zeros(n)
    if (np.abs(exact.astype(np.float64) - approx) > _WRAPPED).any():
        raise SumTooLarge(f"{what} add up past 2^63 (int64; in ns 292 years): no real trace does")
    return exact


def total(values: np.ndarray, what: str = "durations") -> int:
    """The exact sum of int64 ``values``, refused (``SumTooLarge``) past int64."""
    v = np.asarray(values, np.int64).reshape(-1)
    return int(group_sums(np.zeros(len(v), np.int64), v, 1, what)[0])
