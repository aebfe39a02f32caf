"""``traceaug merge JOB OUT`` opened in the real Perfetto UI (headless Chromium): every rank's
kernels present under its ``rank N GPU d`` process, no data-loss stat, the cross-rank
arrows bound kernel to kernel as in traceaug's own engine, the ranks in rank order (the UI's own order
is by slice count), no unnamed track, and the view on the last step every rank has."""

from __future__ import annotations

from pathlib import Path

import perfetto_ui
import pytest
from conftest import run_cli, shared_trace

import traceaug

perfetto_ui.require(__file__)

KERNELS_SQL = """
SELECT p.name AS process, COUNT(*) AS n FROM slice s
JOIN thread_track k ON s.track_id = k.id JOIN thread t USING (utid) JOIN process p USING (upid)
WHERE s.category = 'kernel' GROUP BY p.name ORDER BY p.name
"""
ARROWS_SQL = """
SELECT pa.name AS out_process, a.name AS out_name, pb.name AS in_process, b.name AS in_name
FROM flow f
JOIN slice a ON a.id = f.slice_out JOIN thread_track ka ON a.track_id = ka.id
JOIN thread ta ON ka.utid = ta.utid JOIN process pa ON ta.upid = pa.upid
JOIN slice b ON b.id = f.slice_in JOIN thread_track kb ON b.track_id = kb.id
JOIN thread tb ON kb.utid = tb.utid JOIN process pb ON tb.upid = pb.upid
WHERE a.name GLOB 'nccl*' AND b.name GLOB 'nccl*'
ORDER BY 1, 2, 3, 4
"""
STEP_SQL = "SELECT MIN(ts) AS start, MAX(ts + dur) AS end FROM slice WHERE name = 'ProfilerStep#10'"
VIEW_JS = """() => { const w = window.app.trace.timeline.visibleWindow.toTimeSpan();
  return {current: window.app.trace.workspace.title,
          groups: window.app.trace.workspace.children.map(n => n.name),
          all: window.app.trace.workspaces.all.map(w => w.children.map(n => n.name)).flat()
               .concat(window.app.trace.workspace.flatTracks.map(t => t.name)),
          window: [Number(w.start), Number(w.end)]}; }"""
LOSS_SQL = """
SELECT name, SUM(value) AS value FROM stats
WHERE value > 0 AND severity IN ('error', 'data_loss') GROUP BY name
"""


@pytest.mark.parametrize("how", ["merge", "open"])
def test_merged_job_in_the_ui(browser, tmp_path: Path, how: str) -> None:
    """``merge JOB OUT`` then ``open OUT``, or ``open JOB`` (which merges it)."""
    job = shared_trace("kineto/jobs/dlrm_v100_8ranks")
    out = tmp_path / "job.merged.json.gz"
    result = run_cli("merge", str(job), str(out))
    assert result.returncode == 0, result.stderr
    with traceaug.load(out, kind="full", progress=False) as t:
        want_kernels = t.query(KERNELS_SQL).to_dict("records")
        want_arrows = t.query(ARROWS_SQL).to_dict("records")
    assert len(want_arrows) == 8 * 7  # 8 collectives, 7 ranks waiting at each
    served = perfetto_ui.TraceServer(out) if how == "merge" else perfetto_ui.TraceServer(
        job, announced=f"{job.name}.merged.json.gz")
    with served as server, perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        assert not ui.errors(), ui.errors()
        assert state["ready"], state
        kernels = ui.query(KERNELS_SQL)
        arrows = ui.query(ARROWS_SQL)
        loss = ui.query(LOSS_SQL)
        ui.wait_idle()
        view = ui.page.evaluate(VIEW_JS)
        step = ui.query(STEP_SQL)[0]
    assert loss == []
    assert [r["process"] for r in kernels] == [f"rank {r} GPU {r}" for r in range(8)]
    assert [int(r["n"]) for r in kernels] == [int(r["n"]) for r in want_kernels]
    assert arrows == want_arrows
    # the ranks in rank order (CPU, then GPU), named by role; no unnamed track; on step 10
    assert view["current"] == "traceaug job: ranks in order"
    words = [n.split() for n in view["groups"]]  # "rank 3 CPU 12642726", "rank 3: Spans 40943"
    ranked = [(int(w[1].rstrip(":")), "~" if w[1].endswith(":") else w[2]) for w in words]
    assert ranked == sorted(ranked) and [r for r, role in ranked if role == "CPU"] == list(range(8))
    assert not any(n.startswith("Unnamed") or not n.strip() for n in view["all"])
    assert abs(view["window"][0] - step["start"]) <= 1000 and abs(view["window"][1] - step["end"]) <= 1000
