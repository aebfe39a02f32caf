"""``traceaug critical-path JOB OUT --job`` opened in the real Perfetto UI (headless Chromium):
the "rank N Critical path" lanes hold the path's segments and every arrow (the path's, across
ranks too) is a flow of the UI's engine bound to the slices traceaug's engine binds it to,
with no data-loss or flow error beyond the input's. Why: the path across ranks is only
useful if the UI draws it."""

from __future__ import annotations

from pathlib import Path

import jobgen
import perfetto_ui
import pytest
from conftest import run_cli, shared_trace

import traceaug

perfetto_ui.require(__file__)

FLOWS_SQL = """
WITH sp AS (SELECT s.id, s.name, p.name AS process FROM slice s
            JOIN thread_track k ON s.track_id = k.id JOIN thread t USING (utid)
            JOIN process p USING (upid))
SELECT a.process AS out_process, a.name AS out_name, b.process AS in_process, b.name AS in_name
FROM flow f JOIN sp a ON a.id = f.slice_out JOIN sp b ON b.id = f.slice_in
ORDER BY 1, 2, 3, 4
"""
LANE_SQL = """
SELECT p.name AS process, COUNT(s.id) AS n, SUM(s.dur) AS dur, MAX(s.depth) AS depth
FROM slice s JOIN process_track k ON s.track_id = k.id JOIN process p USING (upid)
WHERE p.name GLOB 'rank * Critical path' AND s.dur > 0 GROUP BY p.upid ORDER BY p.name
"""
ERRORS_SQL = """
SELECT name, SUM(value) AS value FROM stats
WHERE value > 0 AND (severity IN ('error', 'data_loss') OR name GLOB 'flow*') GROUP BY name
"""


def _rank(process: str) -> int:
    """The rank of a merged trace's process (``rank 3 CPU``, ``rank 3: Spans``)."""
    return int(process.split()[1].rstrip(":"))


@pytest.mark.parametrize("which", ["generated", "dlrm"])
def test_job_path_in_the_ui(browser, tmp_path: Path, which: str) -> None:
    if which == "generated":
        job = jobgen.write(tmp_path / "job", jobgen.job(4, 2, 500))
    else:
        job = shared_trace("kineto/jobs/dlrm_v100_8ranks")
    out = tmp_path / "job.path.json.gz"
    result = run_cli("critical-path", str(job), str(out), "--job", "--summary-only")
    assert result.returncode == 0, result.stderr
    assert not out.exists()
    result = run_cli("critical-path", str(job), str(out), "--job")
    assert result.returncode == 0, result.stderr
    with traceaug.load(out, kind="full", progress=False) as t:
        want_flows = t.query(FLOWS_SQL).to_dict("records")
        want_lane = t.query(LANE_SQL).to_dict("records")
        want_errors = t.query(ERRORS_SQL).to_dict("records")
    assert want_lane
    # Kineto's own flows whose start the profiler dropped (2165 on the DLRM job, as merge
    # writes it); the path's arrows add none
    assert [e["name"] for e in want_errors] in ([], ["flow_end_without_start"])
    if which == "generated":  # merge's 3 arrows to the straggler's all_reduce, and the path's
        # from it to the rank the path ends on (the UI points a flow from the slice starting
        # first: that rank's all_reduce)
        crossing = [f for f in want_flows if _rank(f["out_process"]) != _rank(f["in_process"])]
        assert len(crossing) == 4
        assert all(_rank(f["in_process"]) == 2 for f in crossing)
    with perfetto_ui.TraceServer(out) as server, perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        assert state["ready"] and not ui.errors(), (state, ui.errors())
        flows, lane, errors = (ui.query(sql) for sql in (FLOWS_SQL, LANE_SQL, ERRORS_SQL))
    assert [{k: int(v) if isinstance(v, float) else v for k, v in r.items()} for r in errors] \
        == want_errors
    # the lanes: their slices, each within a ns of traceaug's (the UI reads the merged
    # trace's epoch µs as doubles: their last ns is rounded)
    assert [(r["process"], int(r["n"]), int(r["depth"])) for r in lane] \
        == [(r["process"], int(r["n"]), int(r["depth"])) for r in want_lane]
    for got, want in zip(lane, want_lane):
        assert abs(int(got["dur"]) - int(want["dur"])) <= int(want["n"])
    assert flows == want_flows  # (by name: the UI rounds the epoch µs' last ns)
