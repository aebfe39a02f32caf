"""The rewriter pipeline: load kinds, event builders reloaded in the engine, chaining,
rank selection, output paths and the public ``traceaug.counters``."""

from __future__ import annotations

import gzip
import json
import shutil
from decimal import Decimal
from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from conftest import TESTDATA, shared_trace
from rawjson import ns

import traceaug
from traceaug.cli import main
from traceaug.read.kinds import KINDS, kind_of
from traceaug.read.marker import find_marker
from traceaug.read.ranks import select
from traceaug.read.source import read_all
from traceaug.rewrite import events as ev
from traceaug.rewrite import pipeline
from traceaug.rewrite.counters import REWRITER as COUNTERS

SMALL = TESTDATA / "small_training.json.gz"
MARK_TID = 999_999  # a thread the test rewriter adds to the CPU process (pid 1000)
MARK_PID = 4242  # a process it adds


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def raw_events(path: Path) -> list[dict]:
    return orjson.loads(read_all(path))["traceEvents"]


def marker_of(path: Path) -> dict:
    return find_marker(read_all(path)[:4096])[2]


# ----- a small second rewriter, built on the pipeline ----------------------------------
def marks_compute(trace, options: dict) -> tuple[dict, list[bytes]]:
    """Per ProfilerStep: a slice on a new thread, an arrow from it to the step's first
    kernel, an instant at the step's end; names and sort indexes for the new thread and a
    new process holding one slice."""
    trace.include("traceaug.base")
    steps = trace.columns("SELECT ts, dur, name FROM traceaug_step ORDER BY ts")
    first = trace.columns(
        "SELECT s.ts AS step_ts, MIN(k.ts) AS k_ts FROM traceaug_step s JOIN traceaug_gpu_op k "
        "ON k.ts >= s.ts AND k.ts < s.ts + s.dur AND k.kind = 'kernel' AND k.stream = 7 "
        "GROUP BY s.ts ORDER BY s.ts")
    n, base = len(steps["ts"]), trace.base_ns
    names = [f"mark {s}" for s in steps["name"].tolist()]
    out = ev.slice_events(1000, MARK_TID, steps["ts"], steps["dur"], names, "marks",
                          [{"step": i} for i in range(n)], base_ns=base)
    out += ev.slice_events(MARK_PID, 1, [int(steps["ts"][0])], [1000], "alone", "marks", base_ns=base)
    out += ev.instant_events(1000, MARK_TID, steps["ts"] + steps["dur"], "step end", "marks",
                             base_ns=base)
    out += ev.flow_events(1000, MARK_TID, first["step_ts"] + 1, 0, 7, first["k_ts"] + 1,
                          ev.flow_ids(trace, n), "marks", "to first kernel", base_ns=base)
    out += ev.thread_name_events(1000, MARK_TID, "traceaug marks", sort_index=-1)
    out += ev.process_name_events(MARK_PID, "marks process", sort_index=99)
    return {"steps": n}, out


def marks_summary(results: list[dict], fmt: str) -> str:
    return "".join(f"{r['file']}: {r.get('steps', 0)} marks\n" for r in results)


MARKS = pipeline.Rewriter(name="marks", kind="analysis", compute=marks_compute)


def rewrite(rewriter: pipeline.Rewriter, src: Path, out: Path, options: dict,
            keep_bytes: bool = False) -> str:
    """``rewriter`` through the pipeline on one file, and the marks' summary of it."""
    found = pipeline.targets(src, out, select(src))
    return marks_summary(pipeline.results(rewriter, found, options, keep_bytes=keep_bytes),
                         "table")


def errors(trace) -> dict:
    c = trace.columns("SELECT name, idx, value FROM stats WHERE value > 0 "
                      "AND severity IN ('error', 'data_loss')")
    return dict(zip(zip(c["name"].tolist(), c["idx"].tolist()), c["value"].tolist()))


# ----- load kinds ------------------------------------------------------------------------
def test_kinds_and_their_older_names() -> None:
    assert set(KINDS) == {"analysis", "full", "gpu", "gpu_steps", "gpu_ops", "ops", "sync",
                          "sync_shapes", "patterns", "collectives", "job_path", "efficiency",
                          "efficiency_tables", "cupti", "capture", "report", "diff", "stragglers"}
    assert [k.name for k in KINDS.values() if k.skim] == ["cupti", "gpu_steps", "gpu_ops",
                                                          "collectives", "capture", "job_path",
                                                          "stragglers", "efficiency_tables",
                                                          "report"]  # writes no trace
    assert kind_of().name == "analysis" and kind_of(full=True).name == "full"
    assert kind_of(only="gpu").name == "gpu" and kind_of("sync").name == "sync"
    assert [k.name for k in KINDS.values() if k.full] == ["full"]
    with pytest.raises(ValueError, match="give one kind"):
        kind_of(full=True, only="gpu")
    with pytest.raises(traceaug.TraceaugError, match="kind must be one of"):
        traceaug.load(SMALL, kind="everything", progress=False)


def test_sync_kind_keeps_sync_events_with_their_args_and_every_runtime_call() -> None:
    path = shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")
    raw = raw_events(path)
    sync = [e for e in raw if e.get("cat") == "cuda_sync"]
    runtime = [e for e in raw if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")]
    waits = [e for e in runtime if e["name"] in ("cudaStreamSynchronize", "cudaDeviceSynchronize",
                                                 "cudaEventSynchronize", "cudaStreamWaitEvent",
                                                 "cudaEventRecord")]
    assert len(sync) == 41 and waits
    with traceaug.load(path, kind="sync", progress=False) as t:
        assert (t.kind, t.only, t.full) == ("sync", "sync", False)
        t.include("traceaug.kineto")
        got = t.columns("SELECT kind, COUNT(*) AS n FROM traceaug_event GROUP BY kind")
        counts = dict(zip(got["kind"].tolist(), got["n"].tolist()))
        assert counts["sync"] == len(sync)  # cuda_sync is a known category of traceaug.base
        assert counts["runtime"] == len(runtime)  # synchronising calls included
        args = t.columns(
            "SELECT a.key, COUNT(*) AS n FROM traceaug_event e JOIN args a USING (arg_set_id) "
            "WHERE e.kind = 'sync' GROUP BY a.key")
        keys = dict(zip(args["key"].tolist(), args["n"].tolist()))
        want: dict = {}
        for e in sync:  # every arg of every sync event
            for k in e["args"]:
                want[f"args.{k}"] = want.get(f"args.{k}", 0) + 1
        assert {k: keys.get(k) for k in want} == want
    with traceaug.load(path, only="gpu", progress=False) as t:  # the older name: no sync events
        t.include("traceaug.kineto")
        assert t.columns("SELECT COUNT(*) AS n FROM traceaug_event WHERE kind IN ('sync', 'cpu_op')"
                         )["n"][0] == 0


# ----- event builders, reloaded in the engine -------------------------------------------
def test_builders_reload_as_slices_flows_instants_and_names(tmp_path: Path) -> None:
    out = tmp_path / "marks.json"
    text = rewrite(MARKS, SMALL, out, {"k": 1})
    assert text == f"{SMALL}: 3 marks\n"
    answers = json.loads((TESTDATA / "small_training.answers.json").read_text())
    raw = json.loads(read_all(SMALL), parse_float=Decimal)["traceEvents"]
    steps = sorted((e for e in raw if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    kernels7 = sorted(ns(e["ts"]) for e in raw if e.get("cat") == "kernel" and e["tid"] == 7)
    with traceaug.load(SMALL, kind="full", progress=False) as t:
        before = errors(t)
        base = t.base_ns
    with traceaug.load(out, kind="full", progress=False) as t:
        assert errors(t) == before  # no new import errors
        s = t.columns("SELECT s.ts, s.dur, s.name, t.tid, p.pid, extract_arg(s.arg_set_id, "
                      "'args.step') AS step FROM slice s JOIN thread_track tt ON s.track_id = tt.id "
                      "JOIN thread t USING (utid) JOIN process p USING (upid) "
                      "WHERE s.category = 'marks' AND s.dur > 0 ORDER BY s.ts, p.pid")
        want_ts = [ns(e["ts"]) - base for e in steps]
        assert s["name"].tolist() == ["mark " + e["name"] for e in steps[:1]] + ["alone"] + [
            "mark " + e["name"] for e in steps[1:]]
        mine = s["pid"] == 1000
        assert s["ts"][mine].tolist() == want_ts  # exact ns
        assert s["dur"][mine].tolist() == [ns(e["dur"]) for e in steps]
        assert s["tid"][mine].tolist() == [MARK_TID] * 3 and s["step"][mine].tolist() == [0, 1, 2]
        inst = t.columns("SELECT ts FROM slice WHERE category = 'marks' AND dur = 0 ORDER BY ts")
        assert inst["ts"].tolist() == [ts + ns(e["dur"]) for ts, e in zip(want_ts, steps)]
        f = t.columns("SELECT o.name AS src, i.name AS dst, i.ts AS dst_ts FROM flow "
                      "JOIN slice o ON o.id = flow.slice_out JOIN slice i ON i.id = flow.slice_in "
                      "WHERE o.category = 'marks' ORDER BY o.ts")
        assert f["src"].tolist() == ["mark " + e["name"] for e in steps]
        first_kernels = [min(k for k in kernels7 if ns(e["ts"]) <= k < ns(e["ts"]) + ns(e["dur"]))
                         for e in steps]
        assert (f["dst_ts"] + base).tolist() == first_kernels  # each arrow on its step's first kernel
        names = t.columns(f"SELECT t.name FROM thread t JOIN process p USING (upid) "
                          f"WHERE p.pid = 1000 AND t.tid = {MARK_TID}")
        assert names["name"].tolist() == ["traceaug marks"]
        proc = t.columns(f"SELECT name FROM process WHERE pid = {MARK_PID}")
        assert proc["name"].tolist() == ["marks process"]
        n_flows = t.columns("SELECT COUNT(*) AS n FROM flow")["n"][0]
    assert n_flows == answers["flows"] + 3
    added = [e for e in raw_events(out) if e.get("cat") == "marks" or e.get("tid") == MARK_TID
             or e.get("pid") == MARK_PID]
    assert not {e.get("cat") for e in added} & ev.RESERVED_CATEGORIES


def test_builders_write_exact_microsecond_text() -> None:
    base = 1_712_198_313_370_000_123  # epoch ns: the µs text keeps every digit
    assert ev.slice_events(np.int64(1), [2, 3], np.array([0, 1_000]), [1_500, 0], "x", "c",
                           [{"n": np.int64(4), "f": np.float64(0.5)}, None], base_ns=base) == [
        b'{"ph":"X","cat":"c","name":"x","pid":1,"tid":2,"ts":1712198313370000.123,"dur":1.500,'
        b'"args":{"n":4,"f":0.5}}',
        b'{"ph":"X","cat":"c","name":"x","pid":1,"tid":3,"ts":1712198313370001.123,"dur":0}']
    assert ev.instant_events(1, 2, [877], "i", "c", scope="p") == [
        b'{"ph":"i","cat":"c","name":"i","pid":1,"tid":2,"ts":0.877,"s":"p"}']
    assert ev.flow_events(1, 2, [1_000], 1, 3, [2_000], np.array([7]), "c", "a", base_ns=base) == [
        b'{"ph":"s","id":7,"cat":"c","name":"a","pid":1,"tid":2,"ts":1712198313370001.123}',
        b'{"ph":"f","bp":"e","id":7,"cat":"c","name":"a","pid":1,"tid":3,"ts":1712198313370002.123}']
    assert ev.process_name_events(5, "p") == [b'{"ph":"M","name":"process_name","pid":5,"args":{"name":"p"}}']
    with pytest.raises(ValueError, match="differ in length"):
        ev.slice_events(1, [1, 2], [0, 1, 2], [1, 1, 1], "x", "c")


def test_no_builder_takes_a_kineto_category() -> None:
    for cat in ("kernel", "gpu_memcpy", "Kernel", "cpu_op", "cuda_runtime", "user_annotation"):
        with pytest.raises(ValueError, match="never use Kineto's categories"):
            ev.slice_events(1, 1, [0], [1], "x", cat)
        with pytest.raises(ValueError, match="never use Kineto's categories"):
            ev.flow_events(1, 1, [0], 1, 2, [1], [1], cat, "x")


def test_flow_ids_are_clear_of_both_id_forms(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "a", "cat": "c", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "bind_id": 3,
         "flow_out": True},
        {"ph": "X", "name": "b", "cat": "c", "pid": 1, "tid": 2, "ts": 5, "dur": 10, "bind_id": 3,
         "flow_in": True},
        {"ph": "s", "id": 1, "name": "f", "cat": "c", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "f", "id": 1, "bp": "e", "name": "f", "cat": "c", "pid": 1, "tid": 2, "ts": 6},
        {"ph": "s", "id": "0x2", "name": "g", "cat": "c", "pid": 1, "tid": 1, "ts": 2},
        {"ph": "f", "id": "0x2", "bp": "e", "name": "g", "cat": "c", "pid": 1, "tid": 2, "ts": 7},
        {"ph": "s", "id": "5", "name": "h", "cat": "c", "pid": 1, "tid": 1, "ts": 3},
        {"ph": "f", "id": "5", "bp": "e", "name": "h", "cat": "c", "pid": 1, "tid": 2, "ts": 8},
    ]
    path = tmp_path / "flows.json.gz"
    path.write_bytes(gzip.compress(orjson.dumps({"traceEvents": events})))
    with traceaug.load(path, kind="gpu", progress=False) as t:  # a load that keeps no flows
        assert ev.used_flow_ids(path).tolist() == [1, 2, 3, 5]
        assert ev.flow_ids(t, 3).tolist() == [4, 6, 7]


# ----- chaining ---------------------------------------------------------------------------
def counter_events(path: Path) -> list[dict]:
    return [e for e in raw_events(path) if e.get("ph") == "C"]


def applied(path: Path) -> list[dict]:
    """The marker's rewriter entries, without the UI moves' own (``rewrite.visible``)."""
    return [e for e in marker_of(path)["rewriters"] if e["name"] != "ui-visible"]


def test_counters_twice_adds_what_once_adds(tmp_path: Path) -> None:
    once, twice = tmp_path / "once.json.gz", tmp_path / "twice.json.gz"
    assert cli("counters", str(SMALL), str(once)).exit_code == 0
    assert cli("counters", str(once), str(twice)).exit_code == 0
    assert len(counter_events(once)) == 46 and counter_events(twice) == counter_events(once)
    assert read_all(twice) == read_all(once)  # the same bytes: one marker, one set of events
    entries = marker_of(twice)["rewriters"]  # the UI moves (small_training has one) are an entry
    assert [e["name"] for e in entries] == ["ui-visible", "counters"]
    entry = entries[1]
    assert (entry["name"], entry["events"], entry["options"]) == (
        "counters", 46, {"series": ["bandwidth", "queue", "memory"], "style": "traceaug"})


def test_counters_again_with_other_options_replaces_its_own_events(tmp_path: Path) -> None:
    once, again = tmp_path / "once.json", tmp_path / "again.json"
    assert cli("counters", str(SMALL), str(once)).exit_code == 0
    assert cli("counters", str(once), str(again), "--series", "queue").exit_code == 0
    names = {e["name"] for e in counter_events(again)}
    assert names == {"Queue length"}
    assert [e["options"]["series"] for e in applied(again)] == [["queue"]]


@pytest.mark.parametrize("order", [("counters", "marks"), ("marks", "counters")])
def test_two_rewriters_chain_in_either_order(tmp_path: Path, order: tuple[str, str]) -> None:
    rewriters = {"counters": (COUNTERS, {"series": ["bandwidth", "queue"], "style": "traceaug"}),
                 "marks": (MARKS, {})}
    src = SMALL
    for i, name in enumerate([*order, order[0]]):  # the first one again at the end
        out = tmp_path / f"step{i}.json"
        rewriter, options = rewriters[name]
        rewrite(rewriter, src, out, options, keep_bytes=True)  # bytes checked below
        src = out
    events = raw_events(src)
    assert sum(e.get("ph") == "C" for e in events) == 46
    assert sum(e.get("cat") == "marks" for e in events) == 3 + 1 + 3 + 6  # slices, instants, arrows
    assert sum(e.get("tid") == MARK_TID and e.get("ph") == "M" for e in events) == 2
    assert [e["name"] for e in applied(src)] == [order[1], order[0]]
    body = read_all(src)
    assert body.count(b'"traceaug":') == 1  # one marker key
    original = read_all(SMALL)
    events_start = original.index(b"[", original.index(b'"traceEvents"')) + 1
    assert body.endswith(original[events_start:])  # every original byte after the added events
    with traceaug.load(src, kind="full", progress=False) as t:
        assert t.columns("SELECT COUNT(*) AS n FROM counter")["n"][0] == 46
        assert t.columns("SELECT COUNT(*) AS n FROM slice WHERE category = 'marks'")["n"][0] == 7


def test_an_older_counters_output_gets_its_counters_replaced(tmp_path: Path) -> None:
    """Before the pipeline, counters wrote ``"traceaug":{"tool","version","command"}`` and its
    counter events ("Queue length", "Memory bandwidth (GB/s)") first in the array, with no
    counts: counters on such a file replaces them (was: 92 counter events, 46 of them stale),
    and the result is byte for byte counters on the original."""
    original = tmp_path / "small.json"
    original.write_bytes(read_all(SMALL))
    text = original.read_bytes()
    brace, bracket = text.index(b"{") + 1, text.index(b"[", text.index(b'"traceEvents"')) + 1
    stale = [{"ph": "C", "name": name, "pid": 0, "ts": 1712198313370004 + i, "args": {"stream 7": i}}
             for i, name in enumerate(["Queue length", "Memory bandwidth (GB/s)"] * 20)]
    older = (text[:brace] + b'"traceaug":{"tool":"traceaug","version":"0.1.0","command":"counters"},'
             + text[brace:bracket] + b",\n".join(orjson.dumps(e) for e in stale) + b","
             + text[bracket:])
    (tmp_path / "older.json").write_bytes(older)
    assert len(counter_events(tmp_path / "older.json")) == 40
    for src, out in (("older.json", "again.json"), ("small.json", "once.json")):
        assert cli("counters", str(tmp_path / src), str(tmp_path / out)).exit_code == 0
    assert (tmp_path / "again.json").read_bytes() == (tmp_path / "once.json").read_bytes()
    assert len(counter_events(tmp_path / "again.json")) == 46
    other = older.replace(b'"command":"counters"', b'"command":"diff"')  # not its additions: kept
    (tmp_path / "other.json").write_bytes(other)
    assert cli("counters", str(tmp_path / "other.json"), str(tmp_path / "kept.json")).exit_code == 0
    assert len(counter_events(tmp_path / "kept.json")) == 86


def test_an_edited_marker_is_an_error(tmp_path: Path) -> None:
    once, bad, out = tmp_path / "once.json", tmp_path / "bad.json", tmp_path / "out.json"
    assert cli("counters", str(SMALL), str(once)).exit_code == 0
    bad.write_bytes(once.read_bytes().replace(b'"events":46', b'"events":45', 1))
    result = cli("counters", str(bad), str(out))
    assert result.exit_code == 1 and "marker does not match" in result.stderr
    assert not out.exists()


def test_a_traceaug_output_is_an_input_unless_beside_its_inputs(tmp_path: Path) -> None:
    own = TESTDATA / "rank_dir" / "node-b.4242.1712198313370.pt.trace.traceaug.json"
    out = tmp_path / "out.json"  # an older marker (no event counts): replaced, its events kept
    rewrite(pipeline.Rewriter("none", "analysis", lambda t, o: ({}, [])), own, out, {})
    assert marker_of(out)["rewriters"] == [{"name": "none", "version": traceaug.__version__,
                                            "options": {}, "events": 0, "bytes": 0}]
    assert raw_events(out) == raw_events(own)
    assert cli("counters", str(TESTDATA / "rank_dir"), str(tmp_path / "dir"), "--rank", "0").exit_code == 0
    assert [p.name for p in (tmp_path / "dir").iterdir()] == ["node-b.4242.1712198313370.pt.trace.json"]
    result = cli("info", str(tmp_path / "dir"))  # a directory of outputs only is read as it is
    assert result.exit_code == 0, result.stderr
    assert str(tmp_path / "dir" / "node-b.4242.1712198313370.pt.trace.json") in result.stdout


# ----- rank selection and output paths ----------------------------------------------------
def test_rank_of_a_lone_file_is_accepted_by_every_command(tmp_path: Path) -> None:
    rank0 = shared_trace("kineto/multi_rank_sampled/rank-0.json.gz")
    out = tmp_path / "out.json.gz"
    for args in (["info", str(rank0), "--rank", "0"],
                 ["query", str(rank0), "SELECT 1 AS x", "--rank", "0"],
                 ["counters", str(rank0), str(out), "--rank", "0"],
                 ["diff", str(rank0), str(rank0), "--rank", "0", "--format", "csv"]):
        result = cli(*args)
        assert result.exit_code == 0, (args, result.stderr)
    assert out.exists()
    result = cli("counters", str(rank0), str(tmp_path / "x.json"), "--rank", "1")
    assert result.exit_code == 1 and "holds rank 0, not rank 1" in result.stderr
    result = cli("diff", str(rank0), str(rank0), "--rank", "1")
    assert result.exit_code == 1 and "holds rank 0, not rank 1" in result.stderr
    assert traceaug.info(rank0, rank=0)[0]["rank"] == 0


def test_out_with_a_trailing_slash_is_a_directory(tmp_path: Path) -> None:
    result = cli("counters", str(SMALL), f"{tmp_path / 'newdir'}/")
    assert result.exit_code == 0, result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["newdir"]
    assert [p.name for p in (tmp_path / "newdir").iterdir()] == [SMALL.name]
    assert len(counter_events(tmp_path / "newdir" / SMALL.name)) == 46


def test_directory_in_and_file_like_out_is_an_error(tmp_path: Path) -> None:
    src = tmp_path / "ranks"
    shutil.copytree(TESTDATA / "rank_dir", src)
    result = cli("counters", str(src), str(tmp_path / "x.json.gz"))
    assert result.exit_code == 1 and "IN is a directory, so OUT must be one too" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ranks"]


def test_a_failed_run_leaves_no_output_directory(tmp_path: Path) -> None:
    cpu = shared_trace("kineto/cpu_only_gloo.json.gz")
    result = cli("counters", str(cpu), f"{tmp_path / 'made'}/")
    assert result.exit_code == 1 and "no GPU kernels" in result.stderr
    assert not list(tmp_path.iterdir())


# ----- the public function -----------------------------------------------------------------
def test_public_counters_returns_dataframes_and_paths(tmp_path: Path) -> None:
    import pandas as pd

    answers = json.loads((TESTDATA / "small_training.answers.json").read_text())
    res = traceaug.counters(SMALL, tmp_path / "o.json", progress=False)
    assert isinstance(res.queue, pd.DataFrame) and isinstance(res.bandwidth, pd.DataFrame)
    assert list(res.queue.columns) == ["rank", "device", "stream", "mean_queued", "max_queued",
                                       "empty_pct", "full_ns"]
    assert list(res.bandwidth.columns) == ["rank", "device", "kind", "bytes", "busy_ns",
                                           "mean_gbps_busy", "peak_gbps"]
    assert res.queue["stream"].dtype == np.int64 and res.queue["rank"].tolist() == [0, 0]
    assert res.written == [tmp_path / "o.json"]
    assert res.bandwidth.set_index("kind")["bytes"]["HtoD"] == answers["memcpy_bytes_total"]
    only = traceaug.counters(SMALL, series=("queue",))
    assert only.written == [] and only.bandwidth.empty and len(only.queue) == 2


@pytest.mark.parametrize("content, reason", [
    (b"", "empty file"),
    (b'{"hello": [1, 2, 3]}', "not a trace"),
    (bytes(range(256)) * 20, "Unknown trace type"),
])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_bad_input_to_a_rewriter_is_one_line(tmp_path: Path, content: bytes, reason: str,
                                             suffix: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    result = cli("counters", str(bad), str(tmp_path / f"out{suffix}"))
    assert isinstance(result.exception, SystemExit) and result.exit_code == 1  # no traceback
    assert result.stderr.count("\n") == 1 and reason in result.stderr and str(bad) in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["bad.json"] and bad.read_bytes() == content
