"""kernels / gaps / breakdown / launches on the shared real traces, against values computed
here from the raw JSON (tests/analyses_raw.py)."""

from __future__ import annotations

import json
import os

import analyses_raw as rawa
import pytest
from click.testing import CliRunner
from conftest import shared_trace

import traceaug
from traceaug.analysis import breakdown, gaps, kernels, launches
from traceaug.analysis.gpu_steps import LOAD, gpu_ops
from traceaug.cli import main
from traceaug.read import normalize, prefetch

A100 = "kineto/a100_rank0_of16_6streams.json.gz"
QWEN = "kineto/h100_qwen05b_inference.json.gz"


def _load(rel: str):
    path = shared_trace(rel)
    with traceaug.load(path, progress=False, **LOAD) as t:
        return gpu_ops(t), rawa.raw(path)


@pytest.fixture(scope="module")
def a100():
    return _load(A100)


@pytest.fixture(scope="module")
def qwen():
    return _load(QWEN)


def _base(g, r) -> int:
    """Engine ns + this = the raw file's ns (the first CPU step aligns both)."""
    first = min(r["cpu_steps"])
    return r["cpu_steps"][first][0] - int(g.steps["cpu_ts"][list(g.steps["step"]).index(first)])


def test_qwen_gpu_window_is_the_gpu_annotation_and_unlaunched_ops_count(qwen) -> None:
    g, r = qwen
    t = breakdown.temporal(g, 6)
    lo, hi = r["windows"][6]
    assert t["window"][0] == hi - lo == 34_892_421  # the GPU-side ProfilerStep#6
    assert t["cpu_step"][0] == 47_151_395
    assert t["source"][0] == "gpu_annotation"
    assert t["busy"][0] == rawa.busy(r["ops"], lo, hi)
    assert t["idle"][0] == (hi - lo) - rawa.busy(r["ops"], lo, hi)
    unlaunched = [o for o in r["ops"] if o["launch"] is None]
    assert (len(r["ops"]), len(unlaunched)) == (1707, 509)
    k = kernels.kernel_table(g, step=6)  # unlaunched ops are placed by time, not dropped
    want = rawa.kernel_totals([o for o in r["ops"] if o["step"] == 6])
    assert dict(zip(k["name"], zip(k["count"].tolist(), k["total"].tolist()))) == want
    whole = kernels.kernel_table(g)
    assert dict(zip(whole["name"], zip(whole["count"].tolist(), whole["total"].tolist()))) == \
        rawa.kernel_totals(r["ops"])
    assert whole["count"].sum() == 1707


def test_a100_steps_temporal_breakdown(a100) -> None:
    g, r = a100
    base = _base(g, r)
    t = breakdown.temporal(g)
    for i, n in enumerate(t["step"].tolist()[:-1]):
        lo, hi = r["windows"][n]
        assert (t["window_start"][i] + base, t["window"][i]) == (lo, hi - lo)
        assert t["busy"][i] == rawa.busy(r["ops"], lo, hi), n
        for typ in ("computation", "communication", "memory"):
            assert t[typ][i] == rawa.busy(r["ops"], lo, hi, typ), (n, typ)
    lo = min(a for a, _ in r["windows"].values())
    hi = max(b for _, b in r["windows"].values())
    assert (t["window"][-1], t["busy"][-1]) == (hi - lo, rawa.busy(r["ops"], lo, hi))


def test_a100_kernels_gaps_launches(a100) -> None:
    g, r = a100
    k = kernels.kernel_table(g)
    assert dict(zip(k["name"], zip(k["count"].tolist(), k["total"].tolist()))) == \
        rawa.kernel_totals(r["ops"])
    step = kernels.kernel_table(g, step=552)
    assert dict(zip(step["name"], zip(step["count"].tolist(), step["total"].tolist()))) == \
        rawa.kernel_totals([o for o in r["ops"] if o["step"] == 552])
    s = gaps.stream_gaps(g)
    want = rawa.stream_gaps(r["ops"])
    got = {st: (n, tot, mx) for st, n, tot, mx in zip(s["stream"].tolist(), s["gaps"].tolist(),
                                                       s["total"].tolist(), s["max"].tolist())}
    assert got == {st: (len(v), sum(v), max(v)) for st, v in want.items()}
    lt = launches.launch_table(g)
    launched = [o for o in r["ops"] if o["launch"] is not None]
    assert len(lt["launch_delay"]) == len(launched)
    assert int(lt["launch_delay"].sum()) == sum(max(o["ts"] - o["launch"][1], 0) for o in launched)
    assert int(lt["cpu_duration"].sum()) == sum(o["launch"][1] - o["launch"][0] for o in launched)


@pytest.mark.parametrize("rel", [A100, QWEN])
def test_kernels_without_a_step_read_the_gpu_ops_alone(rel: str) -> None:
    """``kernels`` without --step loads "gpu_ops" (``kernels.load_kind``): the engine holds
    none of the raw JSON's runtime calls, and every GPU op's count and total per name equal
    the raw JSON's, as the CLI prints them."""
    path = shared_trace(rel)
    r = rawa.raw(path)
    assert kernels.load_kind(None) == "gpu_ops" and kernels.load_kind(3) == LOAD["kind"]
    with traceaug.load(path, kind=kernels.load_kind(None), progress=False) as t:
        calls = t.query("SELECT count(*) AS n FROM slice WHERE category = 'cuda_runtime'")
        assert int(calls["n"][0]) == 0
        k = kernels.kernel_table(gpu_ops(t))
    assert dict(zip(k["name"], zip(k["count"].tolist(), k["total"].tolist()))) == \
        rawa.kernel_totals(r["ops"])
    out = CliRunner().invoke(main, ["kernels", str(path), "--format", "json"])
    assert out.exit_code == 0, out.output
    got = {row["name"]: (row["count"], row["total_ns"]) for row in json.loads(out.output)["kernels"]}
    assert got == rawa.kernel_totals(r["ops"])


def test_directory_every_rank_and_across_ranks() -> None:
    d = shared_trace("kineto/multi_rank_sampled")
    result = CliRunner().invoke(main, ["kernels", str(d), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for rank in (0, 1):
        want = rawa.kernel_totals(rawa.raw(d / f"rank-{rank}.json.gz")["ops"])
        got = {row["name"]: (row["count"], row["total_ns"]) for row in data["kernels"]
               if row["rank"] == rank}
        assert got == want
    across = {row["name"]: row for row in data["kernels across ranks"]}
    nccl = [n for n in across if n.startswith("ncclKernel_SendRecv")][0]
    totals = {row["rank"]: row["total_ns"] for row in data["kernels"] if row["name"] == nccl}
    assert across[nccl]["max_total_ns"] == max(totals.values())
    assert across[nccl]["max_total_rank"] == max(totals, key=totals.get)


def test_directory_ranks_are_planned_in_the_pool_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory's ranks run in the job's pool (``job.executor.LocalPool``): pass 1 of each
    happens in a pool process, none here and no prefetch child is started for them; the
    tables are the same as the raw JSON's."""
    d = shared_trace("kineto/multi_rank_sampled")
    started, here = [], []
    start, plan = prefetch.start, normalize.plan
    monkeypatch.setattr(prefetch, "start",
                        lambda files, kind: (started.extend(p.name for p in files),
                                             start(files, kind)))
    parent = os.getpid()
    monkeypatch.setattr(normalize, "plan",  # a forked child runs it too: count this process's
                        lambda path, *a, **k: (os.getpid() == parent and here.append(path.name),
                                               plan(path, *a, **k))[1])
    result = CliRunner().invoke(main, ["kernels", str(d), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert started == [] and here == []
    data = json.loads(result.output)
    for rank in (0, 1):
        want = rawa.kernel_totals(rawa.raw(d / f"rank-{rank}.json.gz")["ops"])
        assert {row["name"]: (row["count"], row["total_ns"]) for row in data["kernels"]
                if row["rank"] == rank} == want


def test_diff_headline_gpu_idle_is_window_minus_busy(qwen) -> None:
    _, r = qwen
    path = shared_trace(QWEN)
    result = CliRunner().invoke(main, ["diff", str(path), str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    head = json.loads(result.output)["ranks"][0]["summary"]["a"]
    lo, hi = r["windows"][6]
    busy = rawa.busy(r["ops"], lo, hi)
    assert head["step_ns"] == 47_151_395
    assert head["gpu_busy_ns"] == busy
    assert head["gpu_idle_ns"] == hi - lo - busy  # not 47.15 ms − busy


def test_report_charts_hold_the_raw_figures(a100, tmp_path) -> None:
    g, r = a100
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(shared_trace(A100)), "--html", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size < 5_000_000  # self-contained, plotly.js included
    text = out.read_text()
    figs = json.loads(text.split("const FIGS = ", 1)[1].split(";\nconst PLOTLY", 1)[0])
    pie = figs[0]["data"][0]
    want = {t: sum(o["end"] - o["ts"] for o in r["ops"] if o["type"] == t) / 1e3
            for t in ("computation", "communication", "memory")}
    assert dict(zip(pie["labels"], pie["values"])) == pytest.approx(want)
    timeline = figs[-1]["data"]
    idle = next(t for t in timeline if t["name"] == "idle")
    for x, y in zip(idle["x"], idle["y"]):
        n = int(x.rsplit(" ", 1)[1])
        lo, hi = r["windows"][n]
        assert y == pytest.approx((hi - lo - rawa.busy(r["ops"], lo, hi)) / 1e3), x
    assert len(idle["x"]) == len(r["windows"]) == 5


def test_cuda_sync_rows_are_not_busy() -> None:
    """The simple_add trace has 41 cuda_sync rows on the GPU streams and no ProfilerStep: one
    window over every GPU op, busy = the union of kernels, copies and sets only."""
    path = shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")
    with traceaug.load(path, progress=False, **LOAD) as t:
        g = gpu_ops(t)
    r = rawa.raw(path)
    t = breakdown.temporal(g)
    assert t["step"].tolist() == [None] and t["source"].tolist() == ["trace"]
    lo, hi = min(o["ts"] for o in r["ops"]), max(o["end"] for o in r["ops"])
    assert t["window"][0] == hi - lo
    assert t["busy"][0] == rawa.busy(r["ops"], lo, hi)
    events = [e for e in rawa.load_raw(path)["traceEvents"] if e.get("cat") == "cuda_sync"]
    sync = [(rawa.ns(e["ts"]), rawa.ns(e["ts"]) + rawa.ns(e["dur"])) for e in events]
    assert len(sync) == 41
    with_sync = rawa.union([(o["ts"], o["end"]) for o in r["ops"]] + sync)
    assert with_sync > t["busy"][0]  # counting them would have changed the answer
    assert sum(kernels.kernel_table(g)["count"]) == 79 + 16 + 3
