"""Analysis loads vs full loads, and pass 1 in worker processes vs in this process."""

from __future__ import annotations

import gzip
import json

import orjson
import pandas as pd
import pytest
from conftest import plan_fields, shared_trace, started_by

import traceaug
from traceaug import processes
from traceaug.read import chunks, normalize, pass1, source
from traceaug.read.rebase import Rebase

# B200: fractional epoch-µs and 38 overlap lanes; A100: negative tids; V100: ns resolution.
TRACES = ["kineto/b200_rank0_of8_allgather.json.gz", "kineto/a100_rank0_of16_6streams.json.gz",
          "kineto/v100_ns_resolution.json.gz"]

# Processes and threads by name: Perfetto numbers string pids ("Spans") in the order it
# meets them, which differs when flow events are not fed.
EVENTS = ("SELECT e.ts, e.dur, e.name, e.category, e.depth, e.kind, e.lane, e.device, e.stream, "
          "e.correlation, p.name AS process, t.name AS thread, e.tid < 4294967296 AS numeric_tid "
          "FROM traceaug_event e JOIN slice s USING (id) JOIN thread_track tt ON s.track_id = tt.id "
          "JOIN thread t USING (utid) LEFT JOIN process p USING (upid) "
          "ORDER BY e.ts, e.dur, e.name, process, thread, e.lane, e.correlation")


def _args(t: traceaug.Trace) -> pd.DataFrame:
    return t.query(
        "SELECT s.ts, s.dur, s.name, a.key, a.display_value FROM slice s "
        "JOIN args a USING (arg_set_id) WHERE a.key GLOB 'args.*' "
        "ORDER BY s.ts, s.dur, s.name, a.key, a.display_value")


@pytest.mark.parametrize("rel", TRACES)
def test_analysis_load_keeps_every_event_and_the_args_analyses_read(rel: str) -> None:
    path = shared_trace(rel)
    with traceaug.load(path, progress=False) as lean, \
            traceaug.load(path, progress=False, full=True) as full:
        assert (lean.full, full.full) == (False, True)
        for t in (lean, full):
            t.include("traceaug.kineto")
        assert lean.query("SELECT full_load FROM traceaug_meta")["full_load"][0] == 0
        pd.testing.assert_frame_equal(lean.query(EVENTS), full.query(EVENTS))
        assert lean.query("SELECT COUNT(*) AS n FROM flow")["n"][0] == 0
        assert full.query("SELECT COUNT(*) AS n FROM flow")["n"][0] > 0
        lean_args, full_args = _args(lean), _args(full)
    kept = {f"args.{k}" for k in pass1.KINETO_ARGS} | {"args.traceaug_lane", "args.traceaug_tid"}
    # Complete events keep exactly the KINETO_ARGS they had...
    lean_in, full_in = (a[a["key"].isin(kept)].reset_index(drop=True) for a in (lean_args, full_args))
    assert len(lean_in) > 0
    pd.testing.assert_frame_equal(lean_in, full_in)
    # ...and only instant events (dur 0) keep other args, all of them.
    lean_out = lean_args[~lean_args["key"].isin(kept)]
    assert (lean_out["dur"] == 0).all()
    assert len(lean_out.merge(full_args)) == len(lean_out)
    assert len(lean_args) < len(full_args)


@pytest.mark.parametrize("how", ["fork", "spawn"])
@pytest.mark.parametrize("full", [False, True], ids=["analysis", "full"])
def test_workers_plan_exactly_as_this_process(full: bool, how: str, monkeypatch) -> None:
    path = shared_trace("kineto/b200_rank0_of8_allgather.json.gz")
    monkeypatch.setattr(chunks, "CHUNK", 256 << 10)  # many chunks (cuts are made here)
    monkeypatch.setattr(source, "BLOCK", 256 << 10)
    here = normalize.plan(path, full=full, workers=0)
    with started_by(how):
        assert processes.can_fork() == (how == "fork")
        there = normalize.plan(path, full=full, workers=2)
    assert len(here.chunk_first_seq) > 10
    assert here.moved_slices == 42  # the 38 kernels and 4 CPU events Perfetto would drop
    assert plan_fields(here) == plan_fields(there)


@pytest.mark.parametrize("indent", [None, 1], ids=["compact", "pretty"])
def test_cuts_skip_strings_and_nested_objects(tmp_path, monkeypatch, indent: int | None) -> None:
    """Names full of ``},{`` and args holding lists of objects. Cuts skip the strings (quote
    parity, or a newline in the boundary when pretty-printed); a cut between two nested objects
    does not parse in a worker, so pass 1 scans again in this process, confirming each cut. The
    plan is the same either way."""
    events = [{"ph": "X", "name": "k},{" * 40 + str(i), "pid": 1, "tid": 2, "ts": 10 * i, "dur": 5,
               "cat": "kernel", "args": {"stream": 7, "device": 0, "correlation": i,
                                         "shapes": [{"a": i}, {"b": i}, {"c": i}]}}
              for i in range(6000)]
    path = tmp_path / "strings.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events, "tail": 1}, indent=indent).encode()))
    monkeypatch.setattr(chunks, "CHUNK", 64 << 10)
    monkeypatch.setattr(source, "BLOCK", 64 << 10)
    with pytest.raises(pass1.Unconfirmed):
        for _ in pass1.parallel(source.iter_blocks(path), Rebase(), "analysis", 2):
            pass
    here = normalize.plan(path, full=False, workers=0)
    there = normalize.plan(path, full=False, workers=2)
    assert plan_fields(here) == plan_fields(there)
    assert here.events == 6000 and here.layout.trailer == {"tail": 1}
    assert len(here.chunk_first_seq) > 20
    with traceaug.load(path, progress=False) as t:
        assert t.query("SELECT COUNT(*) AS n FROM slice")["n"][0] == 6000


def test_newline_boundaries_are_cut_without_counting_quotes(tmp_path, monkeypatch) -> None:
    """JSON strings cannot hold a raw newline, so a ``},\n{`` boundary is an event boundary
    even where every name is full of ``},{``: no chunk needs its quotes counted, in workers
    or here, and the plan is the same."""
    events = [{"ph": "X", "name": "k},{" * 40 + str(i), "pid": 1, "tid": 2, "ts": 10 * i, "dur": 5,
               "cat": "kernel", "args": {"stream": 7, "device": 0, "correlation": i}}
              for i in range(6000)]
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps({"traceEvents": events}, indent=1))
    monkeypatch.setattr(chunks, "CHUNK", 64 << 10)
    monkeypatch.setattr(source, "BLOCK", 64 << 10)

    def no_counting(*args):
        raise AssertionError("quotes counted")

    monkeypatch.setattr(chunks, "_quotes", no_counting)
    here = normalize.plan(path, full=False, workers=0)
    there = normalize.plan(path, full=False, workers=2)
    assert plan_fields(here) == plan_fields(there)
    assert here.events == 6000 and len(here.chunk_first_seq) > 20


@pytest.mark.parametrize("workers", [0, 2], ids=["here", "workers"])
@pytest.mark.parametrize("full", [False, True], ids=["analysis", "full"])
def test_timestamps_the_fast_rebase_cannot_take_are_exact(tmp_path, workers: int, full: bool,
                                                          monkeypatch) -> None:
    """A timestamp with another prefix, and a "ts" inside args (bytes.replace rewrites it, so
    the count check fails): the chunk holding them is rebased one timestamp at a time, every
    other chunk by bytes.replace."""
    from decimal import Decimal

    odd = ["1712298313370123.25", "1712198313370999.5"]
    plain = [f"17121983133{i:05d}.125" for i in range(4000)]
    rows = [f'{{"ph": "X", "name": "e{i}", "pid": 1, "tid": {i % 3}, "ts": {ts}, "dur": 1}}'
            for i, ts in enumerate(plain + odd)]
    rows[-1] = rows[-1][:-1] + ', "args": {"ts": 1712198313370999}}'
    path = tmp_path / "mixed.json"
    path.write_text('{"traceEvents": [' + ",\n".join(rows) + "]}")
    monkeypatch.setattr(chunks, "CHUNK", 64 << 10)
    monkeypatch.setattr(source, "BLOCK", 64 << 10)
    plan = normalize.plan(path, full=full, workers=workers)
    assert len(plan.chunk_first_seq) > 3
    assert plan.exact_chunks == {len(plan.chunk_first_seq) - 1}  # only the last chunk
    with traceaug.load(path, progress=False, full=full) as t:
        got = t.query("SELECT name, ts FROM slice ORDER BY name")
    have = {n: int(ts) + t.base_ns for n, ts in zip(got["name"], got["ts"])}
    assert have == {f"e{i}": int(Decimal(ts) * 1000) for i, ts in enumerate(plain + odd)}


@pytest.mark.parametrize("workers", [0, 2], ids=["here", "workers"])
def test_integer_timestamps_are_rebased_as_numbers(tmp_path, workers: int, monkeypatch) -> None:
    """An analysis load of integer epoch-µs timestamps subtracts the base from the parsed
    integers (another prefix too), not on the text: the engine gets the bytes the text
    rebase gives. A chunk holding a large fractional one is rebased on its text, exactly."""
    from decimal import Decimal

    stamps = [str(1712198313370000 + 7 * i) for i in range(4000)] + ["1712298313370123"]
    stamps[-30] = "1712198313370999.5"  # in the last chunk
    rows = [f'{{"ph": "X", "name": "e{i}", "pid": 1, "tid": {i % 3}, "ts": {ts}, "dur": 1}}'
            for i, ts in enumerate(stamps)]
    path = tmp_path / "ints.json"
    path.write_text('{"traceEvents": [' + ",\n".join(rows) + "]}")
    monkeypatch.setattr(chunks, "CHUNK", 64 << 10)
    monkeypatch.setattr(source, "BLOCK", 64 << 10)
    plan = normalize.plan(path, full=False, workers=workers)
    assert plan.rebase.numeric and len(plan.chunk_first_seq) > 3
    assert plan.exact_chunks == {len(plan.chunk_first_seq) - 1}  # only the fractional one's
    with monkeypatch.context() as m:
        m.setattr(normalize, "Rebase", lambda numeric: Rebase())  # the text rebase
        by_text = normalize.plan(path, full=False, workers=workers)
    assert not by_text.rebase.numeric and plan_fields(plan) == plan_fields(by_text)
    with traceaug.load(path, progress=False) as t:
        got = t.query("SELECT name, ts FROM slice ORDER BY name")
    have = {n: int(ts) + t.base_ns for n, ts in zip(got["name"], got["ts"])}
    assert have == {f"e{i}": int(Decimal(ts) * 1000) for i, ts in enumerate(stamps)}


@pytest.mark.parametrize("rel", ["kineto/a100_rank0_of16_6streams.json.gz",
                                 "kineto/diff/v100_resnet50_2021/a/worker0.1623143089861.pt.trace.json.gz",
                                 "kineto/v100_ns_resolution.json.gz"])
def test_real_traces_rebase_as_numbers_or_text_alike(rel: str, monkeypatch) -> None:
    """Integer-µs traces take the numeric rebase, the ns-resolution one (fractional µs) the
    text rebase; either way the plan (a subset load's span too) is the text rebase's."""
    path = shared_trace(rel)
    plans = [normalize.plan(path, full=False, workers=0, only=only) for only in (None, "gpu")]
    assert plans[0].rebase.numeric == ("ns_resolution" not in rel) and plans[0].base_ns > 0
    monkeypatch.setattr(normalize, "Rebase", lambda numeric: Rebase())
    for plan, only in zip(plans, (None, "gpu")):
        assert plan_fields(plan) == plan_fields(normalize.plan(path, full=False, workers=0, only=only))


def test_host_only_calls_never_share_a_gpu_ops_correlation() -> None:
    """What lets a subset load leave HOST_ONLY_CALLS out: on every shared Kineto trace, no
    kernel, copy or set has the correlation id of such a call (and the calls are there)."""
    from rawjson import KINDS

    from traceaug.read.pass1 import HOST_ONLY_CALLS

    gpu_cats = {*KINDS["kernel"], *KINDS["memcpy"], *KINDS["memset"]}
    seen = 0
    for path in sorted(shared_trace("kineto").rglob("*.json*")):
        text = path.read_bytes()
        raw = orjson.loads(gzip.decompress(text) if path.name.endswith(".gz") else text)
        events = [e for e in (raw["traceEvents"] if isinstance(raw, dict) else raw)
                  if e.get("ph") == "X" and isinstance(e.get("args"), dict)]
        gpu = {e["args"].get("correlation") for e in events if e.get("cat") in gpu_cats} - {None}
        host = [e for e in events if e.get("cat") in KINDS["runtime"] and e.get("name") in HOST_ONLY_CALLS]
        seen += len(host)
        assert not [e for e in host if e["args"].get("correlation") in gpu], path
    assert seen > 25_000


@pytest.mark.parametrize("rel", ["kineto/a100_rank0_of16_6streams.json.gz", "kineto/mi250_rocm62.json.gz",
                                 "kineto/vllm_decode_cudagraph.json.gz",
                                 "kineto/diff/v100_resnet50_2021/a/worker0.1623143089861.pt.trace.json.gz"])
@pytest.mark.parametrize("style", ["traceaug", "hta"])
def test_gpu_only_load_gives_the_same_counters(rel: str, style: str) -> None:
    """traceaug counters loads only GPU ops, their launches and ProfilerSteps (and takes the
    trace's span from pass 1): every series and summary equals an analysis load's."""
    from traceaug.analysis.counters import counters

    path = shared_trace(rel)
    with traceaug.load(path, progress=False) as whole, \
            traceaug.load(path, progress=False, only="gpu") as gpu:
        assert gpu.query("SELECT subset_load FROM traceaug_meta")["subset_load"][0] == "gpu"
        n_all = whole.query("SELECT COUNT(*) AS n FROM slice")["n"][0]
        n_gpu = gpu.query("SELECT COUNT(*) AS n FROM slice")["n"][0]
        a, b = counters(whole, style=style), counters(gpu, style=style)
    assert n_gpu < n_all
    assert (a["start"], a["end"]) == (b["start"], b["end"])
    for key in ("queue", "bandwidth", "queue_summary", "bandwidth_summary"):
        pd.testing.assert_frame_equal(a[key].reset_index(drop=True), b[key].reset_index(drop=True),
                                      check_dtype=False)


@pytest.mark.parametrize("pair", ["tiny", "no_steps", "h100_runs", "v100_resnet50_2021",
                                  "a100_vs_v100"])
def test_ops_load_gives_the_same_diff(pair: str) -> None:
    """traceaug diff loads only CPU ops, GPU ops, their launches and ProfilerSteps: every op
    row, for every grouping, and the headline (with no steps: over the whole trace's span)
    equal an analysis load's."""
    import numpy as np

    from traceaug.analysis.diff import Side, compute

    if pair == "tiny":
        paths = [shared_trace("kineto/diff/tiny_base/base.json.gz"),
                 shared_trace("kineto/diff/tiny_test/test.json.gz")]
    elif pair == "no_steps":
        paths = [shared_trace("kineto/a100_simple_add_cuda_sync.json.gz"),
                 shared_trace("kineto/a100_alexnet_cuda_sync.json.gz")]
    else:
        paths = [next(d.iterdir()) for d in sorted(shared_trace(f"kineto/diff/{pair}").iterdir())]
    loads = {only: [Side.of(traceaug.load(p, progress=False, only=only)) for p in paths]
             for only in (None, "ops")}
    try:
        for whole, ops in zip(*loads.values()):
            assert ops.trace.only == "ops"
            n_whole = whole.trace.columns("SELECT COUNT(*) AS n FROM slice")["n"][0]
            assert ops.trace.columns("SELECT COUNT(*) AS n FROM slice")["n"][0] < n_whole
        for by in ("name", "short-name", "category"):
            want, got = compute(*loads[None], by=by), compute(*loads["ops"], by=by)
            assert (want["a"], want["b"]) == (got["a"], got["b"])
            assert (got["a"]["steps"] == 0) == (pair == "no_steps")
            assert want["ops"].keys() == got["ops"].keys()
            for col, values in want["ops"].items():
                np.testing.assert_array_equal(values, got["ops"][col], err_msg=f"{by} {col}")
            assert len(got["ops"]["key"]) >= 2
    finally:
        for side in (*loads[None], *loads["ops"]):
            side.trace.close()


def test_a_name_on_many_rows_is_one_string(tmp_path) -> None:
    """Text cells come out interned: a kernel name on 400 slices is one string object, so a rank's tables
    hold it and its cache entry pickles it once (an A100 rank's GPU ops pickled 3.2 MB, 0.85 MB since)."""
    name = "void at::native::elementwise_kernel<128, 4>(int, at::native::FillFunctor<float>)"
    events = [{"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(400)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with traceaug.load(path, progress=False) as t:
        names = t.columns("SELECT name FROM slice")["name"]
    assert names.tolist() == [name] * 400
    assert len({id(x) for x in names}) == 1
