"""``traceaug report --html`` opened from disk in headless Chromium with every request other
than the page itself blocked: every chart renders (plotly draws its SVG), the page fetches
nothing, and the file stays under 5 MB. On the 2-rank directory (a pie per rank, min–max bars
across ranks) and the A100 6-stream trace. The first screen (1366 × 800) holds the verdict
and three findings, above every chart; µs axes read as µs; tables start collapsed, sort by
a click on a header, and keep the page within the window's width when opened. A screenshot
of the first screen is written beside the page (look at it)."""

from __future__ import annotations

import json

import perfetto_ui
import pytest
from click.testing import CliRunner
from conftest import shared_trace

from traceaug.cli import main

perfetto_ui.require(__file__)

LIMIT = 5_000_000
COUNT_JS = """() => Array.from(document.querySelectorAll('div.chart')).map(d => ({
  name: d.dataset.chart,
  svg: d.querySelectorAll('svg.main-svg').length,
  marks: d.querySelectorAll('g.trace, g.slice, path.point').length,
  title: (d.querySelector('.gtitle') || {}).textContent || ''}))"""


CASES = {"two_ranks": ("kineto/multi_rank_sampled", 2),
         "a100": ("kineto/a100_rank0_of16_6streams.json.gz", 1)}
VIEWPORT = {"width": 1366, "height": 800}
LAYOUT_JS = """() => {
  const box = e => e.getBoundingClientRect();
  const charts = Array.from(document.querySelectorAll('div.chart'));
  return {
    overview: box(document.querySelector('#overview')).bottom,
    verdict: document.querySelector('#overview .verdict').textContent,
    findings: document.querySelectorAll('#overview .findings li').length,
    first_chart: box(charts[0]).top,
    us_ticks: charts.flatMap(d => ['x', 'y'].filter(a =>
        ((d.querySelector('text.' + a + 'title') || {}).textContent || '') === 'µs')
      .flatMap(a => Array.from(d.querySelectorAll('g.' + a + 'tick text')).map(t => t.textContent))),
    closed: Array.from(document.querySelectorAll('details')).map(d => !d.open),
  };
}"""
OPEN_ALL_JS = """() => { document.querySelectorAll('details').forEach(d => d.open = true);
  return [document.documentElement.scrollWidth, window.innerWidth]; }"""
COLUMN_JS = """([table, col]) => Array.from(
  document.querySelectorAll('table.sortable')[table].tBodies[0].rows)
  .map(r => parseFloat(r.cells[col].textContent.replace(/,/g, '')))"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict:
    """Each case's report written by the CLI, then opened in one headless Chromium."""
    from playwright.sync_api import sync_playwright

    out = {}
    for key, (rel, ranks) in CASES.items():
        page_file = tmp_path_factory.mktemp(key) / "report.html"
        result = CliRunner().invoke(main, ["report", str(shared_trace(rel)), "--html", str(page_file)])
        assert result.exit_code == 0, result.output
        out[key] = {"file": page_file, "output": result.output, "ranks": ranks, "blocked": [],
                    "errors": []}
    with sync_playwright() as p:
        browser = perfetto_ui.launch(p)
        try:
            for case in out.values():
                page = browser.new_page(viewport=VIEWPORT)
                perfetto_ui.open_offline(page, case["file"], case)
                case["charts"] = page.evaluate(COUNT_JS)
                case["layout"] = page.evaluate(LAYOUT_JS)
                case["shot"] = case["file"].with_suffix(".png")
                page.screenshot(path=str(case["shot"]))
                chart = page.locator("div.chart[data-chart='top computation']")
                chart.scroll_into_view_if_needed()
                box = chart.locator("g.point path").first.bounding_box()
                page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                page.wait_for_selector("g.hovertext")
                case["hover"] = page.locator("g.hovertext").first.text_content()
                case["widths"] = page.evaluate(OPEN_ALL_JS)
                # the first table with an idle_us column (a job's step table comes before it)
                table, col = page.evaluate(
                    "() => Array.from(document.querySelectorAll('table.sortable')).map((t, i) => "
                    "[i, Array.from(t.tHead.rows[0].cells).findIndex(c => /^idle_us/.test("
                    "c.textContent))]).find(([, c]) => c >= 0)")
                header = page.locator("table.sortable").nth(table).locator("th", has_text="idle_")
                header.first.click()
                case["ascending"] = page.evaluate(COLUMN_JS, [table, col])
                header.first.click()
                case["descending"] = page.evaluate(COLUMN_JS, [table, col])
                page.close()
        finally:
            browser.close()
    return out


@pytest.mark.parametrize("key", list(CASES))
def test_report_renders_offline(rendered: dict, key: str) -> None:
    case = rendered[key]
    assert f"{case['ranks']} rank(s)" in case["output"]
    size = case["file"].stat().st_size
    assert 0 < size < LIMIT, size
    assert case["blocked"] == [] and case["errors"] == []
    charts = case["charts"]
    names = [c["name"] for c in charts]
    assert f"({len(charts)} charts" in case["output"]
    if case["ranks"] > 1:  # a job: its wait heatmap first (test_browser_report_job.py)
        assert names[0] == "job wait heatmap"
        charts, names = charts[1:], names[1:]
    assert names[0] == "kernel types" and {"gap histogram", "idle breakdown", "timeline"} <= set(names)
    assert any(n.startswith("top ") for n in names)
    for c in charts:
        assert c["svg"] >= 1 and c["marks"] >= 1, c  # plotly drew it, with data
        assert c["title"], c
    assert charts[0]["title"].startswith("GPU time per kernel type")
    assert charts[0]["marks"] >= 2 * case["ranks"]  # a pie (with slices) per rank


@pytest.mark.parametrize("key", list(CASES))
def test_report_answers_on_the_first_screen(rendered: dict, key: str) -> None:
    case = rendered[key]
    layout = case["layout"]
    assert case["shot"].stat().st_size > 10_000  # the first screen, as a user sees it
    assert layout["verdict"] and layout["findings"] == 3
    assert layout["overview"] <= VIEWPORT["height"] and layout["overview"] <= layout["first_chart"]
    ticks = layout["us_ticks"]
    assert ticks and all(t.endswith(" µs") for t in ticks), [t for t in ticks if not t.endswith(" µs")]
    assert not any(t[:-3].rstrip()[-1:] in "kMGµm" for t in ticks), ticks
    assert layout["closed"] and all(layout["closed"])  # tables collapsed
    scroll_width, window_width = case["widths"]
    assert scroll_width <= window_width  # every table open: the page stays within the window


@pytest.mark.parametrize("key", list(CASES))
def test_report_tables_sort_on_a_click(rendered: dict, key: str) -> None:
    up, down = rendered[key]["ascending"], rendered[key]["descending"]
    assert len(up) >= 2 and up == sorted(up) and down == sorted(up, reverse=True)


@pytest.mark.parametrize("key", list(CASES))
def test_report_hover_shows_the_full_name(rendered: dict, key: str) -> None:
    """Bars are labelled with cut names; hovering the top kernel's bar shows its whole name."""
    case = rendered[key]
    text = case["file"].read_text()
    figs = json.loads(text.split("const FIGS = ", 1)[1].split(";\nconst PLOTLY", 1)[0])
    top = next(f for f in figs if f["layout"]["title"]["text"].startswith("Top computation"))
    name = top["data"][0]["customdata"][0]
    assert len(name) > 60 and name not in top["data"][0]["y"]  # the label is cut
    assert case["hover"].startswith(name) and case["hover"].endswith(" µs")
