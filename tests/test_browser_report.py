"""``traceaug report --html`` opened from disk in headless Chromium with every request other
than the page itself blocked: every chart renders (plotly draws its SVG), the page fetches
nothing, and the file stays under 5 MB. On the 2-rank directory (a pie per rank, min–max bars
across ranks); the A100 6-stream trace's page is checked for size and content in
tests/test_analyses_real.py, and renders from the same code."""

from __future__ import annotations

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


CASES = {"two_ranks": ("kineto/multi_rank_sampled", 2)}


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
                page = browser.new_page()

                def route(r, case=case):
                    if r.request.url.startswith(("file://", "blob:", "data:")):
                        r.continue_()
                    else:  # nothing leaves the machine
                        case["blocked"].append(r.request.url)
                        r.abort()

                page.route("**/*", route)
                page.on("pageerror", lambda e, case=case: case["errors"].append(str(e)))
                page.goto(case["file"].as_uri())
                page.wait_for_selector("body[data-ready='1']", timeout=60_000)
                case["charts"] = page.evaluate(COUNT_JS)
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
    assert names[0] == "kernel types" and {"gap histogram", "idle breakdown", "timeline"} <= set(names)
    assert any(n.startswith("top ") for n in names)
    for c in charts:
        assert c["svg"] >= 1 and c["marks"] >= 1, c  # plotly drew it, with data
        assert c["title"], c
    assert charts[0]["title"].startswith("GPU time per kernel type")
    assert charts[0]["marks"] >= 2 * case["ranks"]  # a pie (with slices) per rank
