"""``diff --trace`` / ``--open`` (``rewrite.diff_view``) without a browser: which pair of steps it shows, for
two jobs and for two serving traces, and the arrows of ops that start at one time on both sides.

Two jobs once needed ``--rank`` ("--trace shows one pair of traces: choose a rank with --rank"). Now the view
shows the rank that made the other ranks wait longer at collectives in B than in A, and says so in one
line; ``--rank N`` shows another. Two serving traces (no ProfilerStep) once were aligned at their first
step whatever its phase, so a prefill step of B sat on a decode step of A; now A's first steady step meets
B's step of the same phase. Checked on jobs and a serving trace built from the shared ones, where the
answer is planted. An arrow is a flow id on the two ops' events, started by the one Perfetto reads first;
where both start at one time it reads the longer first (tests/test_browser_diff_view.py has the rest)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import shared_trace
from jobgen import copy_job, plant_gpu, write

import traceaug
from traceaug.cli import main

JOB = "kineto/jobs/dlrm_v100_8ranks"
VLLM = "kineto/inference/vllm_decode_full/graph_execution.json.gz"  # one decode step
PREFILL = "execute_800_context_4(sq800sk800sqsq160000sqsk160000)_generation_0(sq0sk0sqsq0sqsk0)"
B_PID = 10**9  # B's pids in the merged trace start here


def merged_events(path: Path) -> tuple[dict, list[dict]]:
    with gzip.open(path) as f:
        data = json.load(f)
    return data, data["traceEvents"]


def test_two_jobs_show_the_rank_that_made_the_others_wait(tmp_path: Path) -> None:
    base = shared_trace(JOB)
    a = write(tmp_path / "a", copy_job(base))
    job = copy_job(base)
    stretched = plant_gpu(job, rank=5, c=5, d_us=3000)  # rank 5's compute kernel 3 ms longer: the others wait
    b = write(tmp_path / "b", job)
    # that kernel's raw events per side: each rank's file has its own (ts, dur)
    raw = {(side, r): [(e["ts"], e["dur"]) for e in json.loads((d / f"rank-{r}.json").read_text())[
        "traceEvents"] if e.get("name") == stretched] for side, d in (("a", a), ("b", b)) for r in (2, 5)}
    for rank, extra in ((5, ()), (2, ("--rank", "2"))):
        out = tmp_path / f"merged{rank}.json.gz"
        r = CliRunner().invoke(main, ["diff", str(a), str(b), "--trace", str(out), *extra])
        assert r.exit_code == 0, r.output
        said = [line for line in r.stderr.splitlines() if "showing rank" in line]
        assert len(said) == (0 if extra else 1)  # the rank chosen, and why, in one line
        if not extra:
            assert said[0].startswith("traceaug: showing rank 5 of 8: it made the other ranks wait "
                                      "3,000.0 µs more per step at collectives in B than in A")
        _, events = merged_events(out)
        shown = {side: sorted((e["ts"], e["dur"]) for e in events if e.get("name") == stretched
                              and (e["pid"] >= B_PID) == (side == "b")) for side in "ab"}
        assert shown["a"] == sorted(raw["a", rank])  # A's rank, as it is
        got = [dur for _, dur in shown["b"]]
        assert got == sorted(d for _, d in raw["b", rank]) and (max(got) - max(d for _, d in raw["a", rank])
                                                               == (3000 if rank == 5 else 0))


def test_two_jobs_without_collectives_show_the_rank_whose_step_changed_most(tmp_path: Path) -> None:
    runs = shared_trace("kineto/diff/h100_runs")  # one script run twice: rank 1 of B is the second run
    for side, files in (("a", ("a", "a")), ("b", ("a", "b"))):
        (tmp_path / side).mkdir()
        for rank, run in enumerate(files):
            (tmp_path / side / f"rank-{rank}.json.gz").write_bytes(
                (runs / run / "trace.json.gz").read_bytes())
    steps = {}
    for run in "ab":
        with gzip.open(runs / run / "trace.json.gz") as f:
            durs = [e["dur"] for e in json.load(f)["traceEvents"]
                    if str(e.get("name")).startswith("ProfilerStep#")]
        steps[run] = sum(durs) / len(durs)
    r = CliRunner().invoke(main, ["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--trace",
                                  str(tmp_path / "merged.json.gz")])
    assert r.exit_code == 0, r.output
    assert (f"traceaug: showing rank 1 of 2: its step time changed most ({steps['b'] - steps['a']:+,.1f} "
            "µs per step); no rank made the others wait more at collectives") in r.stderr


def cross_flows(path: Path) -> int:
    """Arrows between A and B in a merged trace, as Perfetto's v52 trace_processor (the UI's) reads it."""
    with traceaug.load(path, full=True, progress=False) as t:
        return int(t.query(
            "SELECT COUNT(*) AS n FROM flow f JOIN slice o ON o.id = f.slice_out "
            "JOIN slice i ON i.id = f.slice_in "
            "JOIN thread_track ko ON ko.id = o.track_id JOIN thread_track ki ON ki.id = i.track_id "
            "JOIN thread a ON a.utid = ko.utid JOIN thread b ON b.utid = ki.utid "
            "JOIN process pa ON pa.upid = a.upid JOIN process pb ON pb.upid = b.upid "
            f"WHERE (pa.pid >= {B_PID}) != (pb.pid >= {B_PID})")["n"][0])


@pytest.mark.parametrize(("rel", "factor"), [("kineto/diff/h100_runs/a/trace.json.gz", 2),
                                             ("kineto/diff/h100_runs/a/trace.json.gz", 0.5),
                                             ("kineto/diff/h100_runs/a/trace.json.gz", "every other"),
                                             (VLLM, 2)])
def test_arrows_of_ops_starting_together(tmp_path: Path, rel: str, factor) -> None:
    """B: A with its most frequent GPU op longer, shorter, or every other one longer: each pair of the
    changed op starts at one time on both sides (longer in B, shorter, or as long), each has its arrow.
    (The vLLM trace's GPU ops are on thread 0, which Perfetto gives the pid's number.)"""
    a = shared_trace(rel)
    with gzip.open(a) as f:
        data = json.load(f)
    gpu = [e for e in data["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy")]
    name = Counter(e["name"] for e in gpu).most_common(1)[0][0]
    mine = sorted((e for e in gpu if e["name"] == name), key=lambda e: e["ts"])
    for e in mine[1::2] if factor == "every other" else mine:
        e["dur"] = round(e["dur"] * (2 if factor == "every other" else factor), 3)
    b = tmp_path / "b.json"
    b.write_text(json.dumps(data))
    steps = sorted((e for e in data["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    step = steps[1] if steps else {"ts": mine[0]["ts"], "dur": mine[-1]["ts"] + 1 - mine[0]["ts"]}
    want = sum(1 for e in mine if step["ts"] <= e["ts"] < step["ts"] + step["dur"])  # launched in it, here
    out = tmp_path / "merged.json.gz"
    r = CliRunner().invoke(main, ["diff", str(a), str(b), "--trace", str(out),
                                  *(("--step-index", "1") if steps else ())])
    assert r.exit_code == 0, r.output
    assert want > 0 and cross_flows(out) == want


def test_serving_traces_align_decode_with_decode(tmp_path: Path) -> None:
    a = shared_trace(VLLM)
    with gzip.open(a) as f:
        data = json.load(f)
    decode = next(e for e in data["traceEvents"] if e.get("cat") == "user_annotation"
                  and e["name"].startswith("execute_"))
    # B: A with a prefill step 5 ms before its decode step, so B's first step is a prefill
    data["traceEvents"].append({**decode, "name": PREFILL, "ts": round(decode["ts"] - 5000, 3), "dur": 4000,
                                "args": {}})
    b = tmp_path / "b.json"
    b.write_text(json.dumps(data))
    out = tmp_path / "merged.json.gz"
    r = CliRunner().invoke(main, ["diff", str(a), str(b), "--trace", str(out)])
    assert r.exit_code == 0, r.output
    header, events = merged_events(out)
    steps = {(e["pid"] >= B_PID, e["name"]): e["ts"] for e in events if e.get("cat") == "user_annotation"
             and e["name"].startswith("execute_")}
    assert steps[False, decode["name"]] == steps[True, decode["name"]] == decode["ts"]  # decode on decode
    assert steps[True, PREFILL] == round(decode["ts"] - 5000, 3)
    window = header["traceaug"]["rewriters"][0]["options"]["ui_window_ns"]  # what the UI shows first
    start = round(decode["ts"] * 1000)  # exact: 16 digits; the sum of the two floats is not
    assert window == [start, start + round(decode["dur"] * 1000)]
