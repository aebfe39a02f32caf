"""What ``efficiency`` and ``report``'s efficiency section cost beyond their tables: nothing made that is
thrown away, and the figures unchanged (checked on the shared traces)."""

from __future__ import annotations

import numpy as np
from conftest import shared_trace

import traceaug
from traceaug.rewrite import efficiency as rewriter

QWEN = "kineto/h100_qwen05b_inference.json.gz"


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            _same(a[k], b[k])
        else:
            np.testing.assert_equal(a[k], b[k])


def test_tables_without_out_make_no_lane_events() -> None:
    """No OUT: the summary alone, equal to the rewriter's; no lane or counter events are made (they were,
    then dropped: 10 % of the command's work on the A100 trace)."""
    with traceaug.load(shared_trace(QWEN), kind="efficiency_tables") as trace:
        summary, events = rewriter.TABLES.compute(trace, {})
        full, made = rewriter.REWRITER.compute(trace, {})
    assert events == [] and len(made) > 1000
    _same(summary, full)


def _holding_ops(path, memory: bool, capture: bool = False) -> int:
    """From the raw JSON: the CPU ops (not ProfilerSteps) whose span holds, on their thread, a runtime call
    the load keeps (one that may launch; ``capture``: nor one that never launches) or (``memory``) a
    [memory] event, bounds included."""
    import gzip
    from collections import defaultdict

    import orjson

    from traceaug.read.kinds import HOST_ONLY_CALLS, NO_LAUNCH_CALLS

    dropped = HOST_ONLY_CALLS | NO_LAUNCH_CALLS if capture else HOST_ONLY_CALLS
    events = orjson.loads(gzip.open(path).read())["traceEvents"]
    marks = defaultdict(list)
    for e in events:
        call = e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
        if call and e.get("name") not in dropped or memory and e.get("name") == "[memory]":
            marks[e["pid"], e["tid"]].append(float(e["ts"]))
    sorted_marks = {k: np.sort(v) for k, v in marks.items()}
    n = 0
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op" and not e["name"].startswith("ProfilerStep#"):
            ts = sorted_marks.get((e["pid"], e["tid"]), np.empty(0))
            n += np.searchsorted(ts, e["ts"] + e["dur"], "right") > np.searchsorted(ts, e["ts"], "left")
    return int(n)


def test_report_load_keeps_only_the_ops_holding_a_launch_or_allocation() -> None:
    """``report`` and ``efficiency`` feed the engine only the CPU ops around a launch or a [memory] event (on
    Qwen 2,228 of 4,186: the engine's work on the others was for nothing); their efficiency and memory
    tables equal those of a load with every CPU op (``diff``'s)."""
    import orjson

    from traceaug.analysis import efficiency, memory
    from traceaug.read import normalize

    path = shared_trace(QWEN)
    with traceaug.load(path, kind="diff") as every, traceaug.load(path, kind="report") as held:
        count = "SELECT COUNT(*) AS n FROM slice WHERE category = 'cpu_op'"
        assert every.columns(count)["n"][0] == 4186
        assert held.columns(count)["n"][0] == _holding_ops(path, True) == 2228
        _same(efficiency.part(held), efficiency.part(every))
        _same(memory.every_step(held), memory.every_step(every))
    fed = orjson.loads(b"".join(normalize.engine_stream(normalize.plan(path, kind="report", workers=0))))
    assert sum(e.get("cat") == "cpu_op" for e in fed["traceEvents"]) == 2228  # valid JSON, the ops held
    with traceaug.load(path, kind="diff") as every, traceaug.load(path, kind="efficiency_tables") as tables:
        assert tables.columns(count)["n"][0] == _holding_ops(path, False)
        _same(efficiency.part(tables), efficiency.part(every))


def test_a_rank_section_asks_the_engine_twice(monkeypatch) -> None:
    """``report``'s efficiency section of a rank whose GPU ops are read: two queries (each launch's op with
    its name and arg set; the shapes of those arg sets by id), not one per step of the way (launches, ops, and
    their args found by scanning the slices again)."""
    from traceaug.analysis import efficiency
    from traceaug.analysis.gpu_steps import gpu_ops
    from traceaug.trace import Trace

    with traceaug.load(shared_trace(QWEN), kind="report") as trace:
        g = gpu_ops(trace, trace.rank)
        sent: list[str] = []
        ask = Trace._result
        monkeypatch.setattr(Trace, "_result", lambda self, sql: sent.append(sql) or ask(self, sql))
        found = efficiency.part(trace, g)
    assert len(sent) == 2, sent
    assert efficiency.modelled(found) and len(found["groups"]["name"]) == 35


def test_launch_lookup_skips_calls_that_never_launch_in_a_critical_path_load() -> None:
    """``report JOB``'s load (``job_path``) keeps every runtime call for the critical path; the launch
    lookup leaves out those that never launch (724 of Qwen's 1,922: ``cudaFuncSetAttribute``, ...), which the
    ``report`` load never fed the engine, so both find the same launches and the same section."""
    import gzip

    import orjson

    from traceaug.analysis import efficiency
    from traceaug.analysis.shapes import launch_ops
    from traceaug.read.kinds import HOST_ONLY_CALLS

    path = shared_trace(QWEN)
    calls = [e for e in orjson.loads(gzip.open(path).read())["traceEvents"]
             if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    never = {e["args"]["correlation"] for e in calls if e["name"] in HOST_ONLY_CALLS}
    assert len(never) == 724
    with traceaug.load(path, kind="job_path") as job, traceaug.load(path, kind="report") as one:
        job.include("traceaug.gpu")
        one.include("traceaug.gpu")
        found, other = launch_ops(job), launch_ops(one)
        assert not never & set(found["correlation"].tolist())
        assert sorted(zip(found["correlation"].tolist(), found["name"].tolist())) == \
            sorted(zip(other["correlation"].tolist(), other["name"].tolist()))
        _same(efficiency.part(job), efficiency.part(one))


def test_a_capture_load_keeps_only_the_ops_holding_a_launch(monkeypatch) -> None:
    """A graph capture's load (``--capture``) feeds the engine only the CPU ops around a launch call, the
    ones a captured kernel is attributed to; the graphs equal those read with every CPU op."""
    from dataclasses import replace

    from traceaug.analysis.graph_replay import captured
    from traceaug.read.kinds import KINDS

    count = "SELECT COUNT(*) AS n FROM slice WHERE category = 'cpu_op'"
    for name in ("sglang_decode/capture_traces/bs_32_rank0.json.gz",
                 "vllm_decode_full/capture_traces/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz"):
        path = shared_trace(f"kineto/inference/{name}")
        with traceaug.load(path, kind="capture") as held:
            n, graphs = held.columns(count)["n"][0], captured(held, "c")
        with monkeypatch.context() as m:
            m.setitem(KINDS, "capture", replace(KINDS["capture"], holding_ops=False))
            with traceaug.load(path, kind="capture") as every:
                n_every, graphs_every = every.columns(count)["n"][0], captured(every, "c")
        assert n == _holding_ops(path, False, True) < n_every
        same = [(g.kernels, g.nodes, g.ops, g.inputs) for g in graphs]  # (``calls``: the engine's slice ids)
        assert same == [(g.kernels, g.nodes, g.ops, g.inputs) for g in graphs_every]
        assert sum(len(g.ops) for g in graphs) > 400
