"""A merged job as a person reads it in the real Perfetto UI (headless Chromium; issue 34 item 5):
``critical-path JOB OUT --job`` then ``open OUT`` shows the ranks in rank order, each process named by
rank and role, no unnamed track, each rank's lane titled with its rank, pinned and expanded, its
slices naming the events they stand for, the view on the analysed step and the last rank's late start
marked. Why: the UI orders
processes by slice count and named them all "rank N: python3" with shifted pids."""

from __future__ import annotations

import re
from pathlib import Path

import perfetto_ui
import pytest
from conftest import run_cli, shared_trace

perfetto_ui.require(__file__)

JOB = "kineto/jobs/dlrm_v100_8ranks"
STEP_SQL = "SELECT MIN(ts) AS start, MAX(ts + dur) AS end FROM slice WHERE name = 'ProfilerStep#10'"
LANE_EVENTS_SQL = """
SELECT COUNT(*) AS n, SUM(a.display_value IN (SELECT name FROM slice WHERE category IS NOT 'critical_path'))
  AS found
FROM slice s JOIN args a ON a.arg_set_id = s.arg_set_id AND a.key = 'args.event'
WHERE s.category = 'critical_path' AND s.dur > 0
"""
STARTS_SQL = """
SELECT s.ts, s.category, s.name, p.name AS process FROM slice s JOIN thread_track k ON s.track_id = k.id
JOIN thread t USING (utid) JOIN process p USING (upid)
WHERE s.name = 'ProfilerStep#10' OR s.category = 'straggler' ORDER BY s.ts
"""
WORKSPACE_JS = """() => ({current: window.app.trace.workspace.title,
  groups: window.app.trace.workspace.children.map(n => [n.name, !!n.expanded]),
  all: window.app.trace.workspaces.all.map(w => w.children.map(n => n.name)).flat()})"""
WINDOW_JS = """() => { const w = window.app.trace.timeline.visibleWindow.toTimeSpan();
  return [Number(w.start), Number(w.end)]; }"""
ROLE = re.compile(r"^rank (\d+) (Critical path|CPU|GPU (\d+)) \d+$")


@pytest.fixture(scope="module")
def browser():
    with perfetto_ui.chromium() as b:
        yield b


def test_job_path_view_reads_in_rank_order_on_the_step(browser, tmp_path: Path) -> None:
    out = tmp_path / "job.path.json.gz"
    result = run_cli("critical-path", str(shared_trace(JOB)), str(out), "--job")
    assert result.returncode == 0, result.stderr
    with perfetto_ui.TraceServer(out) as server, perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        assert state["ready"] and not ui.errors(), (state, ui.errors())
        ui.wait_idle()
        spaces = ui.page.evaluate(WORKSPACE_JS)
        pinned = ui.pinned()
        window = ui.page.evaluate(WINDOW_JS)
        step = ui.query(STEP_SQL)[0]
        lane_events = ui.query(LANE_EVENTS_SQL)[0]
        starts = ui.query(STARTS_SQL)
        names = [t["name"] for t in ui.tracks()]
    assert spaces["current"] == "traceaug job: ranks in order"
    groups = [name for name, _ in spaces["groups"]]
    # every process group of every rank, in rank order, each rank's lane, CPU, GPU first
    order = [(int(name.split()[1].rstrip(":")), _role(name)) for name in groups]
    assert order == sorted(order) and {r for r, _ in order} == set(range(8))
    assert [f"rank {r} GPU {r}" for r in range(8)] == [n.rsplit(" ", 1)[0] for n in groups
                                                      if " GPU " in n]
    assert sum(" CPU " in n for n in groups) == 8
    assert not any(n.startswith("Unnamed") or not n.strip() for n in spaces["all"] + names)
    # the lanes: titled with their rank, pinned once each, expanded
    lanes = [name for name, _ in spaces["groups"] if " Critical path " in name]
    assert lanes and all(expanded for name, expanded in spaces["groups"] if name in lanes)
    assert sorted(pinned) == sorted(name.rsplit(" ", 1)[0] for name in lanes)
    assert len(set(pinned)) == len(pinned)
    # each lane slice names an event of the trace
    assert lane_events["n"] > 0 and lane_events["found"] == lane_events["n"]
    # the view opens on step 10 (every rank's ProfilerStep#10), not on the whole trace
    assert abs(window[0] - step["start"]) <= 1000 and abs(window[1] - step["end"]) <= 1000
    # the rank starting step 10 last is marked where it starts, with how late (7,513.5 us after rank 1)
    marks = [r for r in starts if r["category"] == "straggler"]
    steps = [r for r in starts if r["category"] != "straggler"]
    assert len(steps) == 8 and len(marks) == 1
    first, last, mark = steps[0], steps[-1], marks[0]
    assert mark["process"] == last["process"] and abs(mark["ts"] - last["ts"]) <= 1000
    late = float(re.search(r"ProfilerStep#10 ([\d.]+) us after rank (\d+)", mark["name"])[1])
    assert abs(late - (last["ts"] - first["ts"]) / 1000) <= 1
    assert mark["name"].startswith(f"rank {last['process'].split()[1]} ")
    assert mark["name"].endswith(f"after rank {first['process'].split()[1]}")


def _role(name: str) -> int:
    """A process group's place within its rank: lane, CPU, GPUs, the rest."""
    m = ROLE.match(name)
    if m is None:
        return 1 << 20
    return {"Critical path": 0, "CPU": 1}.get(m[2], 2 + int(m[3] or 0))
