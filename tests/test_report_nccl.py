"""``report JOB --html``'s top communication kernels (issue 34 item 2): NCCL time shown as the wait for
the last rank's arrival vs the transfer after it, as computed from the ranks' raw JSON."""

from __future__ import annotations

import statistics
from pathlib import Path

import orjson
from click.testing import CliRunner
from collectives_raw import raw_kernels, raw_ranks
from conftest import shared_trace

from traceaug.cli import main

JOB = "kineto/jobs/dlrm_v100_8ranks"


def _split(d: Path) -> dict[str, tuple[float, float]]:
    """Per NCCL kernel name: (wait, transfer) µs per rank, mean over ranks; the k-th NCCL kernel of
    each rank is one collective, the clocks aligned on rank 0 by the median difference of ends."""
    ks = {r: raw_kernels(e) for r, e in raw_ranks(d).items()}
    n = min(map(len, ks.values()))
    off = {r: round(statistics.median(ks[r][p][1] - ks[0][p][1] for p in range(n))) for r in ks}
    wait: dict[str, dict[int, int]] = {}
    transfer: dict[str, dict[int, int]] = {}
    for p in range(n):
        last = max(ks[r][p][0] - off[r] for r in ks)
        for r in ks:
            name = ks[r][p][2]["name"]
            wait.setdefault(name, {}).setdefault(r, 0)
            transfer.setdefault(name, {}).setdefault(r, 0)
            wait[name][r] += last - (ks[r][p][0] - off[r])
            transfer[name][r] += ks[r][p][1] - off[r] - last
    return {k: (statistics.mean(wait[k].values()) / 1e3, statistics.mean(transfer[k].values()) / 1e3)
            for k in wait}


def _communication_chart(page: Path) -> dict:
    text = page.read_text()
    start = text.index("const FIGS = ") + len("const FIGS = ")
    figs = orjson.loads(text[start:text.index(";\nconst PLOTLY", start)])
    return next(f for f in figs if f["layout"]["title"]["text"].startswith("Top communication"))


def test_html_report_splits_nccl_time_into_wait_and_transfer(tmp_path: Path) -> None:
    d = shared_trace(JOB)
    page = tmp_path / "job.html"
    r = CliRunner().invoke(main, ["report", str(d), "--html", str(page)])
    assert r.exit_code == 0, r.output
    chart = _communication_chart(page)
    assert "wait for the last rank vs transfer" in chart["layout"]["title"]["text"]
    by_name = {t["name"]: dict(zip(t["customdata"], t["x"])) for t in chart["data"]}
    assert set(by_name) == {"wait for the last rank", "transfer"}
    want = _split(d)
    assert set(by_name["transfer"]) == set(want)  # SendRecv: 4,701.1 µs waiting, 40.8 transferring
    for name, (wait_us, transfer_us) in want.items():
        assert abs(by_name["wait for the last rank"][name] - wait_us) < 1e-6
        assert abs(by_name["transfer"][name] - transfer_us) < 1e-6
    # one rank: no split to show, and the chart says so
    one = tmp_path / "one.html"
    r = CliRunner().invoke(main, ["report", str(sorted(d.iterdir())[0]), "--html", str(one)])
    assert r.exit_code == 0, r.output
    assert "wait vs transfer: report the job's ranks" in _communication_chart(one)["layout"]["title"]["text"]
