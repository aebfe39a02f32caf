"""`traceaug counters`: series against the raw events and HTA, splicing, errors, directories."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import zlib
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TESTDATA, require_hta, shared_trace
from conftest import run_cli as cli
from counters_raw import bandwidth_series, queue_series
from rawjson import ns

import traceaug
from traceaug.cli import main
from traceaug.read.marker import find_marker
from traceaug.read.source import read_all

A100 = "kineto/a100_rank0_of16_6streams.json.gz"


def counters(src: Path, dst: Path, *extra: str) -> subprocess.CompletedProcess:
    result = cli("counters", str(src), str(dst), *extra)
    assert result.returncode == 0, result.stderr
    return result


def added_events(path: Path) -> list[dict]:
    text = read_all(path)
    return [e for e in json.loads(text, parse_float=Decimal)["traceEvents"] if e.get("ph") == "C"]


def our_series(events: list[dict], name: str) -> dict:
    """(pid, arg key) -> [(ts_ns, value)] of traceaug-style counter events."""
    out: dict = {}
    for e in events:
        if e["name"] == name:
            ((key, value),) = e["args"].items()
            out.setdefault((e["pid"], key), []).append((ns(e["ts"]), value))
    return out


def strip_added(out: bytes, events: int) -> bytes:
    """OUT without the marker key and the spliced events."""
    start, end, _ = find_marker(out[:4096])
    out = out[:start] + out[end:]
    return re.sub(rb'\[(\{"ph":"C"[^\n]*?\}\},){%d}' % events, b"[", out, count=1)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_output_is_input_plus_counters(tmp_path: Path, suffix: str) -> None:
    src = shared_trace(A100)
    out = tmp_path / f"out{suffix}"
    counters(src, out, "--keep-bytes")  # by default the UI's lost events change (test_visible.py)
    raw_out = read_all(out)
    assert out.read_bytes()[:2] == (b"\x1f\x8b" if suffix == ".json.gz" else raw_out[:2])
    n = len(added_events(out))
    assert n == 16680
    assert strip_added(raw_out, n) == read_all(src)  # every original byte, in place
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary file left
    if suffix == ".json.gz":  # its two deflated parts make one member, as gzip writes
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        assert d.decompress(out.read_bytes()) == raw_out and d.eof and d.unused_data == b""


def test_series_equal_the_raw_events(tmp_path: Path) -> None:
    src = shared_trace(A100)
    out = tmp_path / "out.json"
    counters(src, out)
    events = added_events(out)
    queue = {(pid, int(k.split()[1])): [(t, int(v)) for t, v in pts]
             for (pid, k), pts in our_series(events, "Queue length").items()}
    assert queue == queue_series(src)
    assert len(queue) == 6
    got_bw = our_series(events, "Bandwidth (GB/s)")
    want_bw = bandwidth_series(src)
    assert set(got_bw) == set(want_bw)
    for key, points in want_bw.items():
        have = got_bw[key]
        assert [t for t, _ in have] == [t for t, _ in points], key
        assert all(abs(float(a) - (0.0 if abs(b) < 1e-9 else b)) < 1e-6
                   for (_, a), (_, b) in zip(have, points, strict=True))


def test_output_loads_back_with_its_tracks(tmp_path: Path) -> None:
    src = shared_trace(A100)
    out = tmp_path / "out.json.gz"
    counters(src, out)
    with traceaug.load(out, progress=False) as t:
        tracks = t.query("SELECT ct.name, COUNT(*) AS n FROM counter c "
                         "JOIN counter_track ct ON c.track_id = ct.id GROUP BY 1 ORDER BY 1")
        lost = t.query("SELECT name FROM stats WHERE value > 0 AND severity IN ('error', 'data_loss')")
    got = dict(zip(tracks["name"], tracks["n"], strict=True))
    assert got == {
        "Bandwidth (GB/s) DtoD": 2560, "Bandwidth (GB/s) DtoH": 60,
        "Bandwidth (GB/s) HtoD": 160, "Bandwidth (GB/s) Memset": 554,  # short: the UI cuts none
        # padded to one width: the UI lists them by name, so in stream order
        "Queue length stream  25": 70, "Queue length stream  27": 735, "Queue length stream 285": 40,
        "Queue length stream 363": 40, "Queue length stream   7": 12391, "Queue length stream  84": 70,
    }
    assert lost.empty


def _at_each_ts(points: list[tuple[int, float]]) -> dict:
    """The value after all changes at each timestamp: the last one written for it (the
    running sum there does not depend on how ties were ordered)."""
    out: dict = {}
    for ts, value in points:
        out[ts] = value
    return out


def test_hta_style_equals_hta(tmp_path: Path) -> None:
    """Same change points and values as HTA's generate_trace_with_counters (ties aside)."""
    require_hta()
    from hta.trace_analysis import TraceAnalysis

    src = shared_trace(A100)
    ours = tmp_path / "ours.json"
    counters(src, ours, "--style", "hta")
    hta_dir = tmp_path / "hta"
    hta_dir.mkdir()
    (hta_dir / src.name).write_bytes(src.read_bytes())
    TraceAnalysis(trace_dir=str(hta_dir)).generate_trace_with_counters()
    (theirs,) = [p for p in hta_dir.iterdir() if "with_counters" in p.name]
    raw = json.loads(read_all(src))["traceEvents"]
    # HTA drops everything from the last ProfilerStep on: compare before it.
    last_step = max(e["ts"] for e in raw if str(e.get("name", "")).startswith("ProfilerStep#"))

    def series(path: Path) -> dict:
        out: dict = {}
        for e in json.loads(read_all(path))["traceEvents"]:
            if e.get("ph") == "C" and e["ts"] < last_step:
                ((arg, value),) = e["args"].items()
                out.setdefault((e["name"], e.get("id"), arg), []).append((e["ts"], value))
        return out  # in file order: within a series, the order its values were summed

    mine, hta = series(ours), series(theirs)
    assert set(mine) == set(hta)
    for key in hta:
        a, b = _at_each_ts(mine[key]), _at_each_ts(hta[key])
        assert a.keys() == b.keys(), key
        assert all(abs(a[t] - b[t]) < 1e-6 for t in a), key
    assert sum(len(v) for v in hta.values()) > 10000


def test_known_answers_on_generated_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--summary-only writes nothing: not beside the input, not in the working directory."""
    src = tmp_path / "small_training.json"
    src.write_bytes((TESTDATA / "small_training.json").read_bytes())
    answers = json.loads((TESTDATA / "small_training.answers.json").read_text())
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(main, ["counters", src.name, "--summary-only", "--format", "json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    (htod,) = [r for r in summary["bandwidth"] if r["kind"] == "HtoD"]
    assert htod["bytes"] == answers["memcpy_bytes_total"] == 3 * 4 * 2**20
    assert htod["peak_gbps"] == pytest.approx(16.0)
    assert htod["mean_gbps_busy"] == pytest.approx(16.0)
    assert htod["busy_ns"] == 3 * 262_144
    queues = {r["stream"]: r for r in summary["queue"]}
    expected = queue_series(src)
    for (_device, stream), points in expected.items():
        assert queues[stream]["max_queued"] == max(v for _, v in points)
    assert summary["outputs"] == [] and out.stderr == ""
    assert [p.name for p in tmp_path.iterdir()] == [src.name]
    assert src.read_bytes() == (TESTDATA / "small_training.json").read_bytes()


@pytest.mark.parametrize("rel", [
    "kineto/b200_rank0_of8_allgather.json.gz", "kineto/h100_qwen05b_inference.json.gz",
    "kineto/v100_ns_resolution.json.gz", "kineto/mi250_rocm62.json.gz",
    "kineto/diff/v100_resnet50_2021/a/worker0.1623143089861.pt.trace.json.gz",
    "kineto/vllm_decode_cudagraph.json.gz",
])
def test_works_across_traces(tmp_path: Path, rel: str) -> None:
    src = shared_trace(rel)
    out = tmp_path / "out.json.gz"
    counters(src, out)
    events = added_events(out)
    want = queue_series(src)
    got = {(pid, int(k.split()[1])): [(t, int(v)) for t, v in pts]
           for (pid, k), pts in our_series(events, "Queue length").items()}
    assert {k[1] for k in got} == {k[1] for k in want}
    assert sorted(got.values()) == sorted(want.values())
    with traceaug.load(out, progress=False) as t:
        n = t.query("SELECT COUNT(*) AS n FROM counter")["n"][0]
    assert n == len(events)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])  # .gz: its copy began, then stopped
def test_cpu_only_trace_is_refused(tmp_path: Path, suffix: str) -> None:
    src = shared_trace("kineto/cpu_only_gloo.json.gz")
    out = tmp_path / f"out{suffix}"
    result = cli("counters", str(src), str(out))
    assert result.returncode == 1
    assert "no GPU kernels" in result.stderr and str(src) in result.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_refuses_to_overwrite_input(tmp_path: Path) -> None:
    src = tmp_path / "t.json"
    src.write_bytes((TESTDATA / "small_training.json").read_bytes())
    before = src.read_bytes()
    result = cli("counters", str(src), str(src))
    assert result.returncode == 1 and "is the input file" in result.stderr
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_directory_in_directory_out(tmp_path: Path) -> None:
    src = shared_trace("kineto/multi_rank_sampled")
    out = tmp_path / "out"
    counters(src, out, "--series", "queue")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["rank-0.json.gz", "rank-1.json.gz"]
    for name in names:
        events = added_events(out / name)
        assert events and all(e["name"] == "Queue length" for e in events)
        assert gzip.open(out / name).read(1) == b"{"
    again = cli("info", str(out), "--format", "json")  # its outputs alone read back, by rank
    assert again.returncode == 0, again.stderr
    assert [r["rank"] for r in json.loads(again.stdout)["rows"]] == [0, 1]


def test_counter_timestamps_are_exact_microsecond_text() -> None:
    import numpy as np

    from traceaug.rewrite.events import us_bytes

    ns = np.array([0, 1, 999, 1000, 1001, 1_683_564_901_558_837_000, 1_683_564_901_558_837_123])
    assert us_bytes(ns) == [b"0", b"0.001", b"0.999", b"1", b"1.001", b"1683564901558837",
                            b"1683564901558837.123"]
    assert us_bytes(np.array([], dtype=np.int64)) == []
