"""``traceaug critical-path`` output opened in the Perfetto UI it serves (v52), in headless Chromium.

What: write OUT for HTA's golden input (the simple_add trace), serve IN and OUT with
``traceaug open``, and check in the UI itself that the
arrows are flows of the UI's engine bound to the same slices traceaug's engine binds them
to, and that the "Critical path" lane, one track in a process of its own, holds the path's
segments, pinned once (one row, on screen) with its process expanded as the UI opens. Why:
the arrows and the lane are only useful if the UI users open draws them, where they look.
"""

from __future__ import annotations

from pathlib import Path

import perfetto_ui
from conftest import run_cli, shared_trace

import traceaug
from traceaug.rewrite import critical_path as rewrite

perfetto_ui.require(__file__)

# Every flow as the (thread, start, name) of the slices it joins.
FLOWS_SQL = """
SELECT t1.tid AS out_tid, a.ts - (SELECT MIN(ts) FROM slice) AS out_ts, a.name AS out_name,
       t2.tid AS in_tid, b.ts - (SELECT MIN(ts) FROM slice) AS in_ts, b.name AS in_name
FROM flow f
JOIN slice a ON a.id = f.slice_out JOIN thread_track k1 ON a.track_id = k1.id
JOIN thread t1 ON k1.utid = t1.utid
JOIN slice b ON b.id = f.slice_in JOIN thread_track k2 ON b.track_id = k2.id
JOIN thread t2 ON k2.utid = t2.utid
"""
LANE_SQL = f"""
SELECT p.pid AS pid, COUNT(s.id) AS n, SUM(s.dur) AS dur, MAX(s.depth) AS depth
FROM slice s JOIN process_track k ON s.track_id = k.id JOIN process p USING (upid)
WHERE p.name = '{rewrite.LANE_NAME}' AND s.dur > 0 GROUP BY p.upid ORDER BY p.pid
"""


def _added(after: list[tuple], before: list[tuple]) -> list[tuple]:
    """The flows of OUT that IN does not have (a multiset difference). Kineto's own flows
    bind differently in the two engines where the UI drops or folds their slices (cuda_sync
    events partly overlapping a copy, tid -1), so each engine is compared with itself."""
    out = list(after)
    for f in before:
        if f in out:
            out.remove(f)
    return sorted(out)


def _ui_flows(browser, path: Path) -> tuple[list[tuple], list[tuple], dict, dict]:
    """Flows, lane rows, what the UI shows of the lane (its track nodes, its process's nodes,
    the pinned tracks and those on screen) and flow errors of ``path`` in the UI."""
    with perfetto_ui.TraceServer(path) as server, perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        assert not ui.errors(), f"the UI showed an error on {path.name}: {ui.errors()}"
        assert state["ready"], f"the UI did not load {path.name}: {state}"
        ui.wait_idle()
        errors = {r["name"]: r["value"] for r in ui.query(
            "SELECT name, value FROM stats WHERE name GLOB 'flow*' AND value > 0")}
        tracks = ui.tracks()
        shown = {"lane": [t for t in tracks if t["name"] == rewrite.LANE_NAME],
                 "process": [t for t in tracks if t["name"].startswith(rewrite.LANE_NAME + " ")],
                 "pinned": ui.pinned(), "on_screen": ui.pinned_on_screen()}
        return _rows(ui.query(FLOWS_SQL)), _rows(ui.query(LANE_SQL)), shown, errors


def _rows(rows) -> list[tuple]:
    return sorted(tuple(int(v) if isinstance(v, float) and v.is_integer() else v for v in r.values())
                  for r in rows)


def test_arrows_and_lane_in_the_ui(browser, tmp_path: Path) -> None:
    src = shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")
    out = tmp_path / "simple_add.critical_path.json.gz"
    result = run_cli("critical-path", str(src), str(out))
    assert result.returncode == 0, result.stderr
    with traceaug.load(out, full=True, progress=False) as t:
        want_flows = _rows(t.query(FLOWS_SQL).to_dict("records"))
        want_lane = _rows(t.query(LANE_SQL).to_dict("records"))
    with traceaug.load(src, full=True, progress=False) as t:
        want_arrows = _added(want_flows, _rows(t.query(FLOWS_SQL).to_dict("records")))
    assert want_arrows and want_lane

    # Every rewriter moves the events the UI would drop (rewrite.visible), so the UI shows some
    # of the input's own flows on OUT that it drops on IN: the baseline is a rewriter's output
    # with the same moves and no flow added (counters), not IN itself.
    base = tmp_path / "simple_add.moved.json.gz"
    assert run_cli("counters", str(src), str(base), "--series", "queue").returncode == 0
    before, _, _, errors_before = _ui_flows(browser, base)
    after, lane, shown, errors_after = _ui_flows(browser, out)
    # The arrows: flows of the UI's engine, bound to the same slices as in traceaug's engine,
    # and no flow error more than the input has.
    assert _added(after, before) == want_arrows
    assert errors_after == errors_before
    # The lane: one track in the track list, with the path's segments, no slice nested.
    assert lane == want_lane and len(lane) == 1 and lane[0][3] == 0
    assert [(t["name"], t["registered"]) for t in shown["lane"]] == [(rewrite.LANE_NAME, True)]
    # As the UI opens: the lane pinned once (one row) and on screen, its process expanded.
    assert shown["pinned"] == [rewrite.LANE_NAME] == shown["on_screen"], shown
    assert [(t["name"], t["expanded"]) for t in shown["process"]] == [
        (f"{rewrite.LANE_NAME} {lane[0][0]}", True)], shown
