"""``analysis.percentiles`` equals numpy's default (linear) ``np.percentile`` to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from traceaug.analysis.percentiles import percentiles


@pytest.mark.parametrize("seed", range(4))
def test_percentiles_equal_numpys_to_the_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in range(1, 60):
        for values in (rng.integers(0, 10 ** int(rng.integers(1, 15)), n),  # ns latencies
                       rng.random(n) * 10.0 ** int(rng.integers(-3, 12)), rng.integers(-5, 5, n)):
            qs = [50, 90, 99, *(rng.random(3) * 100).tolist(), 0, 100]
            assert percentiles(values, qs) == np.percentile(values, qs).tolist()


def test_percentiles_of_a_known_sample() -> None:
    assert percentiles(np.array([40, 10, 30, 20]), [0, 50, 90, 100]) == [10.0, 25.0, 37.0, 40.0]
    assert percentiles(np.array([7]), [50, 99]) == [7.0, 7.0]
