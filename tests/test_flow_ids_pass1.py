"""Pass 1 gathers every flow id of a file, so rewriters pick new ones without a second scan:
the ids Perfetto reads (an event's ``id`` / ``bind_id``) and those of the header, which the
older scan of the file counted too (so the ids chosen stay the same)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pytest
from conftest import shared_trace

from traceaug.read import normalize
from traceaug.rewrite import events as ev


def test_plan_holds_the_ids_of_events_and_header(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "a", "cat": "c", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "bind_id": 9},
        {"ph": "s", "id": "0x1f", "name": "f", "cat": "c", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "f", "id": 4, "bp": "e", "name": "f", "cat": "c", "pid": 1, "tid": 1, "ts": 6},
        {"ph": "i", "name": "m", "cat": "c", "pid": 1, "tid": 1, "ts": 2, "args": {"id": 12}},
        {"ph": "s", "id": "not hex", "name": "g", "cat": "c", "pid": 1, "tid": 1, "ts": 3},
        {"ph": "s", "id": -3, "name": "g", "cat": "c", "pid": 1, "tid": 1, "ts": 3},
    ]
    path = tmp_path / "ids.json.gz"
    path.write_bytes(gzip.compress(orjson.dumps(
        {"deviceProperties": [{"id": 7, "name": "gpu"}], "traceEvents": events})))
    for kind in ("sync", "gpu", "full"):
        plan = normalize.plan(path, kind=kind, workers=0)
        assert plan.flow_ids.tolist() == [4, 7, 9, 31]  # an arg named id is no flow id
    assert ev.used_flow_ids(path).tolist() == [4, 7, 9, 12, 31]  # the scan takes any "id"


@pytest.mark.parametrize("name", ["a100_event_sync.json.gz", "a100_rank0_of16_6streams.json.gz"])
def test_plan_ids_match_the_file_scan_on_real_traces(name: str) -> None:
    path = shared_trace(f"kineto/{name}")
    plan = normalize.plan(path, kind="sync")
    scanned = ev.used_flow_ids(path)
    assert len(scanned) > 0 and np.array_equal(plan.flow_ids, scanned)
