"""``traceaug whatif`` and ``diff --explain``: replays of traces whose answers are laid out by
hand (the schedule in each trace's comment), the replay against a plain relaxation, and the
explain split summing to the step-time change."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from unittest.mock import patch

import kineto_gen
import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from conftest import TESTDATA, shared_trace
from hypothesis import given, settings
from hypothesis import strategies as st

import traceaug
from traceaug.analysis import critical_path as cp
from traceaug.analysis import replay
from traceaug.cli import main

_spec = importlib.util.spec_from_file_location("cp_generate_whatif",
                                               TESTDATA / "generate_critical_path.py")
gen = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gen
_spec.loader.exec_module(gen)
US = 1000  # ns


def _step(t, start: int, dur: int, n: int = 1) -> None:
    t.x("user_annotation", f"ProfilerStep#{n}", start, dur, gen.CPU, gen.CPU)


def pipeline(gemm_us: int = 1000) -> gen.Trace:
    """One step, 0..end (µs): launch gemm_a at 0 (launch delay 100: it runs 100..1100),
    launch an NCCL all-reduce at 120 (after gemm_a began, so HTA sees an idle stream at the
    gemm's launch), queued behind it (kernel gap 50: 1150..1650), cudaDeviceSynchronize from
    140 returning 50 after the all-reduce (1700), 100 of Python,
    aten::add 1800..1900, the step's end 100 later (2000). ``gemm_us``: the gemm's time (the
    rest of the schedule moves with it)."""
    t = gen.Trace()
    shift = gemm_us - 1000
    _step(t, 0, 2000 + shift)
    c1 = t.call("cudaLaunchKernel", 0, 10)
    t.gpu("gemm_a", 100, gemm_us, 7, c1)
    c2 = t.call("cudaLaunchKernel", 120, 10)
    t.gpu("ncclKernel_AllReduce_RING", 1150 + shift, 500, 7, c2)
    c3 = t.call("cudaDeviceSynchronize", 140, 1560 + shift)
    t.sync("Context Sync", 1690 + shift, 5, c3)
    t.op("aten::add", 1800 + shift, 100)
    return t


def slack() -> gen.Trace:
    """A gap nothing recorded explains: gemm_b starts 2000 µs after gemm_a on its stream (more
    than the 1.5 ms a kernel gap may be; launched while gemm_a ran: no launch delay either).
    gemm_a 100..1100 (launched at 0), gemm_b 3100..3600 (launched at 120),
    cudaStreamSynchronize 140..3650, step 0..3700."""
    t = gen.Trace()
    _step(t, 0, 3700)
    c1 = t.call("cudaLaunchKernel", 0, 10)
    t.gpu("gemm_a", 100, 1000, 7, c1)
    c2 = t.call("cudaLaunchKernel", 120, 10)
    t.gpu("gemm_b", 3100, 500, 7, c2)
    c3 = t.call("cudaStreamSynchronize", 140, 3510)
    t.sync("Stream Sync", 3640, 5, c3, stream=7)
    return t


def _write(tmp_path: Path, t: gen.Trace, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(t.text())
    return p


# By hand, from ``pipeline``'s schedule (µs):
#  comp=0.5: gemm 100..600, all-reduce 650..1150, sync returns 1200, add 1300..1400, end 1500
#  comm=0.5: all-reduce 1150..1400, sync 1450, add 1550..1650, end 1750
#  cpu=2: launches 0..20, 130..150, sync from 160 (its own 50 -> 100: still the GPU's 1700),
#         add 1800..2000, end 2100
#  aten::add=3: add 1800..2100, end 2200;  mem=0.5: nothing to scale, 2000
#  no-launch-delay: gemm 0..1000, all-reduce 1050..1550, sync 1600, add 1700..1800, end 1900
PIPELINE = {"comp=0.5": 1500, "comm=0.5": 1750, "cpu=2": 2100, "aten::add=3": 2200,
            "gemm*=0.5": 1500, "mem=0.5": 2000, "no-launch-delay": 1900}


def test_changes_of_a_hand_laid_schedule(tmp_path: Path) -> None:
    path = _write(tmp_path, pipeline())
    scales = [k for k in PIPELINE if "=" in k]
    w = traceaug.whatif(path, scale=scales, no_launch_delay=True, progress=False)
    assert w.steps.to_dict("list") == {"step": [1], "measured_ns": [2000 * US],
                                       "baseline_ns": [2000 * US], "baseline_error_pct": [0.0],
                                       "unexplained_pct": [5.0],  # the step's last 100 µs
                                       # dependency-only: launches 0..10, 10..20 back to back, gemm
                                       # 0..1000 at its launch, all-reduce 1000..1500, the sync's
                                       # own 50 after it (1550), the add 1550..1650
                                       "dependency_ns": [1650 * US], "dependency_error_pct": [-17.5],
                                       # with the CPU's 110, 10 and 100 between its calls: launch 2
                                       # at 120, the sync from 140 to 1550, then 100, the add 1650..1750
                                       "with_cpu_gaps_ns": [1750 * US], "with_cpu_gaps_error_pct": [-12.5]}
    got = dict(zip(w.changes["change"], w.changes["predicted_ns"]))
    want = {k: v * US for k, v in PIPELINE.items()}
    # all together: gemm 0..250 (comp and gemm*: 0.25), all-reduce 300..550 (comm), sync
    # returns 600 (the launches 0..20, 130..150 and its own 160..260 end before), add
    # 700..1300 (cpu and aten::add: 6 times), end 1400
    want["all"] = 1400 * US
    assert got == want
    speedup = dict(zip(w.changes["change"], w.changes["speedup"]))
    assert speedup["comp=0.5"] == pytest.approx(2000 / 1500)


def test_slack_stays_after_the_latest_dependency(tmp_path: Path) -> None:
    """Halving gemm_a moves gemm_b 500 µs earlier, its unexplained 2000 µs wait kept (without
    the slack, gemm_b would follow gemm_a at once: 850 + 50 + 50 = 950 µs)."""
    path = _write(tmp_path, slack())
    w = traceaug.whatif(path, scale=["gemm_a=0.5"], progress=False)
    assert w.steps["baseline_ns"].tolist() == [3700 * US]
    assert w.changes["predicted_ns"].tolist() == [3200 * US]
    # unexplained on the way into the end: the 2000 µs wait and the step's last 50 µs
    assert w.steps["unexplained_pct"].tolist() == [pytest.approx(100 * 2050 / 3700)]


@pytest.mark.parametrize("name", sorted(json.loads((TESTDATA / "critical_path.answers.json")
                                                   .read_text())))
def test_unchanged_replay_is_the_measured_window(name: str) -> None:
    with traceaug.load(TESTDATA / "critical_path" / f"{name}.json", kind="sync", progress=False) as t:
        span = t.span()
        r = replay.whatif(t, scales=[replay.parse_scale("cpu=1")])[0]
    assert r.measured_ns == r.baseline_ns == span[1] - span[0]
    assert r.predicted_ns == {"cpu=1": r.baseline_ns}


def _relaxed(ts, src, dst, d) -> list[int]:
    """Each node's time by repeated relaxation (Bellman-Ford on a DAG), roots at ``ts``."""
    t = [None] * len(ts)
    for v in range(len(ts)):
        if v not in set(dst.tolist()):
            t[v] = int(ts[v])
    for _ in range(len(ts)):
        for u, v, w in zip(src.tolist(), dst.tolist(), d.tolist()):
            if t[u] is not None and (t[v] is None or t[u] + w > t[v]) and (
                    all(t[x] is not None for x in src[dst == v].tolist())):
                t[v] = max(t[x] + y for x, y in zip(src[dst == v].tolist(), d[dst == v].tolist()))
    return t


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_schedule_is_the_plain_relaxation(data) -> None:
    n = data.draw(st.integers(2, 12))
    ts = np.sort(np.array(data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)),
                          np.int64))
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                               max_size=25))
    pairs = [(a, b) for a, b in pairs if a < b]
    src = np.array([a for a, _ in pairs], np.int64)
    dst = np.array([b for _, b in pairs], np.int64)
    d = np.array(data.draw(st.lists(st.integers(-5, 30), min_size=len(src), max_size=len(src))),
                 np.int64)
    lane = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64)
    got = replay.schedule(ts, np.arange(n), src, dst, d, lane)
    assert got.tolist() == _relaxed(ts, src, dst, d)
    with patch.object(replay, "RELAXED_AT_ONCE", 2):  # the edges relaxed a few at a time, as a job's are
        assert replay.schedule(ts, np.arange(n), src, dst, d, lane).tolist() == _relaxed(ts, src, dst, d)
    # with its slack, the unchanged replay is the measured time wherever delays fit
    fit = np.minimum(d, ts[dst] - ts[src]) if len(src) else d
    _, s = replay.binding(ts, src, dst, fit)
    assert replay.schedule(ts, np.arange(n), src, dst, fit + s, lane).tolist() == ts.tolist()


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_command_formats_and_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, pipeline())
    r = _run("whatif", str(path), "--scale", "comp=0.5", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = orjson.loads(r.output)["rows"]
    assert [(x["change"], x["predicted_ns"], x["baseline_error_pct"]) for x in rows] == [
        ("comp=0.5", 1500 * US, 0.0)]
    table = _run("whatif", str(path), "--scale", "comp=0.5", "--no-launch-delay")
    assert table.exit_code == 0 and "baseline_error_pct" in table.output
    assert "no-launch-delay" in table.output and "all" in table.output
    r = CliRunner().invoke(main, ["whatif", str(path), "--step", "7"])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "no ProfilerStep#7" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = _run("whatif", str(bad))
    assert r.exit_code == 1 and r.output.startswith("traceaug: error: ") and r.output.count("\n") == 1


@pytest.mark.parametrize("scale", ["comp", "comp=-1", "comp=nan", "comp=inf", "comp=1e308",
                                   f"cpu={2**70}", "cpu=1000001", "=2"])
def test_out_of_range_factors_are_usage_errors(tmp_path: Path, scale: str) -> None:
    """A factor must be finite, >= 0 and small enough for int64 ns sums (1e308 used to predict
    a faster step with a numpy cast warning): one line naming --scale, exit 2, nothing printed."""
    path = _write(tmp_path, pipeline())
    r = CliRunner().invoke(main, ["whatif", str(path), "--scale", scale])
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert r.exit_code == 2 and len(errors) == 1 and f"--scale {scale!r}" in errors[0], r.output
    assert "baseline" not in r.output and "Warning" not in r.output
    with pytest.raises(traceaug.TraceaugError, match="factor from 0 to 1e"):
        traceaug.whatif(path, scale=[scale], progress=False)
    assert traceaug.whatif(path, scale=["cpu=1e6"], progress=False).changes["predicted_ns"][0] > 0


# ----- diff --explain ---------------------------------------------------------------------------
def test_explain_splits_the_change_along_both_paths(tmp_path: Path) -> None:
    """B's gemm is 400 µs shorter, so its step is: the split says it was all gpu_compute
    (gemm_a), every other category and event unchanged."""
    a = _write(tmp_path, pipeline(), "a.json")
    b = _write(tmp_path, pipeline(gemm_us=600), "b.json")
    r = _run("diff", str(a), str(b), "--explain", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = orjson.loads(r.output)["rows"]
    cats = {x["category"]: x["delta_ns"] for x in rows if x["section"] == "category"}
    events = {(x["event"], x["category"]): x["delta_ns"] for x in rows if x["section"] == "event"}
    assert cats == {c: (-400 * US if c == "gpu_compute" else 0) for c in cp.CATEGORIES}
    assert {k: v for k, v in events.items() if v} == {("gemm_a", "gpu_compute"): -400 * US}
    # along A's path: launch 0..100, gemm_a, gap, all-reduce, the sync's wait after it 50
    # (blocked), then the add; the 100 of Python before the add and the step's tail are off the path
    a_ns = {x["category"]: x["a_ns"] for x in rows if x["section"] == "category"}
    assert a_ns == {"cpu": 100 * US, "blocked": 50 * US, "gpu_compute": 1000 * US,
                    "gpu_communication": 500 * US, "gpu_memory": 0, "launch_delay": 100 * US,
                    "kernel_gap": 50 * US, "sync_wait": 0, "idle": 200 * US}
    table = _run("diff", str(a), str(b), "--explain")
    assert table.exit_code == 0 and "-400.000 us" in table.output


@pytest.mark.parametrize("pair", ["kineto/diff/h100_runs"])
def test_explain_sums_to_the_step_change_on_real_runs(pair: str) -> None:
    from traceaug.analysis.explain import explain

    root = shared_trace(pair)
    with traceaug.load(root / "a/trace.json.gz", kind="sync", progress=False) as ta, \
            traceaug.load(root / "b/trace.json.gz", kind="sync", progress=False) as tb:
        res = explain(ta, tb)
    delta = res["delta_ns"]
    assert delta != 0
    assert res["categories"]["delta_ns"].sum() == pytest.approx(delta, abs=1e-6)
    assert res["events"]["delta_ns"].sum() == pytest.approx(delta, abs=1e-6)


DLRM_RANK4 = "kineto/jobs/dlrm_v100_8ranks/worker4_step_12.1694128201547.pt.trace.json.gz"


@pytest.mark.parametrize("rel", [DLRM_RANK4, "kineto/h100_qwen05b_inference.json.gz"])
def test_real_traces_replay_exactly_and_changes_move_the_right_way(rel: str) -> None:
    """Unchanged, the replay is the measured step; a slower class never shortens it, a faster
    one never lengthens it, and nothing made faster ends before the path's recorded work."""
    scales = ["comp=2", "comp=0.5", "cpu=0", "comm=0", "mem=1"]
    w = traceaug.whatif(shared_trace(rel), scale=scales, no_launch_delay=True, progress=False)
    assert (w.steps["baseline_ns"] == w.steps["measured_ns"]).all()
    assert (w.steps["baseline_error_pct"] == 0).all()
    for step, base in zip(w.steps["step"], w.steps["baseline_ns"]):
        got = dict(zip(w.changes["change"][w.changes["step"] == step],
                       w.changes["predicted_ns"][w.changes["step"] == step]))
        assert got["comp=2"] >= base >= got["comp=0.5"]
        assert got["mem=1"] == base
        assert max(got["cpu=0"], got["comm=0"], got["no-launch-delay"]) <= base
        assert got["all"] > 0


def test_joined_models_wait_for_each_other(tmp_path: Path) -> None:
    """Two copies of ``pipeline`` joined as ranks 0 and 1 by an edge from rank 0's gemm end to
    rank 1's all-reduce start (50 µs, as its own gap): alone, rank 1's gemm at half time would
    end its step at 1500 µs; joined, its all-reduce still waits for rank 0's gemm (1100 + 50),
    so the job's step stays 2000 µs. Rank 0's gemm at half time shortens rank 0 alone: 2000."""
    path = _write(tmp_path, pipeline())
    with traceaug.load(path, kind="sync", progress=False) as t:
        win = cp.window(t, 1)
        graph = cp.build(cp.events(t), win)
        names = replay.event_names(t, graph)
    m = replay.model(graph, win)
    gemm, nccl = names.tolist().index("gemm_a"), names.tolist().index("ncclKernel_AllReduce_RING")
    n = len(m.node_ts)
    job = replay.join([m, m], np.array([2 * gemm + 1]), np.array([n + 2 * nccl]),
                      np.array([50 * US]))
    assert job.replay() == 2000 * US  # unchanged: the measured step
    half = np.ones(2 * m.events)
    half[m.events + gemm] = 0.5  # rank 1's gemm
    f1 = np.ones(m.events)
    f1[gemm] = 0.5
    assert m.replay(f1) == 1500 * US
    assert job.replay(half) == 2000 * US
    half[:] = 1
    half[gemm] = 0.5  # rank 0's gemm: rank 1 still takes 2000
    assert job.replay(half) == 2000 * US
    half[m.events + gemm] = 0.5  # both: the job's step is one rank's
    assert job.replay(half) == 1500 * US


def test_an_unrecorded_stream_wait_is_a_dependency_of_the_replay(tmp_path: Path) -> None:
    """``kineto_gen.unrecorded_stream_wait``: the consumer (stream 20) waited for the producer
    (stream 7) through a wait the trace does not record. By hand (µs): producer 15..315 at
    0.5 -> 15..165, the consumer 2 later 167..267, the sync returning 3 after it: 270 (without
    the inferred wait, the consumer's 297 µs from its launch held it at 317: no saving);
    the consumer at 0.5: 370."""
    path = kineto_gen.write(tmp_path / "t.json", kineto_gen.unrecorded_stream_wait())
    w = traceaug.whatif(path, scale=["producer=0.5", "consumer=0.5"], progress=False)
    assert w.steps["baseline_ns"].tolist() == w.steps["measured_ns"].tolist() == [420 * US]
    got = dict(zip(w.changes["change"], w.changes["predicted_ns"]))
    assert got == {"producer=0.5": 270 * US, "consumer=0.5": 370 * US, "all": 220 * US}
