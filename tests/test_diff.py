"""`traceaug diff`: deltas against the raw events and HTA's TraceDiff, outputs, bad pairs."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import TESTDATA, shared_trace
from conftest import run_cli as cli
from rawjson import load_raw, ns

import traceaug
from traceaug.analysis.diff import Side, op_table

GPU_CATS = {"kernel": "gpu", "gpu_memcpy": "gpu", "gpu_memset": "gpu", "Kernel": "gpu", "Memcpy": "gpu",
            "Memset": "gpu"}


def diff_json(a: Path, b: Path, *extra: str) -> dict:
    result = cli("diff", str(a), str(b), "--format", "json", *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def raw_per_step(path: Path) -> dict:
    """(device, name) -> (count per step, total ns per step), computed from the raw JSON."""
    events = [e for e in load_raw(path)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))

    def in_step(ts: int) -> bool:
        return any(lo <= ts < hi for lo, hi in steps)

    launch_in_step = {e["args"]["correlation"]: in_step(ns(e["ts"])) for e in events
                      if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    out: dict = defaultdict(lambda: [0, 0])
    for e in events:
        if e.get("cat") == "cpu_op" and in_step(ns(e["ts"])):
            key = ("cpu", e["name"])
        elif e.get("cat") in GPU_CATS and launch_in_step.get(e.get("args", {}).get("correlation")):
            key = ("gpu", e["name"])
        else:
            continue
        out[key][0] += 1
        out[key][1] += ns(e["dur"])
    n = len(steps)
    return {k: (c / n, t / n) for k, (c, t) in out.items()}


def test_identical_inputs_are_unchanged() -> None:
    a = shared_trace("kineto/diff/tiny_base/base.json.gz")
    data = diff_json(a, a)
    (rank,) = data["ranks"]
    assert {r["status"] for r in rank["ops"]} == {"unchanged"}
    assert all(r["delta_ms"] == 0 and r["delta_count"] == 0 for r in rank["ops"])
    assert rank["summary"]["a"] == rank["summary"]["b"]


def test_tiny_pair_deltas_equal_the_raw_events() -> None:
    a = shared_trace("kineto/diff/tiny_base/base.json.gz")
    b = shared_trace("kineto/diff/tiny_test/test.json.gz")
    (rank,) = diff_json(a, b)["ranks"]
    want_a, want_b = raw_per_step(a), raw_per_step(b)
    rows = {(r["device"], r["key"]): r for r in rank["ops"]}
    assert set(rows) == set(want_a) | set(want_b)
    for key, row in rows.items():
        ca, ta = want_a.get(key, (0, 0))
        cb, tb = want_b.get(key, (0, 0))
        assert (row["count_a"], row["count_b"]) == (ca, cb), key
        assert row["total_a_ms"] == pytest.approx(ta / 1e6) and row["total_b_ms"] == pytest.approx(tb / 1e6)
        assert row["delta_ms"] == pytest.approx((tb - ta) / 1e6), key
        expected = "added" if key not in want_a else "removed" if key not in want_b else None
        if expected:
            assert row["status"] == expected, key
    assert {r["status"] for r in rank["ops"]} >= {"added"}


@pytest.mark.parametrize("pair", ["h100_runs", "v100_resnet50_2021", "a100_vs_v100"])
def test_real_pairs(pair: str) -> None:
    folder = shared_trace(f"kineto/diff/{pair}")
    a, b = sorted(p for p in folder.iterdir() if p.is_dir())
    if pair == "a100_vs_v100":
        a, b = folder / "control", folder / "test"
    (rank,) = diff_json(a, b)["ranks"]
    assert len(rank["ops"]) > 20
    assert rank["summary"]["a"]["steps"] > 0 and rank["summary"]["b"]["gpu_busy_ms"] > 0
    table = cli("diff", str(a), str(b), "--device", "gpu", "--by", "short-name")
    assert table.returncode == 0 and "Top regressions" in table.stdout


def test_a100_vs_v100_matches_hta_compare_traces(tmp_path: Path) -> None:
    """Per-name counts and total durations equal HTA's for the same ranks and iteration."""
    pytest.importorskip("hta", reason="HolisticTraceAnalysis is not installed")
    from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff

    folder = shared_trace("kineto/diff/a100_vs_v100")
    dirs = []
    for side in ("control", "test"):
        d = tmp_path / side
        d.mkdir()
        for f in (folder / side).iterdir():
            (d / f.name).write_bytes(f.read_bytes())
        dirs.append(d)
    control, test = (LabeledTrace(label, trace_dir=str(d)) for label, d in zip(("c", "t"), dirs,
                                                                                strict=True))
    step = control.iterations()[0]
    a = Side.of(traceaug.load(next(dirs[0].iterdir()), progress=False, only="ops"))  # as diff loads
    b = Side.of(traceaug.load(next(dirs[1].iterdir()), progress=False, only="ops"))
    try:
        for device, dtype in (("gpu", DeviceType.GPU), ("cpu", DeviceType.CPU)):
            hta = TraceDiff.compare_traces(control, test, device_type=dtype, control_iteration=step,
                                           test_iteration=step)
            for side, label in ((a, "c"), (b, "t")):
                ours = op_table(side, "name", device, step)
                theirs = hta.loc[ours["key"]]
                assert (ours["count"] == theirs[f"{label}_counts"].to_numpy()).all()
                # HTA keeps durations in whole microseconds
                assert (abs(ours["total"] / 1000 - theirs[f"{label}_total_duration"].to_numpy()) <= 0.5).all()
                assert len(ours["key"]) > 100
    finally:
        a.trace.close()
        b.trace.close()


def test_bad_pairs(tmp_path: Path) -> None:
    good = shared_trace("kineto/diff/tiny_base/base.json.gz")
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    r = cli("diff", str(good), str(empty))
    assert r.returncode == 1 and f"{empty}: empty file" in r.stderr
    cpu = shared_trace("kineto/cpu_only_gloo.json.gz")
    r = cli("diff", str(cpu), str(cpu))
    assert r.returncode == 1 and "no GPU kernels" in r.stderr
    ranks01 = shared_trace("kineto/multi_rank_sampled")
    other = tmp_path / "b"
    other.mkdir()
    other.joinpath("rank-3.json.gz").write_bytes(
        shared_trace("kineto/diff/a100_vs_v100/control/rank-3.json.gz").read_bytes())
    other.joinpath("rank-9.json.gz").write_bytes(shared_trace("kineto/no_distributed_info.json.gz").read_bytes())
    r = cli("diff", str(ranks01), str(other))
    assert r.returncode == 1 and "no common ranks (A has [0, 1], B has [3, 9])" in r.stderr
    assert "Traceback" not in r.stderr


def test_html_report_and_merged_trace(tmp_path: Path) -> None:
    folder = shared_trace("kineto/diff/h100_runs")
    a, b = folder / "a" / "trace.json.gz", folder / "b" / "trace.json.gz"
    report, merged = tmp_path / "report.html", tmp_path / "merged.json.gz"
    r = cli("diff", str(a), str(b), "--html", str(report), "--trace", str(merged))
    assert r.returncode == 0, r.stderr
    page = report.read_text()
    assert "<script src=" not in page and "Plotly.newPlot" in page  # self-contained
    assert page.count("Plotly.newPlot") == 3
    with traceaug.load(a, progress=False, full=True) as ta, \
            traceaug.load(b, progress=False, full=True) as tb, \
            traceaug.load(merged, progress=False, full=True) as tm:
        def counts(t):
            return t.query("SELECT (SELECT COUNT(*) FROM slice) AS s, (SELECT COUNT(*) FROM flow) AS f")
        ca, cb, cm = counts(ta), counts(tb), counts(tm)
        assert cm["s"][0] == ca["s"][0] + cb["s"][0]
        assert cm["f"][0] == ca["f"][0] + cb["f"][0]
        procs = tm.query("SELECT name FROM process WHERE name GLOB 'B: *'")["name"].tolist()
        assert "B: python" in procs
        first = tm.query("SELECT p.name, MIN(s.ts) AS t FROM slice s "
                         "JOIN thread_track tt ON s.track_id = tt.id "
                         "JOIN thread USING (utid) JOIN process p USING (upid) "
                         "WHERE s.name GLOB 'ProfilerStep#*' GROUP BY p.name GLOB 'B: *'")
        assert first["t"].nunique() == 1  # both sides' first steps start together
    assert gzip.open(merged).read(64).lstrip().startswith(b"{\"traceaug\":")


def test_step_of_picks_the_last_step_starting_at_or_before() -> None:
    """The SQL step assignment: of the steps starting at or before a timestamp, the last one
    (equal starts: the later in ts order), if its window [ts, ts + dur) holds it; else -1."""
    import numpy as np

    from traceaug.analysis.steps import step_of

    st = {"step": np.array([3, 4, 5, 7]), "ts": np.array([100, 200, 200, 500]),
          "dur": np.array([100, 50, 120, 10])}
    points = [0, 99, 100, 150, 199, 200, 249, 250, 319, 320, 499, 500, 509, 510, 10**6]
    values = ", ".join(f"({p})" for p in points)
    with traceaug.load(TESTDATA / "small_training.json", progress=False) as t:
        got = t.columns(f"WITH p(x) AS (VALUES {values}) SELECT {step_of('x', st)} AS s FROM p")
        none = t.columns(f"SELECT {step_of('1', {k: v[:0] for k, v in st.items()})} AS s")
    assert got["s"].tolist() == [-1, -1, 3, 3, 3, 5, 5, 5, 5, -1, -1, 7, 7, -1, -1]
    assert none["s"].tolist() == [-1]


def test_merged_trace_is_the_same_bytes_every_run(tmp_path: Path, monkeypatch) -> None:
    """B's processes get their names in order of appearance: string pids ("Traces", "Spans")
    once came out in a set's order, which changes with the interpreter's hash seed."""
    a = shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")
    b = shared_trace("kineto/a100_alexnet_cuda_sync.json.gz")
    outs = []
    for seed in ("1", "2", "3"):
        monkeypatch.setenv("PYTHONHASHSEED", seed)
        out = tmp_path / f"merged{seed}.json"
        r = cli("diff", str(a), str(b), "--trace", str(out))
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]
    assert outs[0].count(b'"name":"process_name","pid":"B: ') >= 2
