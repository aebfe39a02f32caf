"""What ``efficiency`` and ``report``'s efficiency section cost beyond their tables: nothing made that is
thrown away, and the figures unchanged (checked on the shared traces)."""

from __future__ import annotations

import numpy as np
from conftest import shared_trace

import traceaug
from traceaug.rewrite import efficiency as rewriter

QWEN = "kineto/h100_qwen05b_inference.json.gz"


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            _same(a[k], b[k])
        else:
            np.testing.assert_equal(a[k], b[k])


def test_tables_without_out_make_no_lane_events() -> None:
    """No OUT: the summary alone, equal to the rewriter's; no lane or counter events are made (they were,
    then dropped: 10 % of the command's work on the A100 trace)."""
    with traceaug.load(shared_trace(QWEN), kind="efficiency_tables") as trace:
        summary, events = rewriter.TABLES.compute(trace, {})
        full, made = rewriter.REWRITER.compute(trace, {})
    assert events == [] and len(made) > 1000
    _same(summary, full)
