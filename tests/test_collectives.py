"""Collectives across ranks (issue 26): the per-rank tables, matching, job clock, waits,
stragglers and their causes, checked against an oracle computed here from the raw JSON (it
imports nothing of traceaug's analysis), on the real 8-rank DLRM job and on jobs built from it
with planted stragglers."""

from __future__ import annotations

import json
import pickle
import statistics
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from collectives_raw import is_nccl, oracle, raw_kernels, raw_ranks
from conftest import require_hta, shared_trace
from jobgen import copy_job, kernels, plant_cpu, plant_gpu, shift_clock, split_groups, write
from rawjson import load_raw, ns

import traceaug
from traceaug.analysis import collectives as co
from traceaug.analysis.collective_rank import tables as rank_tables
from traceaug.cli import main
from traceaug.render.job_sections import job_sections

A100 = "kineto/a100_nccl_rank0_of2.json.gz"
JOB = "kineto/jobs/dlrm_v100_8ranks"


def extract(path: Path):
    """One rank's collective tables, loaded as the job's tasks load it."""
    with traceaug.load(path, kind="collectives", progress=False) as t:
        return rank_tables(t)


def matched_of(d: Path, align: bool = True) -> co.Matched:
    """Every rank of job ``d`` matched (its clocks aligned)."""
    return co.match_job([extract(f) for f in sorted(d.glob("*.json*"))], align)


def rows_by_position(df) -> dict[tuple[str, int], dict]:
    return {(r["group"], r["position"]): r for r in df.to_dict("records")}


def check_against(df, want: dict, group_names: dict[str, str] | None = None) -> None:
    got = rows_by_position(df)
    names = group_names or {"all": "stream 84"}
    assert set(got) == {(names[g], p) for g, p in want}
    for (g, p), w in want.items():
        row = got[(names[g], p)]
        assert row["straggler"] == w["straggler"], (g, p)
        for col in ("skew_ns", "mean_wait_ns", "max_wait_ns", "transfer_ns"):
            assert row[col] == pytest.approx(w[col], abs=1e-6), (g, p, col)


# ----- the per-rank tables ----------------------------------------------------------------
def test_launch_times_stay_exact_ns_beside_a_collective_without_launch(tmp_path: Path) -> None:
    """A rank one of whose NCCL kernels has no launch call: the others' launch and issue
    times are still exact epoch ns (pandas made the column float64 there, 256 ns coarse),
    in the rank's tables and in the matched arrivals; from the raw JSON."""
    from traceaug.analysis.collectives import match

    job = copy_job(shared_trace(JOB), ranks=2)
    lost = kernels(job[0])[-1]
    lost["args"]["correlation"] = 999_999_999  # no runtime call has it
    want = []
    for k in kernels(job[0]):
        calls = [e for e in job[0]["traceEvents"] if e.get("cat") == "cuda_runtime"
                 and e.get("args", {}).get("correlation") == k["args"]["correlation"]]
        want.append(ns(calls[0]["ts"]) if calls else None)
    assert want[-1] is None and any(w is not None and w % 256 for w in want)
    d = write(tmp_path / "job", job)
    tables = [extract(f) for f in sorted(d.iterdir())]
    colls = tables[0].colls
    assert [None if v is pd.NA else int(v) for v in colls["launch_ts"]] == want
    a = match(tables).arrivals
    a = a[a["rank"] == tables[0].rank].sort_values("row")
    assert [None if v is pd.NA else int(v) for v in a["launch_ns"]] == [want[r] for r in a["row"]]


def test_collective_args_read_for_every_nccl_kernel() -> None:
    path = shared_trace(A100)
    raw = [e for _, _, e in raw_kernels(load_raw(path)["traceEvents"])]
    tables = extract(path)
    colls = pickle.loads(pickle.dumps(tables)).colls  # plain data: an executor's task returns it
    assert len(raw) == len(colls) == 21
    for e, (_, row) in zip(raw, colls.iterrows(), strict=True):
        a = e["args"]
        assert row["ts"] == ns(e["ts"])  # absolute: the file's own clock
        assert (row["coll_name"], row["in_nelems"], row["out_nelems"], row["dtype"],
                row["group_size"], row["pg_name"], row["pg_desc"], row["pg_ranks"]) == (
            a["Collective name"], a["In msg nelems"], a["Out msg nelems"], a["dtype"],
            a["Group size"], a["Process Group Name"], a["Process Group Description"],
            a["Process Group Ranks"])
        assert row["bytes"] == a["In msg nelems"] * {"Float": 4, "Long": 8}[a["dtype"]]
        assert row["kind"] == {"allreduce": "AllReduce", "broadcast": "Broadcast"}[a["Collective name"]]
        # the issuing op survives skimming (the gpu_steps kind cut every CPU op)
        assert row["issue_op"] == {"allreduce": "nccl:all_reduce",
                                   "broadcast": "nccl:broadcast"}[a["Collective name"]]


# ----- the real 8-rank job ----------------------------------------------------------------
@pytest.fixture(scope="module")
def real_job():
    d = shared_trace(JOB)
    with traceaug.load_job(d) as job:  # each rank read once for the module's tests
        yield d, raw_ranks(d), job


def test_real_job_every_figure_from_the_raw_json(real_job) -> None:
    d, events, job = real_job
    want = oracle(events)
    got = traceaug.collectives(job)
    check_against(got, want)
    assert got["step"].tolist() == [10] * 8
    names = [k[2]["name"] for k in raw_kernels(events[0])]
    assert got["kind"].tolist() == ["AllToAll" if "SendRecv" in n else "AllReduce" for n in names]
    assert got.attrs["problems"] == []
    offsets = dict(zip(got.attrs["clock"]["rank"], got.attrs["clock"]["offset_ns"]))
    assert {r: o / 1e3 for r, o in offsets.items()} == want[("all", 0)]["offset_us"]
    # --no-align: the recorded clocks (one node: the same stragglers, figures within µs)
    check_against(traceaug.collectives(job, align=False), oracle(events, align=False))
    # per rank: its total wait, how often it was last, the others' mean wait for it
    by = traceaug.collectives(job, by="rank").set_index("rank")
    for r in events:
        assert by.at[r, "total_wait_ns"] == sum(w["wait_ns"][r] for w in want.values())
        mine = [w for w in want.values() if w["straggler"] == r]
        assert by.at[r, "straggler_count"] == len(mine)
        assert by.at[r, "caused_wait_ns"] == pytest.approx(sum(w["mean_wait_ns"] for w in mine))
    assert traceaug.collectives(job, rank=3, by="rank")["rank"].tolist() == [3]


def test_real_job_stragglers_per_step(real_job) -> None:
    d, events, job = real_job
    want = oracle(events)
    table = traceaug.stragglers(job)
    for r, evs in events.items():
        step = next(e for e in evs if e.get("name") == "ProfilerStep#10")
        row = table[(table["rank"] == r) & (table["step"] == 10)].iloc[0]
        assert row["step_ns"] == ns(step["dur"])
        assert row["wait_ns"] == sum(w["wait_ns"][r] for w in want.values())
    lost = {}
    for w in want.values():
        lost[w["straggler"]] = lost.get(w["straggler"], 0) + w["mean_wait_ns"]
    top = max(lost, key=lost.get)
    count = sum(w["straggler"] == top for w in want.values())
    first = table.attrs["findings"][0]  # the verdict (tests/test_job_verdict.py checks its figures)
    assert f"Rank {top} sets it: it arrived last at {count} of 8 collectives" in first


def test_report_job_section(real_job) -> None:
    d, events, job = real_job
    want = oracle(events)
    sections = dict(job_sections(matched_of(d), 3, []))
    heat = sections["job: wait per rank at the collectives with the largest skew (µs)"]
    worst = sorted(want, key=lambda k: -want[k]["skew_us"])[:3]
    kinds = traceaug.collectives(job)["kind"].tolist()
    assert [c for c in heat if c != "rank"] == [f"{kinds[p]}#{p}" for _, p in worst]
    for _, p in worst:
        assert heat[f"{kinds[p]}#{p}"].tolist() == [want[("all", p)]["wait_us"][r] for r in range(8)]
    # the page's heatmap: every instance, in the order their last rank arrived (the job clock)
    every = dict(job_sections(matched_of(d), None, []))
    heat = every["job: wait per rank at every matched collective, in job-clock order (µs)"]
    order = sorted(range(8), key=lambda p: want[("all", p)]["arrival_ns"])
    assert [c for c in heat if c != "rank"] == [f"{kinds[p]}#{p}" for p in order]
    for p in order:
        assert heat[f"{kinds[p]}#{p}"].tolist() == [want[("all", p)]["wait_us"][r] for r in range(8)]
    # the command puts it first, before the kernels (a lone trace has none)
    result = CliRunner().invoke(main, ["report", str(shared_trace("kineto/multi_rank_sampled")),
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    assert list(json.loads(result.stdout))[1:6] == [
        "verdict and findings", "job: verdict",
        "job: NCCL kernels, wait vs transfer (per rank, mean over ranks)",
        "job: step time and wait in collectives per rank",
        "job: wait per rank at the collectives with the largest skew (µs)"]


def test_real_job_against_hta(real_job) -> None:
    """HTA names [2, 7]. Rank 7 is our straggler too; rank 2 is nobody's: HTA's metric is the
    start of each rank's last SendRecv longer than 1% of a step, and ranks 4 and 5, who arrived
    last at that all_to_all, ran it too briefly to pass (they did not wait), so HTA measured an
    earlier kernel of theirs and found rank 2 late among the rest."""
    require_hta()
    import logging

    from hta.trace_analysis import TraceAnalysis

    d, events, job = real_job
    logging.disable(logging.WARNING)
    try:
        hta_pick = TraceAnalysis(trace_dir=str(d)).get_potential_stragglers()
    finally:
        logging.disable(logging.NOTSET)
    assert sorted(hta_pick) == [2, 7]
    ours = traceaug.collectives(job)
    assert 7 in set(ours["straggler"]) and 2 not in set(ours["straggler"])
    # from the raw events: the last SendRecv (position 5) of each rank
    sendrecv = {r: [k for k in raw_kernels(evs) if "SendRecv" in k[2]["name"]] for r, evs in events.items()}
    last = {r: ks[-1] for r, ks in sendrecv.items()}
    assert min(last[5][0], last[4][0]) > max(last[2][0], last[7][0])  # 4 and 5 came after
    dur = {r: k[1] - k[0] for r, k in last.items()}  # and did not wait: HTA's cut drops them
    assert max(dur[4], dur[5]) < min(v for r, v in dur.items() if r not in (4, 5))
    assert ours[ours["position"] == 5]["straggler"].tolist() == [
        max(events, key=lambda r: (last[r][0], -r))]


def test_kernels_never_call_the_longest_waiter_slowest(real_job) -> None:
    d, events, _ = real_job
    result = CliRunner().invoke(main, ["kernels", str(d), "--type", "comm", "--format", "json"])
    assert result.exit_code == 0, result.output
    across = {r["name"][:30]: r for r in json.loads(result.output)["kernels across ranks"]}
    row = across["ncclKernel_SendRecv_RING_SIMPL"]
    assert "slowest_rank" not in row
    totals = {r: sum(k[1] - k[0] for k in raw_kernels(evs) if "SendRecv" in k[2]["name"])
              for r, evs in events.items()}
    assert row["max_total_rank"] == max(totals, key=totals.get) == 1  # the longest waiter
    want = oracle(events)
    names = [k[2]["name"] for k in raw_kernels(events[0])]
    caused: dict[int, float] = {}
    for (_, p), w in want.items():
        if "SendRecv" in names[p]:
            s = w["straggler"]
            caused[s] = caused.get(s, 0) + sum(v for r, v in w["wait_us"].items() if r != s)
    assert row["waited_for_rank"] == max(caused, key=caused.get) == 7
    assert (row["mean_wait_ns"] + row["mean_transfer_ns"]) == pytest.approx(row["mean_total_ns"])


# ----- generated jobs ---------------------------------------------------------------------
RANKS = 16  # a generated job: rank r is the real rank r % 8


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict:
    """A generated job of ``RANKS`` ranks: rank 11's CPU issues collective 3 late, rank 2's
    GPU reaches collective 5 late, rank 14's clock is 300 µs ahead."""
    job = copy_job(shared_trace(JOB), RANKS)
    before = {r: [(k["ts"], k["ts"] + k["dur"]) for k in kernels(raw)] for r, raw in job.items()}
    cpu_op = plant_cpu(job, rank=11, c=3, d_us=2000)
    gpu_kernel = plant_gpu(job, rank=2, c=5, d_us=3000)
    shift_clock(job[14], 300)  # rank 14's host clock runs 300 µs ahead of its twin rank 6's
    d = write(tmp_path_factory.mktemp("planted") / "job", job)
    return {"dir": d, "before": before, "cpu_op": cpu_op, "gpu_kernel": gpu_kernel,
            "events": raw_ranks(d), "job": traceaug.load_job(d)}


def test_planted_cpu_and_gpu_stragglers_and_a_shifted_clock(planted: dict) -> None:
    d, before, cpu_op, gpu_kernel = (planted[k] for k in ("dir", "before", "cpu_op", "gpu_kernel"))
    got = traceaug.collectives(planted["job"])
    want = oracle(planted["events"])
    check_against(got, want)
    assert len(got) == 8 and set(got["ranks"]) == {RANKS}
    rows = rows_by_position(got)
    offset = dict(zip(got.attrs["clock"]["rank"], got.attrs["clock"]["offset_ns"]))
    assert {r: o / 1e3 for r, o in offset.items()} == want[("all", 0)]["offset_us"]
    assert abs((offset[14] - offset[6]) / 1e3 - 300) <= 5
    assert all(abs(offset[r]) <= 5000 for r in offset if r != 14)
    assert max(got.attrs["clock"]["residual_ns"]) <= 10_000  # the ends agree within µs
    for c, rank, d_us, kind, named in ((3, 11, 2000, "cpu", cpu_op), (5, 2, 3000, "gpu", gpu_kernel)):
        row = rows[("stream 84", c)]
        assert (row["straggler"], row["cause"]) == (rank, kind)
        assert row["cause_ops"].split(" +")[0] == named  # whole: csv and json never cut
        # each rank waited from its own arrival to the planted rank's, as recorded before the plant
        late = before[rank][c][0] + d_us
        waits = [late - before[r][c][0] for r in before if r != rank]  # before the shift
        assert row["mean_wait_ns"] / 1e3 == pytest.approx(statistics.mean(waits), abs=5)
        assert row["max_wait_ns"] / 1e3 == pytest.approx(max(waits), abs=5)
    # nothing else moved: the other instances keep their stragglers (the lower of two twins)
    assert [rows[("stream 84", p)]["straggler"] for p in (0, 1, 2, 4, 6, 7)] == [7, 7, 7, 7, 5, 4]
    by = traceaug.collectives(planted["job"], by="rank").set_index("rank")
    assert by.at[11, "straggler_count"] == 1 and by.at[2, "straggler_count"] == 1
    assert by.at[11, "caused_wait_ns"] == pytest.approx(rows[("stream 84", 3)]["mean_wait_ns"])


def test_planted_job_against_hta(planted: dict) -> None:
    """HTA names [2, 5]: the two latest starters of the last SendRecv (collective 5). Rank 2
    is our straggler there (its GPU reached it 3 ms late); rank 5 arrived second-latest there
    (tied with its twin 13, as the raw events show) and is our straggler at collective 6."""
    require_hta()
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    try:
        hta_pick = TraceAnalysis(trace_dir=str(planted["dir"])).get_potential_stragglers()
    finally:
        logging.disable(logging.NOTSET)
    assert sorted(hta_pick) == [2, 5]
    ours = rows_by_position(traceaug.collectives(planted["job"]))
    assert ours[("stream 84", 5)]["straggler"] == 2 and ours[("stream 84", 6)]["straggler"] == 5
    wait = oracle(planted["events"])[("all", 5)]["wait_us"]
    second = min(w for r, w in wait.items() if r != 2)
    assert {r for r, w in wait.items() if w == second} == {5, 13}


def test_two_process_groups_and_a_missing_collective(tmp_path: Path) -> None:
    job = copy_job(shared_trace(JOB), RANKS)
    groups = {"a": list(range(0, RANKS, 2)), "b": list(range(1, RANKS, 2))}
    split_groups(job, groups)
    gone = kernels(job[13])[4]
    job[13]["traceEvents"].remove(gone)  # a sampled trace lost rank 13's fifth collective
    d = write(tmp_path / "job", job)
    result = CliRunner().invoke(main, ["collectives", str(d), "--format", "json"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)["rows"]
    want = oracle(raw_ranks(d), groups, upto={"b": 4})
    check_against(pd.DataFrame(got), want, {"a": "pg a", "b": "pg b"})
    assert {(r["group"], r["ranks"]) for r in got} == {("pg a", 8), ("pg b", 8)}
    assert ("group pg b, instance 4: rank 13 lacks it (AllReduce 1576964 B; its next instance is "
            "the others' next one); nothing past it in this group is matched") in result.stderr
    odd = ", ".join(map(str, groups["b"]))
    assert f"ranks {odd} share no matched collective with rank 0: aligned on rank 1" \
        in result.stderr
    # report's heatmap: a column per instance of each group (positions repeat across groups),
    # each rank's wait there, none where the rank is not in the group
    heat = dict(job_sections(matched_of(d), None, []))[
        "job: wait per rank at every matched collective, in job-clock order (µs)"]
    kinds = {p: r["kind"] for r in got for p in [r["position"]]}
    assert sorted(c for c in heat if c != "rank") == sorted(
        f"pg {g} {kinds[p]}#{p}" for g, p in want)
    for (g, p), w in want.items():
        column = dict(zip(heat["rank"].tolist(), heat[f"pg {g} {kinds[p]}#{p}"].tolist()))
        assert {r: v for r, v in column.items() if v == v} == pytest.approx(w["wait_us"], abs=1e-6)


# ----- matching by sequence number, on tables built so the answer is known ------------------
def _tables(rank: int, rows: list[tuple[int, int, int | None]], kind: str = "AllReduce",
            nbytes: int = 4096):
    """A rank with collectives (GPU start µs, end µs, seq) of ``kind`` on stream 7."""
    from traceaug.analysis.collective_rank import COLL_COLUMNS, RankTables

    colls = pd.DataFrame({c: [None] * len(rows) for c in COLL_COLUMNS})
    colls = colls.assign(ts=[r[0] * 1000 for r in rows], end=[r[1] * 1000 for r in rows],
                         launch_ts=[r[0] * 1000 for r in rows], device=0, stream=7,
                         kind=kind, step=1, pg_name="0", pg_ranks="[0, 1]",
                         seq=pd.array([r[2] for r in rows], dtype="Int64"),
                         bytes=pd.array([nbytes] * len(rows), dtype="Int64"))
    return RankTables(path=f"rank{rank}", rank=rank, base_ns=0, world_size=2, colls=colls)


def test_matching_by_sequence_number_and_a_missing_one() -> None:
    from traceaug.analysis import collectives as co

    # rank 1's GPU ran seq 2 before seq 1: matched by seq, not by position
    job = co.match([_tables(0, [(0, 10, 0), (20, 30, 1), (40, 50, 2)]),
                    _tables(1, [(5, 10, 0), (38, 50, 2), (25, 30, 1)])])
    got = co.instance_table(job)
    assert got["seq"].tolist() == [0, 1, 2] and job.problems == []
    assert got["straggler"].tolist() == [1, 1, 0]
    assert got["skew_ns"].tolist() == [5000, 5000, 2000]
    # rank 1 lacks seq 1: reported with group and position, nothing past it matched
    job = co.match([_tables(0, [(0, 10, 0), (20, 30, 1), (40, 50, 2)]),
                    _tables(1, [(5, 10, 0), (38, 50, 2)])])
    assert co.instance_table(job)["seq"].tolist() == [0]
    assert job.problems == ["group pg 0, instance 1: rank 1 has seq 2 where the others have 1 "
                            "(it lacks that one); nothing past it in this group is matched"]


def test_clock_note_names_each_offset_beyond_its_own_residual() -> None:
    from traceaug.analysis import collectives as co
    from traceaug.render.collectives_text import notes

    # rank 1's clock is 300 µs ahead; rank 2's last collective ended 2 ms late (its residual)
    job = co.align(co.match([_tables(0, [(0, 10, None), (20, 30, None), (40, 50, None)]),
                             _tables(1, [(300, 310, None), (320, 330, None), (340, 350, None)]),
                             _tables(2, [(0, 10, None), (20, 30, None), (40, 2050, None)])]))
    assert job.clock["offset_ns"].tolist() == [0, 300_000, 0]
    assert job.clock["residual_ns"].tolist() == [0, 0, 2_000_000]
    assert notes(job) == ["job clock: offsets vs rank 0: rank 1 +300.0 us "
                          "(residual spread up to 2000.0 us)"]


def test_sizes_must_agree_except_where_they_differ_by_rank() -> None:
    from traceaug.analysis import collectives as co

    rows = [(0, 10, None), (20, 30, None)]
    job = co.match([_tables(0, rows, "AllReduce", 4096), _tables(1, rows, "AllReduce", 8192)])
    assert len(job.instances) == 0
    assert job.problems == ["group pg 0, instance 0: rank 1 has AllReduce 8192 B where the "
                            "others have AllReduce 4096 B; nothing past it in this group is matched"]
    # uneven all_to_all splits: each rank sends its own size
    job = co.match([_tables(0, rows, "AllToAll", 4096), _tables(1, rows, "AllToAll", 8192)])
    assert len(job.instances) == 2 and job.problems == []


def test_positions_where_ranks_differ_yet_match_and_the_first_that_does_not() -> None:
    """Matching looks one by one only at the positions where the ranks' (kind, size) differ:
    sizes an AllToAll sends per rank and a size one rank does not know still match there, and
    matching goes on; a kind that differs stops it at that position."""
    from traceaug.analysis import collectives as co

    kinds = ["AllReduce", "AllToAll", "AllReduce", "AllReduce", "AllReduce"]
    sizes = {0: [4096, 100, 4096, 4096, 4096], 1: [4096, 200, 4096, 4096, 4096],
             2: [4096, 300, None, 4096, 4096]}
    tables = []
    for r in range(3):
        t = _tables(r, [(100 * p + r, 100 * p + 50, None) for p in range(5)])
        t.colls["kind"] = kinds if r != 1 else kinds[:4] + ["Broadcast"]
        t.colls["bytes"] = pd.array(sizes[r], dtype="Int64")
        t.colls["pg_ranks"] = "[0, 1, 2]"
        tables.append(t)
    job = co.match(tables)
    assert job.instances["position"].tolist() == [0, 1, 2, 3]
    assert job.instances["kind"].tolist() == kinds[:4]
    assert job.instances["bytes"].tolist() == [4096, 300, 4096, 4096]
    assert job.problems == ["group pg 0, instance 4: rank 1 has Broadcast 4096 B where the others "
                            "have AllReduce 4096 B; nothing past it in this group is matched"]
    a = job.arrivals
    assert a["rank"].tolist() == [0, 1, 2] * 4 and a["row"].tolist() == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    assert a["prev_row"].tolist() == [-1] * 3 + [0] * 3 + [1] * 3 + [2] * 3
    assert a["arrival_ns"].tolist() == [(100 * p + r) * 1000 for p in range(4) for r in range(3)]
    assert a["launch_ns"].tolist() == a["arrival_ns"].tolist()


# ----- merge: every rank in one trace, on one clock -----------------------------------------
def test_merge_aligns_the_clocks_and_joins_each_collective(tmp_path: Path) -> None:
    job = copy_job(shared_trace(JOB))
    before = {r: [(k["ts"], k["ts"] + k["dur"]) for k in kernels(raw)] for r, raw in job.items()}
    shift_clock(job[6], 300)
    d = write(tmp_path / "job", job)
    out = tmp_path / "merged.json.gz"
    result = CliRunner().invoke(main, ["merge", str(d), str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stderr and "8 ranks, 56 cross-rank arrows" in result.stderr
    want = oracle(raw_ranks(d))
    merged = load_raw(out)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in merged
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    by_rank: dict[int, list] = {}
    for k in (e for e in merged if is_nccl(e)):
        by_rank.setdefault(int(names[k["pid"]].split()[1].rstrip(":")), []).append(k)
    assert sorted(by_rank) == list(range(8))
    for r, ks in by_rank.items():
        ks.sort(key=lambda e: e["ts"])
        assert len(ks) == len(before[r])
        for k, (ts, _end) in zip(ks, before[r], strict=True):  # rank 6 back on the others' clock
            assert abs(ns(k["ts"]) - ts * 1000) <= 5000
            assert ns(k["ts"]) == ts * 1000 + (300_000 if r == 6 else 0) - round(
                want[("all", 0)]["offset_us"][r] * 1000)
    # an arrow from every other rank's kernel to the straggler's, per collective
    starts = {(int(names[k["pid"]].split()[1].rstrip(":")), ns(k["ts"])): p
              for r, ks in by_rank.items() for p, k in enumerate(ks)}
    flows: dict = {}
    for e in merged:
        if e.get("cat") == "collective":
            r = int(names[e["pid"]].split()[1].rstrip(":"))
            flows.setdefault(e["id"], {})[e["ph"]] = starts[(r, ns(e["ts"]))], r
    assert len(flows) == 56
    for ends in flows.values():
        (p_out, r_out), (p_in, r_in) = ends["s"], ends["f"]
        assert p_out == p_in and r_in == want[("all", p_in)]["straggler"] != r_out


@pytest.mark.parametrize("rel", [A100, "kineto/multi_rank_sampled/rank-1.json.gz",
                                 f"{JOB}/worker3_step_12.1694128201557.pt.trace.json.gz"])
def test_merge_rebases_each_rank_as_a_full_plan_would(rel: str) -> None:
    """merge rebases each rank's text with the prefix its collectives read chose, not a second
    plan of the file: the same choice as a full plan's (epoch µs with and without fractions)."""
    from traceaug.read import normalize

    path = shared_trace(rel)
    full = normalize.plan(path, kind="full").rebase
    assert full.prefix is not None
    assert extract(path).text_base == (full.prefix, full.sep)


def test_merge_refuses_a_lone_trace(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["merge", str(shared_trace(A100)), str(tmp_path / "o.json")])
    assert result.exit_code == 1 and "merge needs a directory of two ranks or more" in result.stderr
    assert not (tmp_path / "o.json").exists()


def test_bad_input_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "job"
    broken.mkdir()
    (broken / "rank-0.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    (broken / "rank-1.json").write_text('{"traceEvents": []}')
    result = CliRunner().invoke(main, ["collectives", str(broken)])  # a job: named by rank
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"traceaug: rank 0 failed: {broken / 'rank-0.json'}: ")
    assert lines[1] == "traceaug: error: 1 of 2 ranks failed: rank(s) 0"  # it writes nothing
    for args, message in (
            (["stragglers", str(shared_trace(A100)), "--step", "99"],
             "no ProfilerStep#99 (steps: 4, 5, 6)"),
            (["collectives", str(shared_trace("kineto/a100_simple_add_cuda_sync.json.gz"))],
             "no NCCL / RCCL collective kernels to analyse")):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("traceaug: error: ") and message in lines[0]


def test_bandwidth_as_nccl_tests_with_the_group_size() -> None:
    """A lone rank of 8 (B200, newer ``ncclDevKernel_*`` names): nccl-tests' n is the
    communicator's size from the args, not the one rank traced."""
    path = shared_trace("kineto/b200_rank0_of8_allgather.json.gz")
    (k,) = [e for _, _, e in raw_kernels(load_raw(path)["traceEvents"])]
    row = traceaug.collectives(path).iloc[0]
    a = k["args"]
    nbytes = max(a["In msg nelems"], a["Out msg nelems"]) * 2  # BFloat16
    assert (row["kind"], row["bytes"], row["ranks"]) == ("AllGather", nbytes, 1)
    # the trace is one vLLM prefill (its one ``execute_context_1(…)`` annotation, a serving step 0) holding it
    (step,) = [e for e in load_raw(path)["traceEvents"] if e.get("cat") == "user_annotation"
               and e["name"].startswith("execute_context_")]
    assert step["ts"] <= k["ts"] <= step["ts"] + step["dur"]
    assert row["step"] == 0 and row["straggler"] is pd.NA
    assert row["transfer_ns"] == ns(k["dur"])
    assert row["algbw_gbps"] == pytest.approx(nbytes / ns(k["dur"]))
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * (a["Group size"] - 1) / a["Group size"])
