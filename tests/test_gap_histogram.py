"""``gaps``'s histogram: log-spaced bins, checked against the gaps computed from the raw JSON.
On the A100 6-stream trace, 20 equal-width bins put nearly all of its 7,739 gaps in the first."""

from __future__ import annotations

import json

import numpy as np
from analyses_raw import raw, stream_gaps
from click.testing import CliRunner
from conftest import shared_trace

from traceaug.cli import main


def test_gap_histogram_bins_are_log_spaced_over_the_raw_gaps() -> None:
    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    gaps_us = np.array([g for lst in stream_gaps(raw(path)["ops"]).values() for g in lst]) / 1e3
    r = CliRunner().invoke(main, ["gaps", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    [key] = [k for k in json.loads(r.stdout) if k.startswith("gap histogram")]
    hist = json.loads(r.stdout)[key]
    lo = np.array([b["lo_us"] for b in hist])
    hi = np.array([b["hi_us"] for b in hist])
    count = np.array([b["count"] for b in hist])
    assert len(hist) == 20 and count.sum() == len(gaps_us) == 7739
    assert lo[0] == gaps_us.min() and hi[-1] == gaps_us.max()
    ratio = hi / lo
    assert np.allclose(ratio, ratio[0]) and ratio[0] > 1.5  # equal ratios: log-spaced
    want = [int(((gaps_us >= a) & ((gaps_us < b) | (i == 19 and gaps_us == b))).sum())
            for i, (a, b) in enumerate(zip(lo, hi))]
    assert count.tolist() == want
    assert count.max() < len(gaps_us) / 2  # no bin holds nearly everything
