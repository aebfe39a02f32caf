"""``traceaug efficiency`` OUT in the Perfetto UI it serves (v52), in headless Chromium.

What: OUT of the H100 bert trace opened with ``traceaug open``; in the UI's own engine the efficiency lane
(``Efficiency stream N`` threads) holds one slice per modelled op instance with its figures in args, the
``Achieved TFLOP/s`` and ``Achieved TB/s`` counter tracks are listed by name, every complete event of the
file is a slice (nothing dropped) and ``stats`` has no error or data-loss entry. Why: the lane and tracks
only help where users look at them, in the UI as it reads the file.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import perfetto_ui
from conftest import run_cli, shared_trace

import traceaug

perfetto_ui.require(__file__)

LOSS_SQL = ("SELECT name, SUM(value) AS value FROM stats WHERE value > 0 "
            "AND severity IN ('error', 'data_loss') GROUP BY name")
LANE_SQL = ("SELECT t.name AS thread, COUNT(*) AS n, SUM(EXTRACT_ARG(s.arg_set_id, 'args.flops')) AS flops "
            "FROM slice s JOIN thread_track k ON s.track_id = k.id JOIN thread t USING (utid) "
            "WHERE s.category = 'efficiency' GROUP BY t.name ORDER BY t.name")


def test_lane_and_counters_in_the_ui(browser, tmp_path: Path) -> None:
    src = shared_trace("kineto/h100_bert_small_inference.json.gz")
    out = tmp_path / "bert.efficiency.json.gz"
    result = run_cli("efficiency", str(src), str(out))
    assert result.returncode == 0, result.stderr
    groups = traceaug.efficiency(src, progress=False).groups
    modelled = groups[groups["flops"].notna()]
    want_n = int(modelled["count"].sum())
    want_flops = float((modelled["flops"] * modelled["count"]).sum())
    events = orjson.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    complete = sum(1 for e in events if e.get("ph") == "X")
    with perfetto_ui.TraceServer(out) as server, perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        assert state["ready"] and not ui.errors(), (state, ui.errors())
        ui.wait_idle()
        lane = ui.query(LANE_SQL)
        assert [r["thread"] for r in lane] == ["Efficiency stream 7"]
        assert sum(r["n"] for r in lane) == want_n and sum(r["flops"] for r in lane) == want_flops
        (slices,) = ui.query("SELECT COUNT(*) AS n FROM slice WHERE dur >= 0")
        assert slices["n"] >= complete  # every complete event of the file is a slice
        names = {t["name"] for t in ui.tracks()}
        for track in ("Achieved TFLOP/s", "Achieved TB/s"):
            assert any(n.startswith(track) for n in names), sorted(names)
        assert any(n.startswith("Efficiency stream 7") for n in names), sorted(names)
        assert ui.query(LOSS_SQL) == []
