"""``traceaug patterns`` output in the Perfetto UI it serves (v52), in headless Chromium.

What: write the planted-patterns trace (testdata/patterns_planted.json) with its patterns
overlaid, open it with
``traceaug open``, type "Pattern P1" in the UI's omnibox and press Enter (the UI's own
search), then check that the search found every ``Pattern P1`` slice (a CPU and a GPU
slice per occurrence of P1) and only ``Pattern P1*`` slices, that the "Kernel-name
dictionary" and "Kernel patterns" threads are in the track list, that every occurrence's
flow joins its CPU and GPU slices in the UI's engine, and that the UI's importer
reports no error. (The A100 output is checked in traceaug's engine by test_patterns.py; this
file keeps to a small trace: the UI takes ~30 s on the 10 MB one here.) Skipped without
Chromium / playwright, as tests/test_browser.py is.
"""

from __future__ import annotations

import json
from pathlib import Path

import perfetto_ui
from conftest import TESTDATA, run_cli

perfetto_ui.require(__file__)

SEARCH_JS = """() => {
  const s = window.app.trace.search;
  const r = s.searchResults;
  return {text: s.searchText, busy: s.searchInProgress, total: r ? r.totalResults : -1,
          ids: r ? Array.from(r.eventIds) : [], sources: r ? r.sources : []};
}"""
UI_ERRORS_SQL = ("SELECT name, SUM(value) AS value FROM stats WHERE value > 0 "
                 "AND severity IN ('error', 'data_loss') GROUP BY name")


def test_search_finds_pattern_p1(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    src = TESTDATA / "patterns_planted.json"
    out = tmp_path / "planted.patterns.json.gz"
    result = run_cli("patterns", str(src), str(out), "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["patterns"]
    p1 = next(r for r in rows if r["pattern"] == "P1")
    assert p1["count"] == 5  # whole scope: "layer" ops launching a1 a2 a3 a4
    overlaid = sum(r["count"] for s in ("whole", "operator", "stream")
                   for r in [x for x in rows if x["scope"] == s][:5])

    with sync_playwright() as pw:
        browser = perfetto_ui.launch(pw)
        try:
            with perfetto_ui.TraceServer(out) as server, \
                    perfetto_ui.PerfettoPage(browser, server.url) as ui:
                state = ui.open()
                assert state["ready"] and not ui.errors(), (state, ui.errors())
                box = ui.page.locator(".pf-omnibox input")
                for attempt in range(3):  # a search typed while the UI still settles is now and then dropped
                    box.click()
                    box.fill("Pattern P1")
                    box.press("Enter")
                    try:
                        ui.page.wait_for_function(
                            "() => { const s = window.app.trace.search; "
                            "return s.searchText === 'Pattern P1' && !s.searchInProgress && s.hasResults; }",
                            timeout=30_000)
                        break
                    except Exception:
                        if attempt == 2:
                            raise
                found = ui.page.evaluate(SEARCH_JS)
                assert found["total"] > 0 and set(found["sources"]) == {"slice"}
                ids = ",".join(str(int(i)) for i in found["ids"])
                names = [r["name"] for r in ui.query(f"SELECT name FROM slice WHERE id IN ({ids})")]
                assert len(names) == found["total"]
                assert all(n.startswith("Pattern P1") for n in names), set(names)
                assert names.count("Pattern P1") == 2 * p1["count"]  # CPU + GPU slice each
                shown = ui.page.evaluate(
                    "() => document.querySelector('.pf-omnibox__stepthrough-current')?.innerText")
                assert shown.endswith(f" / {found['total']}"), shown  # the omnibox counter

                tracks = [t["name"] for t in ui.tracks()]
                assert any(t.startswith("Kernel-name dictionary") for t in tracks), tracks
                assert any(t.startswith("Kernel patterns stream 7") for t in tracks), tracks
                (dictionary,) = ui.query(
                    "SELECT COUNT(*) AS n FROM slice s JOIN thread_track tt ON s.track_id = tt.id "
                    "JOIN thread USING (utid) WHERE thread.name = 'Kernel-name dictionary'")
                assert dictionary["n"] == 2
                (flows,) = ui.query(
                    "SELECT COUNT(*) AS n FROM flow f JOIN slice a ON f.slice_out = a.id "
                    "JOIN slice b ON f.slice_in = b.id WHERE a.name = b.name "
                    "AND a.category = 'traceaug_patterns' AND b.category = 'traceaug_patterns'")
                assert flows["n"] == overlaid  # one arrow per occurrence, CPU slice -> GPU slice
                assert ui.query(UI_ERRORS_SQL) == []
        finally:
            browser.close()
