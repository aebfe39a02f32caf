"""Figures on traces shaped like the public ones that went wrong (issue 23 item 6, 24 item 10):
a user-annotation operator for ``patterns``, MTIA launches and DMA ops, memsets without a
byte count, a stream with one op, kernels no call launched. Each trace is built here, and
each expected figure is read from its raw JSON, never from traceaug."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from rawjson import load_raw, ns

import traceaug
import traceaug.analyses as ta
from traceaug.cli import main

BASE = 1_712_198_313_370_000  # epoch µs
HOST = {"pid": 100, "tid": 100}


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def write(path: Path, events: list[dict]) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def csv_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


# --- patterns --operator on a user_annotation range (HTA's Optimizer.step#SGD.step) ---------

OPT = "Optimizer.step#SGD.step"
KERNELS = ("multi_tensor_apply_kernel", "vectorized_elementwise_kernel", "reduce_kernel",
           "elementwise_kernel")


def optimizer_trace(path: Path, steps: int = 3) -> Path:
    """``steps`` ProfilerSteps, each with an aten::mm (one kernel) and then the optimizer's
    annotation range holding one CPU op per kernel of KERNELS, each launching its kernel."""
    ev, corr = [], 0
    for i in range(steps):
        t = BASE + i * 10_000
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", **HOST,
                   "ts": t, "dur": 9_000})
        corr += 1
        ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", **HOST, "ts": t + 10, "dur": 50},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **HOST,
                "ts": t + 20, "dur": 10, "args": {"correlation": corr}},
               {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 100,
                "dur": 300, "args": {"correlation": corr, "device": 0, "stream": 7}}]
        ev.append({"ph": "X", "cat": "user_annotation", "name": OPT, **HOST, "ts": t + 1000,
                   "dur": 2000})
        for j, name in enumerate(KERNELS):
            corr += 1
            c0 = t + 1010 + 100 * j
            ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::_foreach_add_", **HOST, "ts": c0,
                    "dur": 50},
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **HOST,
                    "ts": c0 + 10, "dur": 10, "args": {"correlation": corr}},
                   {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                    "ts": t + 3000 + 200 * j, "dur": 100 + 10 * j + i,
                    "args": {"correlation": corr, "device": 0, "stream": 7}}]
    return write(path, ev)


def annotation_instances(path: Path, name: str) -> list[tuple[int, list[str]]]:
    """From the raw JSON: each range named ``name`` and the GPU ops launched by calls that
    start inside it: (summed GPU ns, kernel names in GPU start order)."""
    events = [e for e in load_raw(path)["traceEvents"] if e.get("ph") == "X"]
    launch = {e["args"]["correlation"]: ns(e["ts"]) for e in events if e["cat"] == "cuda_runtime"}
    out = []
    for r in (e for e in events if e["name"] == name):
        lo, hi = ns(r["ts"]), ns(r["ts"]) + ns(r["dur"])
        ops = sorted((ns(e["ts"]), e["name"], ns(e["dur"])) for e in events
                     if e["cat"] == "kernel" and lo <= launch[e["args"]["correlation"]] < hi)
        out.append((sum(o[2] for o in ops), [o[1] for o in ops]))
    return out


def test_patterns_operator_names_a_user_annotation(tmp_path: Path) -> None:
    """``--operator`` on a CPU-side annotation range finds every instance with its whole
    kernel sequence (it found none: the annotation was not a CPU op to it)."""
    src = optimizer_trace(tmp_path / "opt.json")
    expected = annotation_instances(src, OPT)
    assert len(expected) == 3 and all(seq == list(KERNELS) for _, seq in expected)
    res = cli("patterns", str(src), str(tmp_path / "out.json"), "--operator", OPT, "--format", "csv")
    assert res.exit_code == 0, res.output
    whole = [r for r in csv_rows(res.stdout) if r["scope"] == "whole"]
    assert len(whole) == 1
    assert whole[0]["operators"] == OPT
    assert int(whole[0]["count"]) == len(expected)
    assert int(whole[0]["length"]) == len(KERNELS)
    assert int(whole[0]["gpu_total_ns"]) == sum(g for g, _ in expected)


def test_patterns_default_instances_stay_cpu_ops(tmp_path: Path) -> None:
    """Without ``--operator`` the instances are the top-level CPU ops, never the annotations
    (ProfilerStep#N would own every kernel): aten::mm's one kernel, the optimizer's four ops."""
    src = optimizer_trace(tmp_path / "opt.json")
    found = traceaug.patterns(src, min_len=1)
    patterns, occ = found.patterns, found.occurrences
    whole = patterns[patterns["scope"] == "whole"]
    assert set(whole["operators"]) == {"aten::mm", "aten::_foreach_add_"}
    assert OPT not in set(occ["operator"].dropna())


# --- patterns with GPU ops no call launched (issue 24 item 10) ------------------------------

def test_patterns_unlaunched_kernels(tmp_path: Path) -> None:
    """Kernels without any runtime call (the issue's one-kernel trace, and a stream repeating
    A B C three times): no IndexError; the stream pattern is found with its GPU time."""
    one = tmp_path / "one.json"
    one.write_text('{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,'
                   '"ts":1712198313370000.0,"dur":5,"args":{"device":0,"stream":7}}]}')
    res = cli("patterns", str(one), str(tmp_path / "one_out.json"), "--format", "csv")
    assert res.exit_code == 0, res.output
    assert csv_rows(res.stdout) == []
    assert (tmp_path / "one_out.json").exists()

    ev = [{"ph": "X", "cat": "kernel", "name": "ABC"[i % 3], "pid": 0, "tid": 7,
           "ts": BASE + 10 * i, "dur": 5 + i, "args": {"device": 0, "stream": 7}}
          for i in range(9)]
    src = write(tmp_path / "abc.json", ev)
    res = cli("patterns", str(src), str(tmp_path / "abc_out.json"), "--format", "json")
    assert res.exit_code == 0, res.output
    rows = orjson.loads(res.stdout)["patterns"] if isinstance(orjson.loads(res.stdout), dict) \
        else orjson.loads(res.stdout)
    [row] = rows
    assert (row["scope"], row["kernels"], row["count"]) == ("stream", "A | B | C", 3)
    assert row["gpu_total_ns"] == sum(ns(e["dur"]) for e in load_raw(src)["traceEvents"])
    assert row["cpu_total_ns"] == 0  # no launch: no CPU time


# --- MTIA: launches, DMA ops as copies ------------------------------------------------------

MTIA_LAUNCH = "runFunction - job_prep_and_submit_for_execution"


def mtia_trace(path: Path) -> Path:
    """HTA's MTIA layout: ``mtia_runtime`` launches with a correlation id, CCP kernels on
    device 9 (no ``device`` arg: the pid) carrying it and a ``stream``, DMA requests with a
    size and direction but no correlation, on their own thread."""
    ev = [{"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "MTIA 9"}}]
    for i in range(6):
        t = BASE + 1000 * i
        ev += [{"ph": "X", "cat": "mtia_runtime", "name": MTIA_LAUNCH, **HOST, "ts": t,
                "dur": 30, "args": {"correlation": 10 + i}},
               {"ph": "X", "cat": "mtia_ccp_events", "name": f"fc-dtype_Float{i % 2}", "pid": 9,
                "tid": 408, "ts": t + 100 + 150 * (i % 3), "dur": 80,
                "args": {"correlation": 10 + i, "stream": 102 + i % 2, "packet_ptr": i}},
               {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "pid": 9, "tid": 4,
                "ts": t + 600, "dur": 8,
                "args": {"direction": "DEVICE_TO_HOST", "size": 16, "packet_ptr": 100 + i}}]
    return write(path, ev)


def assert_queue_summary(expected: dict, src: Path, *args: str) -> None:
    """``counters SRC ARGS --format json`` prints, per stream, the raw JSON's queue summary."""
    res = cli("counters", str(src), *args, "--format", "json")
    assert res.exit_code == 0, res.output
    got = {(r["device"], r["stream"]): r for r in orjson.loads(res.stdout)["queue"]}
    assert set(got) == set(expected)
    for key, want in expected.items():
        assert got[key]["max_queued"] == want["max_queued"]
        for metric in ("mean_queued", "empty_pct", "full_ns"):
            assert got[key][metric] == pytest.approx(want[metric], rel=1e-12, abs=1e-12), (key, metric)


def test_counters_queue_on_mtia(tmp_path: Path) -> None:
    """MTIA launches feed the queue-length counters (there were none), each stream's summary
    equal to the raw JSON's (``counters_raw.queue_summary``)."""
    from counters_raw import queue_summary

    src = mtia_trace(tmp_path / "mtia.json")
    expected = queue_summary(src)
    assert set(expected) == {(9, 102), (9, 103)}
    assert_queue_summary(expected, src, str(tmp_path / "out.json"))
    added = [e for e in orjson.loads((tmp_path / "out.json").read_bytes())["traceEvents"]
             if e.get("ph") == "C" and e.get("pid") == 9]
    assert len(added) >= 2 * len(expected)


def test_info_and_kernels_agree_on_mtia_dma(tmp_path: Path) -> None:
    """``info`` counts MTIA's DMA requests as copies, as ``kernels`` types them (memory)."""
    src = mtia_trace(tmp_path / "mtia.json")
    raw = [e for e in load_raw(src)["traceEvents"] if e.get("cat") == "mtia_ccp_events"]
    dma = sum(e["name"] == "dma_request" for e in raw)
    res = cli("info", str(src), "--format", "json")
    assert res.exit_code == 0, res.output
    info = orjson.loads(res.stdout)
    assert (info["memcpys"], info["kernels"]) == (dma, len(raw) - dma)
    table = ta.kernels(src)
    memory = table[table["type"] == "memory"]
    assert list(memory["name"]) == ["dma_request"]
    assert int(memory["count"].sum()) == info["memcpys"]


# --- memsets without a byte count -----------------------------------------------------------

def test_no_bandwidth_track_for_memsets_without_bytes(tmp_path: Path) -> None:
    """A memset with neither ``bytes`` nor a bandwidth arg has no rate: no all-zero
    ``Memset`` track; the copy beside it keeps its own (bytes / ns from the raw JSON)."""
    ev = [{"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7,
           "ts": BASE + 10 * i, "dur": 4, "args": {"device": 0, "stream": 7}} for i in range(3)]
    ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0,
               "tid": 7, "ts": BASE + 100, "dur": 2, "args": {"device": 0, "stream": 7,
                                                               "bytes": 4000}})
    src = write(tmp_path / "memset.json", ev)
    res = cli("counters", str(src), str(tmp_path / "out.json"), "--format", "json")
    assert res.exit_code == 0, res.output
    bandwidth = orjson.loads(res.stdout)["bandwidth"]
    assert [r["kind"] for r in bandwidth] == ["HtoD"]
    assert bandwidth[0]["peak_gbps"] == 4000 / ns(ev[-1]["dur"])
    names = {e["name"] for e in orjson.loads((tmp_path / "out.json").read_bytes())["traceEvents"]
             if e.get("ph") == "C"}
    assert not any("Memset" in n for n in names), names


# --- gap statistics of a stream without gaps ------------------------------------------------

def test_gap_statistics_missing_without_gaps(tmp_path: Path) -> None:
    """A stream with one op has no gap: mean, median, min and max are missing (empty in CSV,
    null in JSON, NaN / <NA> in pandas), not 0; a stream with one 5 µs gap shows 5000 ns."""
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": s, "ts": BASE + t, "dur": 5,
           "args": {"device": 0, "stream": s}} for s, t in ((7, 0), (8, 0), (8, 10))]
    src = write(tmp_path / "gaps.json", ev)
    gap = ns(ev[2]["ts"]) - ns(ev[1]["ts"]) - ns(ev[1]["dur"])
    res = cli("gaps", str(src), "--format", "json")
    assert res.exit_code == 0, res.output
    per_stream = {r["stream"]: r for r in orjson.loads(res.stdout)["gaps per stream"]}
    stats = [k for k in per_stream[7] if k.split("_")[0] in ("mean", "median", "min", "max")]
    assert len(stats) == 4
    assert [per_stream[7][k] for k in stats] == [None] * 4
    assert [per_stream[8][k] for k in stats] == [gap] * 4
    res = cli("gaps", str(src), "--format", "csv")
    head, seven = res.stdout.splitlines()[1:3]
    row = dict(zip(head.split(","), seven.split(",")))
    assert [row[k] for k in stats] == [""] * 4
    frame = ta.stream_gaps(src).set_index("stream")
    assert frame.loc[7, stats].isna().all()
    assert frame.loc[8, stats].tolist() == [gap] * 4


def test_patterns_nsys_without_launches(tmp_path: Path) -> None:
    """An nsys export with no runtime table, or with NULL correlation ids, gives the stream
    patterns of its GPU ops (it raised IndexError); no launch means no CPU time."""
    import shutil
    import sqlite3

    from conftest import shared_trace

    src = shared_trace("nsys/a100_saxpy_mpi_rank0.sqlite")
    for name, sql in (("norun", "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME"),
                      ("nullcorr", "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = NULL")):
        path = tmp_path / f"{name}.sqlite"
        shutil.copy(src, path)
        with sqlite3.connect(path) as db:
            db.execute(sql)
        db.close()
        res = cli("patterns", str(path), str(tmp_path / f"{name}.json"), "--format", "json")
        assert res.exit_code == 0, res.output
        rows = orjson.loads(res.stdout)
        rows = rows["patterns"] if isinstance(rows, dict) else rows
        assert rows and {r["scope"] for r in rows} == {"stream"}
        assert all(r["cpu_total_ns"] == 0 for r in rows)


# --- a directory of traceaug outputs reads back (issue 23 item 10) --------------------------

def test_counters_output_directory_reads_back(tmp_path: Path) -> None:
    """``counters DIR OUT/`` writes one output per rank; OUT/ holds nothing else, so it is
    read as those ranks (it was refused: "written by traceaug are skipped"), each with the
    kernels of its input's raw JSON. Beside its inputs an output is still skipped."""
    from conftest import TESTDATA

    src = TESTDATA / "rank_dir"
    out = tmp_path / "out"
    assert cli("counters", str(src), f"{out}/").exit_code == 0
    res = cli("info", str(out), "--format", "json")
    assert res.exit_code == 0, res.output
    records = orjson.loads(res.stdout)["rows"]
    raw = {}
    for f in src.iterdir():
        data = load_raw(f)
        if "traceaug" not in data:
            raw[data["distributedInfo"]["rank"]] = sum(
                e.get("cat") == "kernel" for e in data["traceEvents"])
    assert {r["rank"]: r["kernels"] for r in records} == raw
    assert all(Path(r["file"]).parent == out for r in records)
    beside = orjson.loads(cli("info", str(src), "--format", "json").stdout)["rows"]
    assert {Path(r["file"]).name for r in beside} == {
        f.name for f in src.iterdir() if "traceaug" not in load_raw(f)}


def test_open_names_the_export_not_its_conversion(tmp_path: Path) -> None:
    """``open run.sqlite`` announces and serves ``run.sqlite`` (it printed the temporary
    conversion's name, which README says never happens); the URL gives the converted JSON,
    with the export's kernel count (read with sqlite3)."""
    import re
    import shutil
    import signal
    import sqlite3
    import subprocess
    import sys
    import urllib.request

    from conftest import shared_trace

    src = tmp_path / "run.sqlite"
    shutil.copy(shared_trace("nsys/a100_saxpy_mpi_rank0.sqlite"), src)
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as db:
        kernels = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    db.close()
    proc = subprocess.Popen([sys.executable, "-m", "traceaug", "open", str(src), "--no-browser"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        m = re.fullmatch(r"Perfetto UI with run\.sqlite: (http://127\.0\.0\.1:\d+)/#!/\?url=([^&\s]+)&.*",
                         line.strip())
        assert m, line
        url = urllib.request.unquote(m.group(2))
        assert url == f"{m.group(1)}/trace/run.sqlite", url
        with urllib.request.urlopen(url, timeout=30) as r:
            events = orjson.loads(r.read())["traceEvents"]
        assert sum(e.get("cat") == "kernel" for e in events) == kernels
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_counters_queue_summary_full_queue(tmp_path: Path) -> None:
    """The queue summary against the raw JSON (``counters_raw.queue_summary``, sharing no code
    with traceaug): 1,100 launches run ahead of their kernels on stream 7, so the queue passes
    1,024 (time at a full queue > 0); stream 8 has one op at a time."""
    from counters_raw import FULL_QUEUE, queue_summary

    ev = []
    for i in range(1100):
        ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **HOST,
                "ts": BASE + i, "dur": 1, "args": {"correlation": i + 1}},
               {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": BASE + 2000 + 2 * i,
                "dur": 1, "args": {"correlation": i + 1, "device": 0, "stream": 7}}]
    for j in range(3):
        c = 5000 + j
        ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 101,
                "ts": BASE + 300 * j, "dur": 2, "args": {"correlation": c}},
               {"ph": "X", "cat": "kernel", "name": "k8", "pid": 0, "tid": 8, "ts": BASE + 300 * j + 50,
                "dur": 20, "args": {"correlation": c, "device": 0, "stream": 8}}]
    src = write(tmp_path / "full.json", ev)
    expected = queue_summary(src)
    assert expected[(0, 7)]["max_queued"] > FULL_QUEUE and expected[(0, 7)]["full_ns"] > 0
    assert expected[(0, 8)]["max_queued"] == 1
    assert_queue_summary(expected, src, "--summary-only")
