"""``traceaug report JOB --html`` on the real 8-rank DLRM job, opened from disk in headless
Chromium with every other request blocked: the verdict heads the page, the job section (the wait heatmap)
comes after the overview and before the kernel charts; the heatmap plotly drew holds, per rank
and collective instance in job-clock order, the wait the raw-JSON oracle computes; hovering a
cell names its rank, instance, kind and wait in µs."""

from __future__ import annotations

import perfetto_ui
import pytest
from click.testing import CliRunner
from collectives_raw import oracle, raw_kernels, raw_ranks
from conftest import shared_trace

from traceaug.cli import main

perfetto_ui.require(__file__)

JOB = "kineto/jobs/dlrm_v100_8ranks"
HEAT = "div.chart[data-chart='job wait heatmap']"
READ_JS = """(sel) => {
  const d = document.querySelector(sel), t = d.data[0];
  const charts = Array.from(document.querySelectorAll('div.chart'));
  const top = e => e.getBoundingClientRect().top;
  return {type: t.type, z: t.z, x: t.x, y: t.y, kinds: t.customdata,
          drawn: d.querySelectorAll('g.hm image').length,
          title: (d.querySelector('.gtitle') || {}).textContent || '',
          order: charts.map(c => c.dataset.chart),
          verdict: document.querySelector('#overview .verdict').textContent,
          overview: document.querySelector('#overview').getBoundingClientRect().bottom,
          job: top(document.querySelector('#job')), heat: top(d),
          kernels: top(document.querySelector("div.chart[data-chart='kernel types']"))};
}"""


@pytest.fixture(scope="module")
def page_data(tmp_path_factory) -> dict:
    d = shared_trace(JOB)
    out = tmp_path_factory.mktemp("job") / "report.html"
    result = CliRunner().invoke(main, ["report", str(d), "--html", str(out)])
    assert result.exit_code == 0, result.output
    got = {"output": result.output, "blocked": [], "errors": []}
    with perfetto_ui.chromium() as browser:
        page = browser.new_page(viewport={"width": 1366, "height": 800})
        perfetto_ui.open_offline(page, out, got)
        got.update(page.evaluate(READ_JS, HEAT))
        # hover the cell of the largest wait: the middle of its (row, column) in the plot area
        z = got["z"]
        row, col = max(((i, j) for i in range(len(z)) for j in range(len(z[i]))),
                       key=lambda ij: z[ij[0]][ij[1]])
        heat = page.locator(HEAT)
        heat.scroll_into_view_if_needed()
        box = heat.locator("rect.nsewdrag").first.bounding_box()
        page.mouse.move(box["x"] + box["width"] * (col + 0.5) / len(z[0]),
                        box["y"] + box["height"] * (row + 0.5) / len(z))
        page.wait_for_selector("g.hovertext")
        got["hover"] = page.locator("g.hovertext").first.text_content()
        got["hovered"] = (row, col)
    got["events"] = raw_ranks(d)
    return got


def test_heatmap_holds_the_oracle_waits(page_data: dict) -> None:
    assert page_data["blocked"] == [] and page_data["errors"] == []
    events = page_data["events"]
    want = oracle(events)
    names = [k[2]["name"] for k in raw_kernels(events[0])]
    kinds = ["AllToAll" if "SendRecv" in n else "AllReduce" for n in names]
    order = sorted(range(len(names)), key=lambda p: want[("all", p)]["arrival_ns"])
    assert page_data["type"] == "heatmap" and page_data["drawn"] >= 1  # plotly drew it
    assert page_data["x"] == [f"{kinds[p]}#{p}" for p in order]  # the job-clock order
    assert page_data["y"] == [f"rank {r}" for r in sorted(events)]
    assert page_data["kinds"] == [[kinds[p] for p in order]] * len(events)
    for i, r in enumerate(sorted(events)):
        assert page_data["z"][i] == pytest.approx([want[("all", p)]["wait_us"][r] for p in order],
                                                  abs=1e-6)
    assert page_data["title"].startswith("Wait per rank at each collective")


def test_hover_names_rank_instance_kind_and_wait(page_data: dict) -> None:
    row, col = page_data["hovered"]
    wait = page_data["z"][row][col]
    assert wait > 0
    label = page_data["x"][col]
    assert page_data["hover"] == (f"rank {row}instance {label}kind {label.split('#')[0]}"
                                  f"wait {wait:,.1f} µs")


def test_job_section_first_after_the_overview(page_data: dict) -> None:
    assert page_data["order"][:2] == ["job wait heatmap", "kernel types"]
    assert page_data["overview"] <= page_data["job"] < page_data["heat"] < page_data["kernels"]
    assert page_data["verdict"].startswith("Step 10 took 20,823.5 µs")
    assert "Rank 7 sets it: it arrived last at 5 of 8 collectives" in page_data["verdict"]
    assert f"({len(page_data['order'])} charts, 8 rank(s))" in page_data["output"]
