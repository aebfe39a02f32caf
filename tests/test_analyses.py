"""kernels / gaps / breakdown / launches on a generated trace whose answers are known by
construction (tests/analyses_gen.py), on its MTIA twin, and through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import analyses_gen as gen
import numpy as np
import pytest
from click.testing import CliRunner

import traceaug
from traceaug.analysis import breakdown, gaps, kernels, launches
from traceaug.analysis.gpu_steps import LOAD, gpu_ops
from traceaug.cli import main

US = 1000


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory) -> Path:
    return gen.write(tmp_path_factory.mktemp("gen") / "known.json")


@pytest.fixture(scope="module")
def g(trace_path):
    with traceaug.load(trace_path, progress=False, **LOAD) as t:
        yield gpu_ops(t)


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_gpu_windows_and_steps(g) -> None:
    st = g.steps
    got = {n: (int(a) - int(st["cpu_ts"][0]), int(b) - int(st["cpu_ts"][0]), s)
           for n, a, b, s in zip(st["step"].tolist(), st["ts"], st["end"], st["source"])}
    assert got == gen.ANSWERS["windows"]
    assert (st["cpu_end"] - st["cpu_ts"]).tolist() == [100 * US, 100 * US]
    names, steps = g.ops["name"].tolist(), g.ops["step"].tolist()
    by_name = {n: [s for m, s in zip(names, steps) if m == n] for n in set(names)}
    assert by_name == gen.ANSWERS["op_steps"]  # the unlaunched relu kernels kept, placed by time


@pytest.mark.parametrize("step", [1, 2, None])
def test_temporal_breakdown(g, step) -> None:
    t = breakdown.temporal(g, step)
    row = len(t["step"]) - 1  # the asked step, or the all-steps row
    want = gen.ANSWERS["temporal"][step]
    cols = ("busy", "idle", "computation", "communication", "memory", "comp_only", "comm_only",
            "mem_only", "comp_comm", "comp_mem", "comm_mem", "comp_comm_mem")
    for col, w in zip(cols, want):
        if w is not None:
            assert t[col][row] == w * US, col
    if want[-1] is not None:
        assert t["comm_overlap_pct"][row] == pytest.approx(want[-1])
    assert t["busy"][row] + t["idle"][row] == t["window"][row]


def test_kernel_table(g) -> None:
    t = kernels.kernel_table(g)
    got = {n: (c, tot // US, lo // US, hi // US) for n, c, tot, lo, hi in
           zip(t["name"], t["count"], t["total"], t["min"], t["max"])}
    assert got == gen.ANSWERS["kernels"]
    assert t["name"][0] == gen.NCCL  # largest total first
    assert t["share_time"].sum() == pytest.approx(100)
    assert t["share_launches"][0] == pytest.approx(100 * 2 / 9)
    gemm = list(t["name"]).index(gen.GEMM)
    assert t["std"][gemm] == pytest.approx(np.std([20e3, 18e3, 20e3], ddof=1))
    types = dict(zip(t["name"], t["type"]))
    assert (types[gen.NCCL], types[gen.GEMM], types[gen.MEMCPY]) == ("communication", "computation", "memory")
    s1 = kernels.kernel_table(g, step=1)
    assert {n: (c, tot // US) for n, c, tot in zip(s1["name"], s1["count"], s1["total"])} == \
        gen.ANSWERS["kernels_step1"]
    assert list(kernels.kernel_table(g, kind="comm")["name"]) == [gen.NCCL]


def test_gaps_and_transitions(g) -> None:
    s = gaps.stream_gaps(g)
    for stream, want in gen.ANSWERS["stream_gaps"].items():
        i = list(s["stream"]).index(stream)
        assert (s["gaps"][i], s["total"][i], s["min"][i], s["max"][i]) == \
            (len(want), sum(want) * US, min(want) * US, max(want) * US)
        assert s["median"][i] == np.median(want) * US
    d = gaps.device_gaps(g)
    want = gen.ANSWERS["device_gaps"]
    assert (d["gaps"][0], d["total"][0], d["max"][0]) == (len(want), sum(want) * US, max(want) * US)
    tr = gaps.transitions(g)
    got = {(a, b): (c, tot) for a, b, c, tot in zip(tr["from"], tr["to"], tr["count"], tr["total"])}
    assert got == {k: (len(v), sum(v) * US) for k, v in gen.ANSWERS["transitions"].items()}
    # a histogram holds distinct gaps and their counts (a job: every rank's)
    counted = gaps.counted(gaps.stream_pairs(g)["gap"])
    h = gaps.histogram(counted, 0, 100, 10, log=False)
    assert h["count"].tolist() == [1, 4, 0, 0, 1, 0, 0, 0, 1, 0]  # 5 | 10 10 10 13 | 47 | 80
    rank = gaps.part(g, True, None, None, "count")
    job = dict(gaps.combine([rank, rank, rank], 0, 100, 10))
    one = gaps.histogram(counted, 0, 100, 10)["count"]
    assert job["gap histogram (µs, log-spaced bins, gaps > 0 on every stream)"]["count"].tolist() == \
        (3 * one).tolist() and one.sum() == 7


def test_idle_breakdown_hta_rules(g) -> None:
    t = breakdown.idle_by_stream(g)
    got = {(s, c): (n, i // US) for s, c, n, i in zip(t["stream"], t["category"], t["count"], t["idle"])}
    assert got == gen.ANSWERS["idle"]


def test_launch_stats(g) -> None:
    t = launches.launch_table(g)
    got = {c: (a // US, b // US, d // US) for c, a, b, d in
           zip(t["correlation"], t["cpu_duration"], t["gpu_duration"], t["launch_delay"])}
    assert got == gen.ANSWERS["launches"]
    s = launches.summary(t, g, delay_cutoff_us=20)
    assert (s["short_gpu_ops"], s["runtime_outliers"], s["delay_outliers"], s["unlaunched_ops"]) == (
        gen.ANSWERS["short"], gen.ANSWERS["runtime_outliers"], gen.ANSWERS["delay_outliers_20us"],
        gen.ANSWERS["unlaunched"])


def test_mtia_trace_has_the_same_kernels_and_busy_time(tmp_path: Path) -> None:
    path = gen.write(tmp_path / "mtia.json", mtia=True)
    with traceaug.load(path, progress=False, **LOAD) as t:
        m = gpu_ops(t)
    k = kernels.kernel_table(m)
    assert {n: (c, tot // US) for n, c, tot in zip(k["name"], k["count"], k["total"])} == \
        {n: v[:2] for n, v in gen.ANSWERS["kernels"].items()}
    assert int(m.ops["launched"].sum()) == 7
    types = dict(zip(k["name"], k["type"]))  # copies typed by name, as HTA does
    assert (types[gen.MEMCPY], types[gen.MEMSET], types[gen.NCCL]) == ("memory", "memory", "communication")
    assert breakdown.temporal(m, 1)["busy"][0] == 68 * US
    info = traceaug.info(path)[0]  # the copies counted as copies, as kernels types them
    assert (info["kernels"], info["memcpys"], info["memsets"]) == (7, 1, 1)
    head = json.loads(_cli("diff", str(path), str(path), "--format", "json"))["ranks"][0]["summary"]["a"]
    assert head["gpu_busy_ns"] == pytest.approx((68 + 40) / 2 * 1e3)  # diff reads MTIA too


def test_cli_formats(trace_path: Path) -> None:
    by_count = json.loads(_cli("kernels", str(trace_path), "--format", "json", "--sort", "count"))
    assert [r["count"] for r in by_count["kernels"]] == [3, 2, 2, 1, 1]
    assert [r["name"] for r in by_count["kernels"]][1:3] == sorted([gen.NCCL, gen.RELU])  # ties by name
    top = json.loads(_cli("kernels", str(trace_path), "--format", "json", "--sort", "share", "--top", "1"))
    assert [r["name"] for r in top["kernels"]] == [gen.NCCL]
    data = json.loads(_cli("kernels", str(trace_path), "--format", "json"))
    assert {r["name"]: r["count"] for r in data["kernels"]} == \
        {n: v[0] for n, v in gen.ANSWERS["kernels"].items()}
    csv = _cli("breakdown", str(trace_path), "--format", "csv", "--step", "2")
    lines = csv.splitlines()
    assert lines[0].startswith("# temporal") and lines[1].startswith("rank,step,source")
    assert lines[2].split(",")[lines[1].split(",").index("busy_ns")] == str(40 * US)
    text = _cli("gaps", str(trace_path), "--hist-min", "0", "--hist-max", "100", "--bins", "10")
    assert "█" in text and "gaps per device" in text
    text = _cli("launches", str(trace_path), "--delay-cutoff", "20")
    assert "launch-delay outliers" in text
    data = json.loads(_cli("launches", str(trace_path), "--format", "json"))
    assert len(data["launches"]) == 7 and data["launch summary"][0]["unlaunched_ops"] == 2


def test_cli_unknown_step_is_one_line(trace_path: Path) -> None:
    result = CliRunner().invoke(main, ["kernels", str(trace_path), "--step", "9"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"traceaug: error: {trace_path}: no ProfilerStep#9 (steps: 1, 2)"]


def test_diff_headline_uses_the_gpu_windows(trace_path: Path) -> None:
    data = json.loads(_cli("diff", str(trace_path), str(trace_path), "--format", "json"))
    head = data["ranks"][0]["summary"]["a"]
    assert head["step_ns"] == pytest.approx(100_000)  # the CPU steps
    assert head["gpu_busy_ns"] == pytest.approx((68 + 40) / 2 * 1e3)  # inside windows, per step
    assert head["gpu_idle_ns"] == pytest.approx((62 + 0) / 2 * 1e3)
    assert head["computation_ns"] == pytest.approx((43 + 20) / 2 * 1e3)
    assert head["communication_ns"] == pytest.approx((40 + 30) / 2 * 1e3)
    one = json.loads(_cli("diff", str(trace_path), str(trace_path), "--format", "json",
                          "--step", "1"))["ranks"][0]["summary"]["a"]
    assert (one["gpu_busy_ns"], one["gpu_idle_ns"]) == (68_000, 62_000)


def test_python_api_returns_dataframes(trace_path: Path) -> None:
    import traceaug.analyses as ta

    k = ta.kernels(trace_path)
    assert list(k.columns) == ["rank", "name", "type", "count", "total_ns", "mean_ns", "std_ns",
                               "min_ns", "max_ns", "launches_pct", "time_pct"]
    assert dict(zip(k["name"], k["count"])) == {n: v[0] for n, v in gen.ANSWERS["kernels"].items()}
    t = ta.temporal_breakdown(trace_path)
    assert t.loc[t["step"] == 1, "busy_ns"].item() == 68 * US
    o = ta.comm_comp_overlap(trace_path, step=1)
    assert o["comm_overlap_pct"].item() == pytest.approx(37.5)
    i = ta.idle_breakdown(trace_path)
    assert i.loc[(i["stream"] == 20), "idle_ns"].item() == 80 * US
    assert ta.launch_summary(trace_path)["unlaunched_ops"].item() == 2
    assert len(ta.launches(trace_path, step=2)) == 3
    assert ta.stream_gaps(trace_path).set_index("stream").loc[7, "gaps"] == 6
    assert ta.device_gaps(trace_path)["total_ns"].item() == 57 * US
    assert ta.kernel_transitions(trace_path)["count"].sum() == 7
    assert ta.gap_histogram(trace_path, lo_us=0, hi_us=100, bins=10)["count"].sum() == 7
    assert ta.kernels_across_ranks(trace_path)["ranks"].tolist() == [1] * 5
    with traceaug.load(trace_path, progress=False) as loaded:  # a loaded trace works too
        assert ta.kernels(loaded)["total_ns"].sum() == 145 * US


@pytest.mark.parametrize("case", ["missing_dir", "is_dir", "is_input"])
def test_report_bad_output_is_one_line_and_writes_nothing(trace_path: Path, tmp_path: Path,
                                                          case: str) -> None:
    out = {"missing_dir": tmp_path / "no" / "r.html", "is_dir": tmp_path, "is_input": trace_path}[case]
    before = trace_path.read_bytes()
    result = CliRunner().invoke(main, ["report", str(trace_path), "--html", str(out)])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"traceaug: error: {out}: ")
    assert trace_path.read_bytes() == before and not (tmp_path / "no").exists()


def test_trace_without_gpu_ops_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "cpu.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, '
                    '"tid": 1, "ts": 10, "dur": 5}]}')
    for command in ("kernels", "gaps", "breakdown", "launches", "report"):
        result = CliRunner().invoke(main, [command, str(path)])
        assert result.exit_code == 1, command
        assert result.output == f"traceaug: error: {path}: no GPU kernels, copies or sets to analyse\n"


def test_step_at_picks_the_holding_window_that_starts_last() -> None:
    """Against a brute force over random, overlapping windows (A100 step windows overlap)."""
    from traceaug.analysis.gpu_steps import step_at

    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 7))
        start = rng.integers(0, 100, n)
        end = start + rng.integers(0, 60, n)
        number = np.arange(n) + 10
        t = rng.integers(-5, 170, 60)
        want = [max(((start[k], number[k]) for k in range(n) if start[k] <= x < end[k]),
                    default=(0, -1))[1] for x in t]
        assert step_at(t, start, end, number).tolist() == want


def test_ranks_are_read_and_closed_as_they_load(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """``load_ranks(then=...)``: each rank's engine is closed once ``then`` has read it, so
    no more than two are open at once (never every rank's); ``then``'s results come back,
    keyed by rank."""
    from traceaug.trace import Trace

    text = gen.write(tmp_path / "known.json").read_text()
    for r in range(3):  # three ranks of the known trace: more than two
        (tmp_path / "ranks").mkdir(exist_ok=True)
        (tmp_path / "ranks" / f"rank-{r}.json").write_text(
            text.replace('"distributedInfo":{"rank":0,"world_size":1}',
                         f'"distributedInfo":{{"rank":{r},"world_size":3}}'))
    open_now, most, init, close = [0], [0], Trace.__init__, Trace.close

    def opened(self, *a, **k):
        init(self, *a, **k)
        open_now[0] += 1
        most[0] = max(most[0], open_now[0])

    def closed(self):
        open_now[0] -= 1
        close(self)

    monkeypatch.setattr(Trace, "__init__", opened)
    monkeypatch.setattr(Trace, "close", closed)
    got = traceaug.load_ranks(tmp_path / "ranks", then=lambda r, t: (r, t.rank, len(gpu_ops(t).ops["ts"])),
                              progress=False, **LOAD)
    with traceaug.load(tmp_path / "known.json", progress=False, **LOAD) as t:
        n = len(gpu_ops(t).ops["ts"])
    assert got == {r: (r, r, n) for r in range(3)}
    assert open_now[0] == 0 and 1 <= most[0] <= 2
