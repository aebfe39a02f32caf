"""traceaug against the generated traces in ``testdata/``, whose answers are known by construction.

``testdata/generate.py`` builds each trace from an explicit schedule and writes the answers
from that schedule (never through traceaug). These tests load the traces with traceaug and
check counts, exact nanosecond kernel starts, per-stream gaps, launch delays, queue depths,
flows, the overlapping kernel pair, .json/.json.gz equality, rank discovery in a directory
and the ``info`` CLI against those answers.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, TESTDATA

import traceaug

SMALL = TESTDATA / "small_training.json"
SMALL_GZ = TESTDATA / "small_training.json.gz"
RANK_DIR = TESTDATA / "rank_dir"

KIND_OF_COUNT = {"kernels": "kernel", "memcpys": "memcpy", "memsets": "memset",
                 "runtime_calls": "runtime", "cpu_ops": "cpu_op", "annotations": "annotation"}


@pytest.fixture(scope="module")
def answers() -> dict:
    return json.loads((TESTDATA / "small_training.answers.json").read_text())


@pytest.fixture(scope="module")
def rank_answers() -> dict:
    return json.loads((TESTDATA / "rank_dir.answers.json").read_text())


@pytest.fixture(scope="module", params=[SMALL, SMALL_GZ], ids=["json", "json.gz"])
def trace(request):
    t = traceaug.load(request.param, progress=False)
    t.include("traceaug.kineto")
    yield t
    t.close()


def _stream_key(device, stream) -> str:
    return f"{int(device)}:{int(stream)}"


# ----- the generator -----------------------------------------------------------------------

def test_generator_reproduces_committed_files(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("testdata_generate", TESTDATA / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    try:
        spec.loader.exec_module(module)
        module.main(tmp_path)
    finally:
        del sys.modules[spec.name]
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert made, "the generator wrote nothing"
    for rel in made:
        new, old = (tmp_path / rel).read_bytes(), (TESTDATA / rel).read_bytes()
        if rel.name.endswith(".gz"):  # compressed bytes may differ across zlib builds
            new, old = gzip.decompress(new), gzip.decompress(old)
        assert new == old, f"testdata/{rel} is stale: run python testdata/generate.py"


def test_gzip_holds_the_same_text() -> None:
    assert gzip.decompress(SMALL_GZ.read_bytes()) == SMALL.read_bytes()


def test_testdata_is_small() -> None:
    total = sum(p.stat().st_size for p in TESTDATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert total < 200_000


# ----- counts ------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [SMALL, SMALL_GZ], ids=["json", "json.gz"])
def test_info_matches_answers(path: Path, answers: dict) -> None:
    (record,) = traceaug.info(path, progress=False)
    for key in ("kernels", "memcpys", "memsets", "runtime_calls", "cpu_ops"):
        assert record[key] == answers["counts"][key], key
    assert record["profiler_steps"] == answers["profiler_steps"] == 3
    assert record["rank"] == answers["rank"] == 0
    assert record["world_size"] == answers["world_size"] == 2
    assert record["devices"] == [answers["device"]]
    assert record["streams"] == answers["streams"]
    assert record["start_ns"] == answers["start_ns"]
    assert record["end_ns"] == answers["end_ns"]
    assert record["warnings"] == []


def test_sql_counts_per_kind(trace, answers: dict) -> None:
    df = trace.query("SELECT kind, COUNT(*) AS n FROM traceaug_event GROUP BY kind")
    got = dict(zip(df["kind"], df["n"].astype(int), strict=True))
    want = {kind: answers["counts"][key] for key, kind in KIND_OF_COUNT.items()}
    assert got == want


def test_sql_kernels_per_stream(trace, answers: dict) -> None:
    df = trace.query("SELECT device, stream, COUNT(*) AS n FROM traceaug_gpu_op "
                     "WHERE kind = 'kernel' GROUP BY device, stream")
    got = {_stream_key(r.device, r.stream): int(r.n) for r in df.itertuples()}
    assert got == answers["kernels_per_stream"]


def test_sql_profiler_steps(trace, answers: dict) -> None:
    df = trace.query("SELECT name FROM traceaug_event WHERE kind = 'annotation' "
                     "AND name GLOB 'ProfilerStep#*' ORDER BY ts")
    assert list(df["name"]) == [f"ProfilerStep#{k}" for k in range(1, answers["profiler_steps"] + 1)]


# ----- exact times -------------------------------------------------------------------------

def test_kernel_starts_exact_ns(trace, answers: dict) -> None:
    df = trace.query("SELECT ts FROM traceaug_gpu_op WHERE kind = 'kernel' ORDER BY ts")
    got = [int(ts) + trace.base_ns for ts in df["ts"]]
    assert got == answers["kernel_starts_ns"]


def test_kernel_gaps_per_stream(trace, answers: dict) -> None:
    df = trace.query(
        "SELECT device, stream, gap FROM ("
        "  SELECT device, stream, ts,"
        "         ts - LAG(ts + dur) OVER (PARTITION BY device, stream ORDER BY ts) AS gap"
        "  FROM traceaug_gpu_op WHERE kind = 'kernel'"
        ") WHERE gap IS NOT NULL ORDER BY device, stream, ts")
    got: dict[str, list[int]] = {}
    for r in df.itertuples():
        got.setdefault(_stream_key(r.device, r.stream), []).append(int(r.gap))
    assert got == answers["kernel_gaps_ns"]


def test_launch_delays(trace, answers: dict) -> None:
    df = trace.query(
        "SELECT r.correlation AS corr, g.ts - r.ts AS delay FROM traceaug_event r "
        "JOIN traceaug_gpu_op g USING (correlation) WHERE r.kind = 'runtime'")
    got = {str(int(r.corr)): int(r.delay) for r in df.itertuples()}
    assert got == answers["launch_delay_ns"]


def test_queue_depth_at_launch(trace, answers: dict) -> None:
    df = trace.query(
        "WITH op AS (SELECT r.ts AS launch, g.ts AS start, g.device, r.correlation "
        "            FROM traceaug_event r JOIN traceaug_gpu_op g USING (correlation) "
        "            WHERE r.kind = 'runtime') "
        "SELECT a.correlation AS corr, "
        "  (SELECT COUNT(*) FROM op b WHERE b.device = a.device "
        "     AND b.launch < a.launch AND b.start > a.launch) AS depth "
        "FROM op a")
    got = {str(int(r.corr)): int(r.depth) for r in df.itertuples()}
    assert got == answers["queue_depth_at_launch"]


def test_span_exact_ns(trace, answers: dict) -> None:
    df = trace.query("SELECT MIN(ts) AS start, MAX(ts + dur) AS end FROM traceaug_event")
    assert int(df["start"][0]) + trace.base_ns == answers["start_ns"]
    assert int(df["end"][0]) + trace.base_ns == answers["end_ns"]


# ----- copies ------------------------------------------------------------------------------

def test_memcpy_bytes_and_bandwidth(trace, answers: dict) -> None:
    df = trace.query(
        "SELECT dur, extract_arg(arg_set_id, 'args.bytes') AS bytes, "
        "extract_arg(arg_set_id, 'args.memory bandwidth (GB/s)') AS bw "
        "FROM traceaug_event WHERE kind = 'memcpy'")
    assert len(df) == answers["counts"]["memcpys"]
    assert int(df["bytes"].sum()) == answers["memcpy_bytes_total"]
    for r in df.itertuples():
        assert r.bw == pytest.approx(int(r.bytes) / int(r.dur))  # bytes per ns is GB/s
    assert sorted(set(df["bw"].astype(float))) == answers["memcpy_bandwidth_gbps"]


# ----- overlap lane and flows --------------------------------------------------------------

def test_overlapping_pair_is_kept(trace, answers: dict) -> None:
    pair = answers["overlap_pair"]
    first, second = pair["first"], pair["second"]
    df = trace.query(
        "SELECT g.correlation, g.ts, g.dur, g.device, g.stream, e.lane "
        "FROM traceaug_gpu_op g JOIN traceaug_event e USING (id) "
        f"WHERE g.correlation IN ({first['correlation']}, {second['correlation']}) ORDER BY g.ts")
    assert len(df) == 2
    assert [int(c) for c in df["correlation"]] == [first["correlation"], second["correlation"]]
    assert [int(ts) + trace.base_ns for ts in df["ts"]] == [first["start_ns"], second["start_ns"]]
    ends = [int(ts) + int(dur) + trace.base_ns for ts, dur in zip(df["ts"], df["dur"], strict=True)]
    assert ends == [first["end_ns"], second["end_ns"]]
    assert {int(d) for d in df["device"]} == {pair["device"]}
    assert {int(s) for s in df["stream"]} == {pair["stream"]}
    assert int(df["lane"][0]) == 0 and int(df["lane"][1]) >= 1  # the later one on an overlap lane
    meta = trace.query("SELECT lane_slices FROM traceaug_meta")
    assert int(meta["lane_slices"][0]) == 1


@pytest.fixture(scope="module", params=[SMALL, SMALL_GZ], ids=["json", "json.gz"])
def full_trace(request):
    """A full load: every arg and the flow events (an analysis load keeps neither)."""
    t = traceaug.load(request.param, progress=False, full=True)
    t.include("traceaug.kineto")
    yield t
    t.close()


def test_every_gpu_op_has_its_flow(full_trace, answers: dict) -> None:
    trace = full_trace
    df = trace.query(
        "SELECT r.correlation AS out_corr, g.correlation AS in_corr, r.kind AS out_kind, "
        "g.kind AS in_kind FROM flow f "
        "JOIN traceaug_event r ON r.id = f.slice_out "
        "JOIN traceaug_gpu_op g ON g.id = f.slice_in")
    assert len(df) == answers["flows"]
    assert (df["out_kind"] == "runtime").all()
    assert (df["out_corr"] == df["in_corr"]).all()
    assert sorted(int(c) for c in df["in_corr"]) == sorted(int(c) for c in answers["launch_delay_ns"])


# ----- .json vs .json.gz -------------------------------------------------------------------

QUERIES = [
    "SELECT id, ts, dur, name, category, depth, kind, pid, tid, lane, device, stream, correlation "
    "FROM traceaug_event ORDER BY ts, id",
    "SELECT id, ts, dur, name, kind, correlation, device, stream FROM traceaug_gpu_op ORDER BY ts, id",
    "SELECT slice_out, slice_in FROM flow ORDER BY slice_out, slice_in",
    # every non-zero stat except timings (parse_trace_duration_ns varies from run to run)
    "SELECT name, idx, value FROM stats WHERE value > 0 AND name NOT GLOB '*duration*' "
    "ORDER BY name, idx",
]


@pytest.mark.parametrize("sql", QUERIES, ids=["event", "gpu_op", "flow", "stats"])
def test_json_and_gz_give_identical_results(sql: str) -> None:
    frames, bases = [], []
    for path in (SMALL, SMALL_GZ):
        with traceaug.load(path, progress=False, full=True) as t:
            t.include("traceaug.kineto")
            frames.append(t.query(sql))
            bases.append(t.base_ns)
    assert bases[0] == bases[1]
    assert len(frames[0]) > 0 or sql.startswith("SELECT name, idx")
    pd.testing.assert_frame_equal(frames[0], frames[1])


# ----- a directory of ranks ----------------------------------------------------------------

def test_rank_dir_ranks_and_ignored_output(rank_answers: dict) -> None:
    records = traceaug.info(RANK_DIR, progress=False)
    assert [r["rank"] for r in records] == rank_answers["ranks"] == [0, 1]
    names = [Path(r["file"]).name for r in records]
    assert names == [rank_answers["files"][str(r)] for r in rank_answers["ranks"]]
    for ignored in rank_answers["ignored"]:
        assert (RANK_DIR / ignored).exists()
        assert ignored not in names
    for r in records:
        want = rank_answers["per_rank"][str(r["rank"])]
        assert r["world_size"] == want["world_size"] == 2
        assert r["start_ns"] == want["start_ns"]
        assert r["end_ns"] == want["end_ns"]
        for key in ("kernels", "memcpys", "memsets", "runtime_calls", "cpu_ops"):
            assert r[key] == want["counts"][key], (r["rank"], key)


def test_rank_dir_single_rank(rank_answers: dict) -> None:
    (record,) = traceaug.info(RANK_DIR, rank=1, progress=False)
    assert record["rank"] == 1
    assert Path(record["file"]).name == rank_answers["files"]["1"]
    assert record["kernels"] == rank_answers["per_rank"]["1"]["counts"]["kernels"]


# ----- the CLI -----------------------------------------------------------------------------

def test_cli_info_json(answers: dict) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "traceaug", "info", "testdata/small_training.json", "--format", "json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kernels"] == answers["counts"]["kernels"]
    assert data["start_ns"] == answers["start_ns"]
