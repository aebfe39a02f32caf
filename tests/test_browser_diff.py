"""``traceaug diff`` outputs in the real Perfetto UI (v52) and in Chromium (tests/perfetto_ui.py).

``--trace``: h100_runs (one script run twice) once opened with a red data-loss flag (18 partly
overlapping complete events dropped per side, 36 in all) and A's and B's processes interleaved
(the UI orders processes by slice count). Now the UI keeps every slice of both raw files, has
no data-loss stat, and ``traceaug open`` shows a workspace with every A group above every B group
and no group left out.

``--html``: the A100-vs-V100 page once was 19,780 px tall (every op in one table). Now it is one
screen until the all-ops table is opened, the verdict and the top changes are on that screen,
and the table filters, sorts and pages (checked against ``--format csv``'s rows).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import perfetto_ui
import pytest
from click.testing import CliRunner
from conftest import shared_trace

from traceaug.cli import main

perfetto_ui.require(__file__)

LOSS_SQL = """
SELECT name, SUM(value) AS value FROM stats
WHERE value > 0 AND severity IN ('error', 'data_loss') GROUP BY name
"""
SLICES_SQL = """
SELECT COUNT(*) AS n FROM slice s
LEFT JOIN process_track k ON k.id = s.track_id LEFT JOIN process p USING (upid)
WHERE p.name IS NULL OR p.name NOT GLOB '?: Critical path'
"""  # but the critical-path lanes the view adds (tests/test_browser_diff_view.py)
WORKSPACES_JS = """() => ({current: window.app.trace.workspace.title,
  all: window.app.trace.workspaces.all.map(w => [w.title, w.children.map(n => n.name)])})"""


def raw_slices(path: Path) -> int:
    """Complete and instant events of a raw trace: each is one slice in Perfetto."""
    with gzip.open(path) as f:
        return sum(1 for e in json.load(f)["traceEvents"] if e.get("ph") in ("X", "i", "I"))


@pytest.fixture(scope="module")
def browser():
    with perfetto_ui.chromium() as b:
        yield b


def test_merged_trace_loses_nothing_and_shows_a_above_b(browser, tmp_path: Path) -> None:
    folder = shared_trace("kineto/diff/h100_runs")
    a, b = folder / "a" / "trace.json.gz", folder / "b" / "trace.json.gz"
    merged = tmp_path / "merged.json"
    r = CliRunner().invoke(main, ["diff", str(a), str(b), "--trace", str(merged)])
    assert r.exit_code == 0, r.output
    with perfetto_ui.TraceServer(merged) as server, perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        assert state["ready"] and not ui.errors(), ui.errors()
        ui.wait_idle()
        assert ui.query(LOSS_SQL) == []
        assert ui.query(SLICES_SQL)[0]["n"] == raw_slices(a) + raw_slices(b)
        spaces = ui.page.evaluate(WORKSPACES_JS)
    groups = dict(spaces["all"])
    assert spaces["current"] == "traceaug diff: A above B"
    shown = groups["traceaug diff: A above B"]
    is_b = [name.startswith("B: ") for name in shown]
    assert is_b == sorted(is_b) and 0 < sum(is_b) < len(is_b)  # every A group, then every B group
    assert sorted(shown) == sorted(groups["Default Workspace"])  # none left out, none twice


FILTER_JS = """(q) => { const input = document.querySelector('section.ops input');
  input.value = q; input.dispatchEvent(new Event('input'));
  return {rows: document.querySelectorAll('table.ops tbody tr').length,
          info: document.querySelector('section.ops .info').textContent}; }"""
FIRST_JS = """(c) => Array.from(document.querySelectorAll('table.ops tbody tr')).map(r =>
  r.cells[c].textContent)"""


def test_diff_html_page_one_screen_first(browser, tmp_path: Path) -> None:
    folder = shared_trace("kineto/diff/a100_vs_v100")
    page_file = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["diff", str(folder / "control"), str(folder / "test"),
                                  "--html", str(page_file), "--format", "csv"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    page = browser.new_page(viewport=perfetto_ui.VIEWPORT)
    blocked, errors = [], []
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://")
               else (blocked.append(route.request.url), route.abort()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(page_file.as_uri())
        page.wait_for_selector("body[data-ready='1']")
        height = page.evaluate("document.documentElement.scrollHeight")
        assert height < 2 * perfetto_ui.VIEWPORT["height"], height  # was 19,780 px
        for selector in (".verdict", "text=Top regressions (per step)"):
            box = page.locator(selector).first.bounding_box()
            assert box is not None and box["y"] < perfetto_ui.VIEWPORT["height"], selector
        page.click("section.ops summary")
        state = page.evaluate(FILTER_JS, "")
        assert state == {"rows": 50, "info": f"{len(rows)} of {len(rows)} ops, page 1 of 8"}
        want = [x for x in rows if "memcpy" in f"{x['device']} {x['key']} {x['status']}".lower()]
        state = page.evaluate(FILTER_JS, "Memcpy")
        assert state["rows"] == len(want) > 0
        page.evaluate(FILTER_JS, "")
        page.click("table.ops th:nth-child(8)")  # Δ (µs): largest first
        deltas = [float(x["delta_ns"]) / 1e3 for x in rows]
        assert float(page.evaluate(FIRST_JS, 7)[0]) == pytest.approx(max(deltas), abs=1e-3)
        page.click("table.ops th:nth-child(8)")
        assert float(page.evaluate(FIRST_JS, 7)[0]) == pytest.approx(min(deltas), abs=1e-3)
        page.click("section.ops .next")
        assert page.inner_text("section.ops .info").endswith("page 2 of 8")
    finally:
        page.close()
    assert blocked == [] and errors == []
