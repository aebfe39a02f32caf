"""No event lost, no precision lost: every real Kineto trace, against its raw JSON."""

from __future__ import annotations

import gzip
import shutil

import pytest
from conftest import kineto_files, shared_trace
from rawjson import KINDS, events_by_kind

import traceaug


def engine_events(trace: traceaug.Trace) -> dict[str, list[tuple[int, int]]]:
    trace.include("traceaug.kineto")
    df = trace.query(
        "SELECT kind, ts + (SELECT time_base_ns FROM traceaug_meta) AS ts, dur FROM traceaug_event "
        f"WHERE kind IN ({', '.join(repr(k) for k in KINDS)})"
    )
    out: dict[str, list[tuple[int, int]]] = {}
    for kind, group in df.groupby("kind"):
        out[kind] = sorted(zip(group["ts"].astype("int64").tolist(),
                               group["dur"].astype("int64").tolist(), strict=True))
    return out


@pytest.mark.parametrize("rel", kineto_files() or ["kineto/(absent)"])
def test_every_event_exact(rel: str) -> None:
    path = shared_trace(rel)
    expected = events_by_kind(path)
    with traceaug.load(path, progress=False) as trace:
        got = engine_events(trace)
        lost = trace.query(
            "SELECT name, value FROM stats WHERE value > 0 AND severity IN ('error', 'data_loss')")
    for kind in KINDS:
        exp, have = expected.get(kind, []), got.get(kind, [])
        assert len(have) == len(exp), f"{kind}: {len(have)} in SQL, {len(exp)} in the JSON"
        assert have == exp, f"{kind}: timestamps/durations differ from the raw JSON"
    assert lost.empty, lost.to_dict("records")


def test_known_losses_are_recovered() -> None:
    """The events Perfetto drops on its own are present, on overlap lanes."""
    path = shared_trace("kineto/b200_rank0_of8_allgather.json.gz")
    with traceaug.load(path, progress=False) as trace:
        trace.include("traceaug.kineto")
        kernels = trace.query("SELECT COUNT(*) AS n, SUM(lane > 0) AS laned FROM traceaug_event "
                              "WHERE kind = 'kernel'")
        streams = trace.query("SELECT DISTINCT device, stream FROM traceaug_gpu_op")
    assert kernels["n"][0] == 768
    assert kernels["laned"][0] == 38  # exactly the 38 kernels Perfetto drops by itself
    assert streams.values.tolist() == [[0, 7]]  # lanes fold back into their stream


def test_ns_resolution_trace_keeps_every_nanosecond() -> None:
    path = shared_trace("kineto/v100_ns_resolution.json.gz")
    expected = events_by_kind(path)["kernel"]
    assert len(expected) == 4350
    with traceaug.load(path, progress=False) as trace:
        got = engine_events(trace)["kernel"]
    assert sum(a == b for a, b in zip(got, expected, strict=True)) == 4350


def test_gz_and_plain_json_give_identical_results(tmp_path) -> None:
    gz = shared_trace("kineto/b200_rank0_of8_allgather.json.gz")
    plain = tmp_path / "b200.json"
    with gzip.open(gz, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    sql = "SELECT ts, dur, name, category, depth FROM slice ORDER BY ts, dur, name, depth"
    with traceaug.load(gz, progress=False) as a, traceaug.load(plain, progress=False) as b:
        assert a.base_ns == b.base_ns
        left, right = a.query(sql), b.query(sql)
    assert len(left) == 22355
    assert left.equals(right)


def test_2021_schema_pair_loads() -> None:
    for side in ("a", "b"):
        folder = shared_trace(f"kineto/diff/v100_resnet50_2021/{side}")
        (record,) = traceaug.info(folder, progress=False)
        assert record["kernels"] == 8772
        assert record["memsets"] == 312
        assert record["memcpys"] == 12
        assert record["runtime_calls"] == 11923
        assert record["cpu_ops"] == 23646
        assert record["streams"] == ["0:7"]
        assert record["warnings"] == []


def test_multi_rank_directory() -> None:
    folder = shared_trace("kineto/multi_rank_sampled")
    records = traceaug.info(folder, progress=False)
    assert [r["rank"] for r in records] == [0, 1]
    assert all(r["world_size"] == 128 for r in records)
    assert records[0]["kernels"] == 1154
    assert len(records[0]["streams"]) == 5
