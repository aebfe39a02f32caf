"""The critical path of a whole job (issue 27): each rank's graph joined at every matched
collective. The timing path (the default) checked against the walk back along the joined
replay computed in ``job_timing_raw``, the path by weight (``--hta-weights``) against the
longest path computed in ``job_path_raw`` (each rank's graph, the collectives matched, the
clocks aligned and the graph joined there, all from the raw JSON), and both on generated
jobs (``jobgen``) whose path runs through a planted straggler by construction; the job's
what-if replay and ``diff --explain`` of two jobs on those."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import jobgen as job_gen
import numpy as np
import pytest
from click.testing import CliRunner
from conftest import shared_trace
from job_path_raw import instances, longest, nccl_kernels, offsets, rank_graph
from job_timing_raw import segments as raw_timing
from rawjson import load_raw, ns

import traceaug
from traceaug.analysis import critical_path as cp
from traceaug.analysis import job_path as jp
from traceaug.analysis import job_timing
from traceaug.cli import main
from traceaug.job import parts
from traceaug.job.run import JobOptions, Work, items_of, run
from traceaug.read.ranks import select

JOB = "kineto/jobs/dlrm_v100_8ranks"
LOCAL = JobOptions(progress=False)


def read(d: Path, scales: tuple | None = ()) -> dict:
    """Every rank's part of the job's path (``scales`` None: the graphs alone), as
    ``critical-path --job`` reads them."""
    return jp.keyed(run(Work("job_path", parts.job_path, {"scales": scales}), items_of(select(d)),
                        LOCAL))


def _rank_graphs(d: Path, step: int) -> dict[int, dict]:
    """Each rank's graph of ``step``, built from its raw JSON (``job_path_raw.rank_graph``)."""
    return dict(rank_graph(f, step) for f in sorted(d.iterdir()))


def _sums_to_the_step(p: jp.JobPath) -> None:
    seg = jp.segments(p)
    assert int(seg["weight_ns"].sum()) == p.window.end - p.window.start
    assert (seg["end_ns"].to_numpy()[:-1] == seg["ts_ns"].to_numpy()[1:]).all()
    timed = seg[seg["category"] != cp.IDLE]
    assert int(timed["weight_ns"].sum()) == p.length


def test_real_job_hta_weights_path_is_the_longest_path_of_the_joined_graph() -> None:
    d = shared_trace(JOB)
    _, paths = job_timing.paths(read(d, None), hta_weights=True)
    assert [p.step for p in paths] == [10]
    graphs = _rank_graphs(d, 10)
    want = longest(d, graphs)
    assert paths[0].length == want
    # the waits on other streams no cuda_sync event records: 18 over the 8 ranks, said so
    waits = {k: n for k, n in paths[0].inferred.items() if k.startswith("cross-stream")}
    assert list(waits.values()) == [sum(g["stream_waits"] for g in graphs.values())] == [18]
    _sums_to_the_step(paths[0])
    # the job's step: the first rank's ProfilerStep start to the last rank's end (job clock)
    assert paths[0].window.end - paths[0].window.start > 14_455_000


@pytest.mark.parametrize("straggler,delay_us", [(2, 1000), (5, 300)])
def test_hta_weights_path_runs_through_a_planted_straggler(tmp_path: Path, straggler: int,
                                                           delay_us: int) -> None:
    d = job_gen.write(tmp_path / "job", job_gen.job(8, straggler, delay_us, steps=2))
    _, paths = job_timing.paths(read(d), hta_weights=True)
    assert [p.step for p in paths] == [0, 1]
    for p in paths:
        assert p.window.end - p.window.start == (job_gen.STEP_US + delay_us) * 1000
        _sums_to_the_step(p)
        assert p.length == longest(d, _rank_graphs(d, p.step))
        seg = jp.segments(p)
        loader = seg[seg["event"] == job_gen.LOADER]
        assert loader["rank"].tolist() == [straggler]
        assert loader["weight_ns"].tolist() == [(job_gen.LOADER_US + delay_us) * 1000]
        # then across ranks at the all_reduce: its transfer, on the rank the path ends on
        coll = seg[seg["kind"] == "collective"]
        assert coll["weight_ns"].tolist() == [job_gen.TRANSFER_US * 1000]


def _rows(p: jp.JobPath) -> list[tuple]:
    """The path's segments as (rank, ts, end, kind, category, event), ns of the job clock."""
    seg = jp.segments(p)
    return [(int(r), int(a), int(b), k, c, e if isinstance(e, str) else None)
            for r, a, b, k, c, e in zip(seg["rank"], seg["ts_ns"], seg["end_ns"], seg["kind"],
                                        seg["category"], seg["event"])]


def test_real_job_timing_path_is_the_walk_back_along_the_joined_replay() -> None:
    d = shared_trace(JOB)
    _, paths = job_timing.paths(read(d))
    assert [p.step for p in paths] == [10]
    for p in paths:
        want, facts = raw_timing(d, p.step)
        assert facts["ties"] == 0  # one binding edge at every node of the walk: one path
        assert (p.window.start, p.window.end) == facts["window"]
        assert _rows(p) == want
        _sums_to_the_step(p)
    # README's figures, the oracle's: 4,254 of 20,823.5 µs on ranks 7 and 4, 79.6 % idle
    timed = [(r, b - a) for r, a, b, _, c, _ in want if c != cp.IDLE]
    assert sum(w for _, w in timed) == 4_254_000
    assert {r: sum(w for q, w in timed if q == r) for r, _ in timed} == {7: 3_040_000,
                                                                         4: 1_214_000}
    idle = [(r, b - a, k) for r, a, b, k, c, _ in want if c == cp.IDLE]
    step = facts["window"][1] - facts["window"][0]
    assert round(100 * sum(w for _, w, _ in idle) / step, 1) == 79.6
    assert max(w for r, w, k in idle if k == "idle") == 4_285_000


def test_real_job_step_10_path_runs_through_rank_7s_late_arrival() -> None:
    """Rank 7 starts step 10 late and arrives last at the all_to_all the step waits for: the
    timing path runs from its late start through it (the path by weight stayed on rank 1)."""
    d = shared_trace(JOB)
    _, paths = job_timing.paths(read(d), 10)
    p = paths[0]
    rows = _rows(p)
    # from the raw JSON: each rank's step start and its NCCL kernels, in the aligned clock
    insts = instances(nccl_kernels(d))
    off = offsets(insts)
    starts = {}
    for f in sorted(d.iterdir()):
        raw = load_raw(f)
        step = next(e for e in raw["traceEvents"] if e.get("name") == "ProfilerStep#10")
        starts[int(raw["distributedInfo"]["rank"])] = ns(step["ts"]) - off[
            int(raw["distributedInfo"]["rank"])]
    first = min(starts.values())
    assert max(starts, key=starts.get) == 7
    assert rows[0] == (7, first, starts[7], "late_start", "idle", "ProfilerStep#10")
    assert starts[7] - first == 7_513_500
    # the path crosses ranks once, at the collective where rank 7 arrived last
    e = p.edges
    crossings = np.flatnonzero(e["kind"] == jp.JOIN)
    assert len(crossings) == 1
    i = int(crossings[0])
    assert int(e["src_rank"][i]) == 7
    arrival = int(e["ts"][i])  # rank 7's kernel start, job clock
    inst = next(x for x in insts if x[7][0] - off[7] == arrival)
    aligned = {r: s - off[r] for r, (s, _) in inst.items()}
    assert max(aligned, key=aligned.get) == 7
    assert {r for r, *_ in rows} == {7, int(e["dst_rank"][i])}
    _sums_to_the_step(p)


def _planted(straggler: int, delay_us: int, where: str, end_rank: int = 0) -> list[tuple]:
    """The timing path of a ``jobgen`` step by hand (µs from the step's start): the
    straggler's loader (CPU-side) or gemm (GPU-side) to its all_reduce's launch, the
    all_reduce's transfer on the rank where the step ends (every rank ends then: the first),
    that rank's sync, its add and kernel, its tail."""
    k, x = straggler, delay_us
    comm, idle = (job_gen.NCCL, "idle")
    if where == "cpu":
        head = [(k, 0, 10, idle, idle, None),
                (k, 10, 110 + x, "span", "cpu", job_gen.LOADER),
                (k, 110 + x, 120 + x, idle, idle, None),
                (k, 120 + x, 130 + x, "span", "cpu", "aten::mm"),
                (k, 130 + x, 140 + x, "span", "cpu", "cudaLaunchKernel"),
                (k, 140 + x, 170 + x, "span", "cpu", "aten::mm"),
                (k, 170 + x, 180 + x, idle, idle, None),
                (k, 180 + x, 185 + x, "span", "cpu", "record_param_comms"),
                (k, 185 + x, 205 + x, "launch_delay", "launch_delay", comm)]
    else:
        head = [(k, 0, 10, idle, idle, None),
                (k, 10, 110, "span", "cpu", job_gen.LOADER),
                (k, 110, 120, idle, idle, None),
                (k, 120, 130, "span", "cpu", "aten::mm"),
                (k, 130, 150, "launch_delay", "launch_delay", "gemm_kernel"),
                (k, 150, 205 + x, "span", "gpu_compute", "gemm_kernel")]
    r = end_rank
    return head + [(r, 205 + x, 305 + x, "collective", "gpu_communication", comm),
                   (r, 305 + x, 310 + x, "sync", "blocked", "cudaStreamSynchronize"),
                   (r, 310 + x, 315 + x, idle, idle, None),
                   (r, 315 + x, 320 + x, "span", "cpu", "aten::add"),
                   (r, 320 + x, 340 + x, "launch_delay", "launch_delay", "add_kernel"),
                   (r, 340 + x, 350 + x, "span", "gpu_compute", "add_kernel"),
                   (r, 350 + x, 365 + x, idle, idle, None)]


@pytest.mark.parametrize("straggler,delay_us,where", [(2, 1000, "cpu"), (5, 300, "cpu"),
                                                      (3, 1000, "gpu")])
def test_timing_path_runs_through_a_planted_straggler(tmp_path: Path, straggler: int,
                                                      delay_us: int, where: str) -> None:
    d = job_gen.write(tmp_path / "job", job_gen.job(8, straggler, delay_us, steps=2,
                                                     where=where))
    _, paths = job_timing.paths(read(d))
    assert [p.step for p in paths] == [0, 1]
    for p in paths:
        assert p.window.end - p.window.start == (job_gen.STEP_US + delay_us) * 1000
        got = [(r, (a - p.window.start) / 1000, (b - p.window.start) / 1000, k, c, e)
               for r, a, b, k, c, e in _rows(p)]
        assert got == _planted(straggler, delay_us, where)
        _sums_to_the_step(p)


def test_cli_job_writes_the_merged_trace_with_the_path(tmp_path: Path) -> None:
    d = job_gen.write(tmp_path / "job", job_gen.job(4, 3, 500))
    out = tmp_path / "path.json"
    r = CliRunner().invoke(main, ["critical-path", str(d), str(out), "--job", "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)["rows"]
    assert [s["step"] for s in data] == [0]
    assert sum(data[0]["segments"]["weight_ns"]) == (job_gen.STEP_US + 500) * 1000
    assert 3 in data[0]["ranks"]["rank"]
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    lane_pids = {p for p, n in names.items() if n.endswith(" Critical path")}
    assert names and {names[p] for p in lane_pids} >= {"rank 3 Critical path"}
    lane = [e for e in events if e.get("ph") == "b" and e["pid"] in lane_pids]
    assert any(e["name"].endswith("DataLoaderIter.__next__") and e["pid"] == 3 * (1 << 22)
               + (1 << 22) - 1 for e in lane)
    # an arrow across ranks at the all_reduce, from the straggler's kernel
    flows = [e for e in events if e.get("cat") == "critical_path" and e.get("ph") in ("s", "f")]
    start = {e["id"]: e for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e for e in flows if e["ph"] == "f"}
    crossing = [(start[i]["pid"] >> 22, ends[i]["pid"] >> 22) for i in start if i in ends
                and start[i]["pid"] >> 22 != ends[i]["pid"] >> 22]
    assert len(crossing) == 1 and crossing[0][0] == 3
    # without OUT the summary alone; a missing step is one line
    r = CliRunner().invoke(main, ["critical-path", str(d), "--job", "--summary-only"])
    assert r.exit_code == 0 and "job critical path of ProfilerStep#0" in r.stdout
    # --hta-weights: the longest path by weight, through the straggler's loader too
    r = CliRunner().invoke(main, ["critical-path", str(d), "--job", "--summary-only",
                                  "--hta-weights", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert 3 in json.loads(r.stdout)["rows"][0]["ranks"]["rank"]
    r = CliRunner().invoke(main, ["critical-path", str(d), "--job", "--summary-only",
                                  "--step", "7"])
    assert r.exit_code != 0 and "ProfilerStep#7" in r.output


def test_a_step_no_rank_has_an_event_in_is_idle(tmp_path: Path) -> None:
    """ProfilerStep#5 (100 µs) holds no event on either rank: both paths give it whole as
    idle and the replay replays it as measured (a traceback before)."""
    traces = job_gen.job(2, 1, 100)
    for t in traces.values():
        t["traceEvents"].append(job_gen._x("user_annotation", "ProfilerStep#5",
                                           job_gen.BASE_US + 5000, 100))
    d = job_gen.write(tmp_path / "job", traces)
    for weights in (False, True):
        segments, _ = traceaug.critical_path(d, step=5, whole_job=True, hta_weights=weights)
        assert segments[["rank", "weight_ns", "category"]].values.tolist() == [
            [-1, 100_000, "idle"]]
    w = traceaug.whatif(d, step=5)
    assert w.steps[["measured_ns", "baseline_ns"]].values.tolist() == [[100_000, 100_000]]


# ----- what-if replay of a job --------------------------------------------------------------
def test_job_whatif_removing_a_gpu_straggler_gives_the_step_without_it(tmp_path: Path) -> None:
    delay = 1000
    d = job_gen.write(tmp_path / "job", job_gen.job(8, 2, delay, steps=2, where="gpu"))
    w = traceaug.whatif(d, scale=["comm=0.5"], no_stragglers=True)
    assert w.steps["measured_ns"].tolist() == [(job_gen.STEP_US + delay) * 1000] * 2
    assert w.steps["baseline_error_pct"].tolist() == [0.0, 0.0]
    got = {(s, c): ns for s, c, ns in zip(w.changes["step"], w.changes["change"],
                                          w.changes["predicted_ns"])}
    for step in (0, 1):
        # every rank at the median arrival: nobody waits for rank 2's long gemm
        assert got[(step, "no-stragglers")] == job_gen.STEP_US * 1000
        # the all_reduce's transfer halved, on every rank
        assert got[(step, "comm=0.5")] == (job_gen.STEP_US + delay - job_gen.TRANSFER_US // 2) * 1000
        assert got[(step, "all")] == (job_gen.STEP_US - job_gen.TRANSFER_US // 2) * 1000


def test_job_whatif_real_job_baseline_and_cli(tmp_path: Path) -> None:
    d = shared_trace(JOB)
    r = CliRunner().invoke(main, ["whatif", str(d), "--no-stragglers", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert [x["step"] for x in rows] == [10]
    # the job's step: first rank's ProfilerStep start to last rank's end, in the job clock
    _, paths = job_timing.paths(read(d))
    assert rows[0]["measured_ns"] == paths[0].window.end - paths[0].window.start
    assert abs(rows[0]["baseline_error_pct"]) <= 3.0
    # Rank 1's sync waits on its stream 7, which waited (no recorded event) for the all_to_all
    # that waited for rank 7: stragglers at the median arrival move the step (20,823.5 ->
    # 20,022.5 µs; before the inferred waits, nothing moved it). At most by the latest
    # collective arrival's lead over the median one, from the raw JSON.
    insts = instances(nccl_kernels(d))
    off = offsets(insts)
    lead = max(max(s - off[r] for r, (s, _) in i.items())
               - statistics.median(s - off[r] for r, (s, _) in i.items()) for i in insts)
    saving = rows[0]["measured_ns"] - rows[0]["predicted_ns"]
    assert rows[0]["change"] == "no-stragglers" and 0 < saving <= lead
    # one file has no stragglers to remove
    one = next(iter(sorted(d.iterdir())))
    r = CliRunner().invoke(main, ["whatif", str(one), "--no-stragglers"])
    assert r.exit_code != 0 and "needs a job" in r.output


# ----- diff --explain of two jobs ------------------------------------------------------------
def test_diff_explain_of_two_jobs_splits_the_change_along_the_job_paths(tmp_path: Path) -> None:
    a = job_gen.write(tmp_path / "a", job_gen.job(8, 2, 300, steps=2, where="gpu"))
    b = job_gen.write(tmp_path / "b", job_gen.job(8, 2, 1000, steps=2, where="gpu"))
    r = CliRunner().invoke(main, ["diff", str(a), str(b), "--explain", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    cats = {x["category"]: x["delta_ns"] for x in rows if x["section"] == "category"}
    events = {(x["event"], x["category"]): x["delta_ns"] for x in rows if x["section"] == "event"}
    # each job step: STEP_US + the straggler's excess (its gemm, on the job's path)
    assert sum(cats.values()) == pytest.approx((1000 - 300) * 1000)
    assert cats["gpu_compute"] == pytest.approx(700_000)
    assert events[("gemm_kernel", "gpu_compute")] == pytest.approx(700_000)
    assert sum(events.values()) == pytest.approx(700_000)


def test_python_api_gives_the_job_path_as_dataframes(tmp_path: Path) -> None:
    d = job_gen.write(tmp_path / "job", job_gen.job(4, 1, 400, steps=2))
    segments, summary = traceaug.critical_path(d, tmp_path / "out.json", whole_job=True)
    assert sorted(set(segments["step"])) == [0, 1]
    per_step = segments.groupby("step")["weight_ns"].sum()
    assert per_step.tolist() == [(job_gen.STEP_US + 400) * 1000] * 2
    assert summary.groupby("step")["ns"].sum().tolist() == per_step.tolist()
    ranks = summary.attrs["ranks"]
    assert 1 in ranks[ranks["step"] == 0]["rank"].tolist()
    assert (tmp_path / "out.json").stat().st_size > 0


# ----- waits between streams the trace does not record --------------------------------------
def test_real_rank_path_follows_the_unrecorded_stream_wait_to_the_all_to_all() -> None:
    """Rank 1's ``cudaStreamSynchronize`` (6,561 µs from ...425430 µs) waits on stream 7, whose
    next kernel (launched ~80 µs before the sync) starts 2 µs after the ``SendRecv`` kernel on
    stream 84 ends (the trace has the ``cudaStreamWaitEvent`` calls, no ``cuda_sync`` event):
    the path runs through that kernel (its 7,635 µs), as the raw JSON's own graph says."""
    d = shared_trace(JOB)
    f = next(p for p in sorted(d.iterdir()) if p.name.startswith("worker1_"))
    rank, graph = rank_graph(f, 10)
    with traceaug.load(f, kind="sync", progress=False) as t:
        r = cp.analyse(t, step=10)
        assert r.length == longest(d, {rank: graph})  # 12,352 µs (without the waits: 11,750)
        e = r.edges
        waits = np.flatnonzero(e["kind"] == cp.STREAM_WAIT)
        # ...431941 -> ...431943 µs; a DtoH copy on stream 24 after the next SendRecv: 5 µs
        assert e["weight"][waits].tolist() == [2_000, 5_000]
        before = waits[0] - 1  # the SendRecv's own time, just before on the path
        assert str(e["event_name"][before]).startswith("ncclKernel_SendRecv")
        assert e["weight"][before] == 7_635_000
        assert int(t.base_ns + e["end"][before]) == 1694128201431941 * 1000  # its end (raw JSON)


def test_an_instances_joins_by_hand() -> None:
    """``job_path.instance`` on five members laid out by hand: transfers from the last arrival (50 ns; an end
    before it: 0), the median arrival the first of two tied starts, the joins that run forward."""
    ts, te = np.array([30, 10, 30, 20, 50]), np.array([60, 35, 55, 45, 70])
    transfer, mid, (p, q) = jp.instance(ts, te)
    assert transfer.tolist() == [10, 0, 5, 0, 20] and mid == 0
    want = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (1, 2), (1, 3), (1, 4), (2, 0), (2, 1), (2, 3), (2, 4),
            (3, 0), (3, 1), (3, 2), (3, 4), (4, 0), (4, 2)]
    assert list(zip(p.tolist(), q.tolist())) == want
    _, _, own = jp.instance(ts, te, own=True)
    assert sorted(zip(*(x.tolist() for x in own))) == sorted(want + [(i, i) for i in range(5)])
