"""Timestamps that do not share the rebased prefix ("ts": 0 or 1000 beside epoch µs values).

The base must never exceed a timestamp: SQL would read it as base + ts, and Perfetto drops
an event whose rebased ts is negative. Expected absolute ns come from the raw text (Decimal).
"""

from __future__ import annotations

import gzip
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import plan_fields, shared_trace
from counters_raw import queue_series
from rawjson import ns
from test_counters import added_events, our_series

import traceaug
from traceaug.cli import main
from traceaug.read import chunks, normalize, pass1, source
from traceaug.read.kinds import KINDS
from traceaug.read.rebase import KEEP

MIX = """{"traceEvents":[
{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1712198313370000.5,"dur":10},
{"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":1000.0,"dur":10},
{"ph":"X","cat":"cpu_op","name":"c","pid":1,"tid":1,"ts":1712198313370100,"dur":10}]}
"""
ABS = "SELECT name, ts + (SELECT time_base_ns FROM traceaug_meta) AS abs_ns FROM slice ORDER BY ts"
LARGE = 1712198313370000
SMALL = ["1000", "1000.5", "2500.125", "0", "77"]  # integer and fractional µs, one per phase below
DOUBLE_NS = 512  # two ulps of a ns value near 1.7e18 in a double: how close Perfetto gets


@pytest.mark.parametrize("full", [False, True], ids=["analysis", "full"])
def test_the_reported_file_reads_every_timestamp_unshifted(tmp_path: Path, full: bool) -> None:
    path = tmp_path / "mix.json"
    path.write_text(MIX)
    result = CliRunner().invoke(main, ["query", str(path), ABS, "--format", "csv",
                                       "--full" if full else "--lean"])
    assert result.exit_code == 0, result.output
    rows = dict(line.split(",") for line in result.output.strip().splitlines()[1:])
    assert list(rows) == ["b", "a", "c"]
    assert int(rows["b"]) == 1_000_000 and int(rows["c"]) == ns("1712198313370100")
    # a fractional epoch value with no base goes through Perfetto's double: close, not shifted
    assert abs(int(rows["a"]) - ns(Decimal("1712198313370000.5"))) < DOUBLE_NS


def _write(path: Path, where: str) -> dict[str, str]:
    """A kernel trace of integer epoch-µs ts (four 64 KB chunks or more) with small ts on an X,
    an instant, a counter, a flow start and a thread_name event; ``where`` puts them in the
    first chunk after epoch events, in the last chunk, or in a first chunk holding no epoch
    ts at all. Returns every slice's name -> ts text."""
    big = [(f"e{i}", str(LARGE + 7 * i)) for i in range(2000)]
    small = [(f"s{i}", ts) for i, ts in enumerate(SMALL)]
    rows = []

    def slice_row(name: str, ts: str, i: int) -> str:
        return (f'{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": {i % 3}, '
                f'"ts": {ts}, "dur": 1, "args": {{"device": 0, "stream": {i % 3}}}}}')

    odd = [slice_row(small[0][0], small[0][1], 0),
           f'{{"ph": "i", "cat": "kernel", "name": "{small[1][0]}", "pid": 0, "tid": 5, "s": "t", '
           f'"ts": {small[1][1]}}}',
           f'{{"ph": "C", "name": "q", "pid": 0, "ts": {small[2][1]}, "args": {{"v": 3}}}}',
           f'{{"ph": "s", "cat": "ac2g", "name": "f", "id": 1, "pid": 0, "tid": 5, '
           f'"ts": {small[1][1]}}}',
           f'{{"ph": "M", "name": "thread_name", "pid": 0, "tid": 5, "ts": {small[3][1]}, '
           f'"args": {{"name": "odd thread"}}}}']
    if where == "first_chunk_alone":  # > 64 KB of small ts before the first epoch one
        pad = [(f"p{i}", str(100 + 7 * i)) for i in range(1000)]
        rows += [slice_row(n, t, i) for i, (n, t) in enumerate(pad)] + odd
        rows += [slice_row(n, t, i) for i, (n, t) in enumerate(big)]
        small += pad
    elif where == "first_chunk":
        rows += [slice_row(n, t, i) for i, (n, t) in enumerate(big[:5])] + odd
        rows += [slice_row(n, t, i) for i, (n, t) in enumerate(big[5:], 5)]
    else:
        rows += [slice_row(n, t, i) for i, (n, t) in enumerate(big)] + odd
    path.write_text('{"traceEvents": [' + ",\n".join(rows) + "]}")
    names = dict(big + small)
    del names[small[2][0]], names[small[3][0]], names[small[4][0]]  # not slices
    return names


@pytest.mark.parametrize("where", ["first_chunk", "last_chunk", "first_chunk_alone"])
@pytest.mark.parametrize("workers", [0, 2], ids=["here", "workers"])
def test_small_timestamps_are_exact_in_every_load_kind(tmp_path: Path, monkeypatch, where: str,
                                                       workers: int) -> None:
    path = tmp_path / "mixed.json"
    names = _write(path, where)
    monkeypatch.setattr(chunks, "CHUNK", 64 << 10)
    monkeypatch.setattr(source, "BLOCK", 64 << 10)
    want = {n: ns(ts) for n, ts in names.items()}
    # every kind keeping kernels (``memory``, ``cupti`` keep CPU-side events); workers: one of each path
    kernels = [k for k, v in KINDS.items() if v.categories is None or "kernel" in v.categories]
    assert {"analysis", "full", "gpu", "gpu_steps", "sync", "efficiency"} <= set(kernels)
    for kind in kernels if not workers else ("analysis", "full", "gpu"):
        plan = normalize.plan(path, kind=kind, workers=workers)
        assert len(plan.chunk_first_seq) > 3 and plan.base_ns == 0
        if workers:  # the loads are the same (the load through workers: the test below)
            assert plan_fields(plan) == plan_fields(normalize.plan(path, kind=kind, workers=0))
            continue
        with traceaug.load(path, kind=kind, progress=False, workers=0) as t:
            got = t.query(ABS)
            counter = t.query("SELECT c.ts + (SELECT time_base_ns FROM traceaug_meta) AS abs_ns, "
                              "c.value FROM counter c")
            dropped = t.query("SELECT name, value FROM stats WHERE value > 0 "
                              "AND severity IN ('error', 'data_loss')")
            thread = t.query("SELECT name FROM thread WHERE tid = 5")
        assert dict(zip(got["name"], got["abs_ns"].tolist(), strict=True)) == want, kind
        assert list(dropped["name"]) == [], kind
        if kind in ("analysis", "full"):  # a subset load keeps only its categories
            assert counter["abs_ns"].tolist() == [ns("2500.125")] and counter["value"].tolist() == [3]
            assert list(thread["name"]) == ["odd thread"]


def test_the_worker_path_of_a_large_load_reads_them_exact(tmp_path: Path, monkeypatch) -> None:
    """A trace above PARALLEL_ABOVE is planned in worker processes: the restart without a base
    happens there too, for the load itself."""
    path = tmp_path / "mixed.json"
    names = _write(path, "last_chunk")
    monkeypatch.setattr(chunks, "CHUNK", 64 << 10)
    monkeypatch.setattr(source, "BLOCK", 64 << 10)
    monkeypatch.setattr(normalize, "PARALLEL_ABOVE", 0)
    parallel, runs = pass1.parallel, []
    monkeypatch.setattr(pass1, "parallel", lambda *a: runs.append(a) or parallel(*a))
    with traceaug.load(path, progress=False) as t:
        got = t.query(ABS)
        assert t.base_ns == 0 and len(t.plan.chunk_first_seq) > 3
    assert len(runs) == 2  # with the base of the first chunk, then with none
    assert dict(zip(got["name"], got["abs_ns"].tolist(), strict=True)) == {
        n: ns(ts) for n, ts in names.items()}


def test_counters_of_a_trace_with_small_timestamps(tmp_path: Path) -> None:
    """A real trace plus a launch and a kernel at small ts: every queue-length point is at the
    raw events' exact time, the small kernel's too."""
    text = gzip.decompress(shared_trace("kineto/a100_simple_add_cuda_sync.json.gz").read_bytes())
    end = text.rindex(b"]")
    extra = (b',{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,'
             b' "ts": 1000, "dur": 5, "args": {"correlation": 999999}},'
             b'{"ph": "X", "cat": "kernel", "name": "k_small", "pid": 0, "tid": 7, "ts": 1003.5,'
             b' "dur": 2, "args": {"correlation": 999999, "device": 0, "stream": 7}}')
    src = tmp_path / "small.json"
    src.write_bytes(text[:end].rstrip() + extra + text[end:])
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["counters", str(src), str(out)])
    assert result.exit_code == 0, result.output
    queue = {(pid, int(k.split()[1])): [(t, int(v)) for t, v in pts]
             for (pid, k), pts in our_series(added_events(out), "Queue length").items()}
    want = queue_series(src)
    assert queue == want
    assert want[(0, 7)][:2] == [(1_000_000, 1), (1_003_500, 0)]  # launched, then running


def test_shared_kineto_traces_keep_their_base(monkeypatch) -> None:
    """Every shared Kineto trace has no timestamp below its first epoch one's prefix: its
    plan (and a full load's, on three) keeps that base (the prefix of the first 13-digit ts,
    less one) with no restart, and workers plan it alike."""
    import re

    from traceaug.read.source import read_all

    paths = sorted(shared_trace("kineto").rglob("*.json.gz"))  # (not the capture details)
    assert len(paths) > 20
    calls: list = []
    plan_once = normalize._confirmed_plan
    monkeypatch.setattr(normalize, "_confirmed_plan", lambda *a: calls.append(a) or plan_once(*a))
    for path in paths:
        first = re.search(rb'"ts"\s*:\s*(\d{13,})', read_all(path)).group(1)
        base_ns = (int(first[:-KEEP]) - 1) * 10**KEEP * 1000
        full = path.name.startswith(("v100_ns", "a100_rank0", "worker0.1623143089861"))
        for kind in ("analysis", "full") if full else ("analysis",):  # full: the text path
            calls.clear()
            plan = normalize.plan(path, kind=kind, workers=0)
            assert plan.base_ns == base_ns and len(calls) == 1, (path, kind)  # no restart
    path = shared_trace("kineto/a100_nccl_rank0_of2.json.gz")
    assert plan_fields(normalize.plan(path, workers=2)) == plan_fields(normalize.plan(path, workers=0))


@pytest.mark.parametrize(("odd", "base_ns"), [
    ("1.7121983133702255e15", 1712000000000000 * 1000),  # exponent form: rebased on the exact path
    ("1712098313370225", 1712000000000000 * 1000),  # the prefix below: still above the base
    ("1711998313370225", 0),  # below the base: no base
])
def test_other_forms_and_prefixes(tmp_path: Path, odd: str, base_ns: int) -> None:
    """The odd one sends its chunk down the exact path; a small "ts" inside args stays."""
    path = tmp_path / "forms.json"
    path.write_text(MIX.replace("1000.0", odd).replace('"dur":10}]', '"dur":10,"args":{"ts":5}}]'))
    for kind in ("analysis", "full"):
        with traceaug.load(path, kind=kind, progress=False) as t:
            got = t.query("SELECT name, ts FROM slice")
            assert t.base_ns == base_ns
            if kind == "full":
                nested = t.query("SELECT int_value FROM args WHERE key = 'args.ts'")
                assert nested["int_value"].tolist() == [5]
        have = dict(zip(got["name"], (int(ts) + base_ns for ts in got["ts"]), strict=True))
        assert have["b"] == ns(Decimal(odd)) and have["c"] == ns("1712198313370100")
        assert abs(have["a"] - ns(Decimal("1712198313370000.5"))) < (DOUBLE_NS if not base_ns else 1)
