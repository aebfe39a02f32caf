"""``traceaug counters``' memory tracks (issue 35 item 7) in the Perfetto UI (v52), in headless Chromium: each
device's ``Memory allocated`` / ``Memory reserved`` track is in the UI's track list under its name, drawn,
with every value traceaug wrote (the UI's own engine reads them) and nothing the input had dropped."""

from __future__ import annotations

from pathlib import Path

import perfetto_ui
from conftest import run_cli, shared_trace
from rawjson import load_raw

from traceaug.rewrite.counters import MEMORY

perfetto_ui.require(__file__)

COUNTERS_SQL = """
SELECT t.name AS name, COUNT(*) AS n, MAX(c.value) AS peak
FROM counter c JOIN counter_track t ON c.track_id = t.id
WHERE t.name GLOB 'Memory *' GROUP BY t.name ORDER BY t.name
"""


def test_memory_tracks_in_the_ui(browser, tmp_path: Path) -> None:
    src = shared_trace("kineto/h100_bert_small_inference.json.gz")
    out = tmp_path / "bert.memory.json.gz"
    done = run_cli("counters", str(src), str(out), "--series", "memory")
    assert done.returncode == 0, done.stderr
    events = [e for e in load_raw(src)["traceEvents"] if e.get("name") == "[memory]"]
    want = {}
    for device in ("cpu", "cuda:0"):
        mine = [e["args"] for e in events if (e["args"]["Device Id"] < 0) == (device == "cpu")]
        stamps = len({e["ts"] for e in events if (e["args"]["Device Id"] < 0) == (device == "cpu")})
        for key, arg in (("allocated", "Total Allocated"), ("reserved", "Total Reserved")):
            want[f"{MEMORY} {key} {device}"] = (stamps, max(a[arg] for a in mine))
    with perfetto_ui.TraceServer(out) as server, perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        assert not ui.errors() and state["ready"], (ui.errors(), state)
        ui.wait_idle()
        rows = {r["name"]: (int(r["n"]), int(r["peak"])) for r in ui.query(COUNTERS_SQL)}
        names = {t["name"]: t["registered"] for t in ui.tracks()}
        dropped = ui.query("SELECT SUM(value) AS n FROM stats WHERE name = "
                           "'slice_drop_overlapping_complete_event'")
    assert rows == want
    assert all(names.get(name) for name in want), sorted(n for n in names if "emory" in n)
    assert not dropped[0]["n"]
