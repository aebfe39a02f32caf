"""Overlap lanes: the events pass 1 predicts Perfetto drops are exactly those its stack
rule drops, on random threads of nested, touching and partly overlapping events."""

from __future__ import annotations

import numpy as np
import pytest

from traceaug.read.lanes import _drops, assign_lanes


def perfetto_drops(key: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Perfetto's rule, one event at a time: per thread a stack of open ends; an event that
    starts inside the innermost open slice but ends after it is dropped (not pushed)."""
    out = np.zeros(len(ts), dtype=bool)
    stacks: dict = {}
    for i, (k, t, e) in enumerate(zip(key.tolist(), ts.tolist(), end.tolist())):
        stack = stacks.setdefault(k, [])
        while stack and stack[-1] <= t:
            stack.pop()
        if stack and e > stack[-1]:
            out[i] = True
        else:
            stack.append(e)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_drops_match_the_stack_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    total = 0
    for _ in range(200):
        n = int(rng.integers(2, 300))
        key = np.sort(rng.integers(0, 4, n))
        ts = rng.integers(0, 200, n)
        dur = rng.integers(0, 60, n)
        order = np.lexsort((-dur, ts, key))
        key, ts, end = key[order], ts[order], (ts + dur)[order]
        want = perfetto_drops(key, ts, end)
        assert (_drops(key, ts, end) == want).all()
        total += int(want.sum())
    assert total > 1000  # the random threads do overlap


def test_lanes_leave_nothing_to_drop() -> None:
    """Every dropped event goes to a lane where, with its lane mates, nothing is dropped."""
    rng = np.random.default_rng(7)
    n = 5000
    key = rng.integers(0, 3, n)
    ts = rng.integers(0, 20000, n)
    dur = rng.integers(1, 400, n)
    seq = np.arange(n)
    lanes = assign_lanes(key, ts, dur, seq)
    assert len(lanes) > 100
    lane = np.array([lanes.get(s, 0) for s in seq.tolist()])
    order = np.lexsort((seq, -dur, ts, lane, key))  # each (thread, lane) as its own thread
    k = (key * 100 + lane)[order]
    assert not perfetto_drops(k, ts[order], (ts + dur)[order]).any()
    base = np.lexsort((seq, -dur, ts, key))
    assert set(lanes) >= set(seq[base][perfetto_drops(key[base], ts[base], (ts + dur)[base])].tolist())
