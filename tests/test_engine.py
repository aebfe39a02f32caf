"""The embedded engine: compiled-module cache, memory64 retry, the upstream API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTDATA, shared_trace

import traceaug
from traceaug.engine.backend import TraceProcessor

PROBE = (
    "from traceaug.engine.wasm_module import load_build, cache_path;"
    "b = load_build(False); print(b.from_cache, cache_path(False).exists())"
)


def probe(cache: Path) -> str:
    env = {**os.environ, "TRACEAUG_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          check=True).stdout.split()


def test_second_start_reuses_the_compiled_module(tmp_path: Path) -> None:
    assert probe(tmp_path) == ["False", "True"]  # compiled, then cached
    assert probe(tmp_path) == ["True", "True"]  # reused


def test_two_threads_share_one_build() -> None:
    """diff's two loads start their engines at once: the cached module is checked and mapped
    once, and both get the same build."""
    import threading

    from traceaug.engine import wasm_module

    wasm_module._load_build.cache_clear()
    start, builds = threading.Barrier(2), []

    def get() -> None:
        start.wait()
        builds.append(wasm_module.load_build(False))

    threads = [threading.Thread(target=get) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds[0] is builds[1]
    assert wasm_module._load_build.cache_info().misses == 1


def test_corrupt_cache_is_rebuilt(tmp_path: Path) -> None:
    from traceaug.engine import wasm_module

    wasm_module.load_build(False)  # the user cache holds the compiled module: a copy of it, cut
    src = wasm_module.cache_path(False)
    (tmp_path / src.name).write_bytes(src.read_bytes()[:1000])
    sha = src.with_name(src.name + ".sha256")
    (tmp_path / sha.name).write_bytes(sha.read_bytes())
    assert probe(tmp_path) == ["False", "True"]  # rebuilt, not fatal
    assert probe(tmp_path) == ["True", "True"]


def test_cached_module_is_hashed_only_when_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                   ) -> None:
    """A cached module is hashed once; later starts trust its recorded size and modification
    time; a rewrite (same bytes or one flipped, same size) is hashed again, and refused if
    its bytes changed."""
    import shutil

    from traceaug.engine import wasm_module

    wasm_module.load_build(False)  # the user cache holds the compiled module
    src = wasm_module.cache_path(False)
    monkeypatch.setenv("TRACEAUG_CACHE_DIR", str(tmp_path))
    cached = wasm_module.cache_path(False)
    shutil.copyfile(src, cached)
    shutil.copyfile(src.with_name(src.name + ".sha256"), cached.with_name(cached.name + ".sha256"))
    hashed = []
    real = wasm_module._file_sha256
    monkeypatch.setattr(wasm_module, "_file_sha256", lambda p: hashed.append(p) or real(p))
    engine = wasm_module._make_engine(False)
    assert wasm_module._load_cached(engine, cached) is not None
    assert wasm_module._load_cached(engine, cached) is not None
    assert hashed == [cached]  # the second start read the ".verified" record
    data = cached.read_bytes()
    os.utime(cached, ns=(1, 1))  # not as verified: hashed again (the same bytes: accepted)
    assert wasm_module._load_cached(engine, cached) is not None and len(hashed) == 2
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    cached.write_bytes(bytes(flipped))
    assert wasm_module._load_cached(engine, cached) is None and len(hashed) == 3


def test_upstream_api_works_on_the_wasm_engine(tmp_path: Path) -> None:
    tp = TraceProcessor()
    try:
        tp.backend.parse(b'{"traceEvents":[{"ph":"X","name":"k","pid":1,"tid":2,"ts":5,"dur":3}]}')
        assert tp.backend.notify_eof() == ""
        df = tp.query("SELECT name, ts, dur FROM slice").as_pandas_dataframe()
    finally:
        tp.close()
    assert df.to_dict("records") == [{"name": "k", "ts": 5000, "dur": 3000}]


def test_appends_cross_the_request_buffer_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trace bytes go into the engine's request buffer piece by piece: with a 4 KiB buffer,
    pieces of odd sizes and a request framed by hand or by protobuf (one piece over
    ``APPEND_LIMIT``) cross it at every offset, and every event still arrives."""
    from traceaug.engine import backend, wasm_instance

    monkeypatch.setattr(wasm_instance, "REQUEST_BUFFER", 4096)  # what the engine is given
    monkeypatch.setattr(backend, "APPEND_LIMIT", 20_000)
    events = b",".join(b'{"ph":"X","name":"k%d","pid":1,"tid":2,"ts":%d,"dur":1}' % (i, 2 * i)
                       for i in range(3000))
    text = b'{"traceEvents":[' + events + b"]}"
    cuts = [0, 1, 2, 4095, 4100, 9000, 13_333, 60_000, len(text)]  # last piece > APPEND_LIMIT
    pieces = [text[a:b] for a, b in zip(cuts, cuts[1:])]
    tp = TraceProcessor()
    try:
        assert not tp.backend.parse(pieces[:-1]).error  # framed by hand
        assert not tp.backend.parse(pieces[-1]).error  # split and framed by protobuf
        assert tp.backend.notify_eof() == ""
        row = next(iter(tp.query("SELECT COUNT(*) AS n, SUM(ts) AS t, COUNT(DISTINCT name) AS d "
                                 "FROM slice")))
    finally:
        tp.close()
    assert (row.n, row.t, row.d) == (3000, 2000 * sum(range(3000)), 3000)


def test_out_of_memory_retries_on_memory64() -> None:
    """A real out-of-memory (32-bit heap capped at 64 MB) is retried on the memory64 build."""
    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    code = (
        f"import traceaug; t = traceaug.load({str(path)!r}, progress=False);"
        "print(t.memory64, t.query('SELECT COUNT(*) AS n FROM slice')['n'][0])"
    )
    env = {**os.environ, "TRACEAUG_WASM32_HEAP_MB": "64"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "67219"]


def test_memory64_build_gives_the_same_answers() -> None:
    path = shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")
    sql = "SELECT COUNT(*) AS n, SUM(dur) AS d, MIN(ts) AS t FROM slice"
    with traceaug.load(path, progress=False) as small, \
            traceaug.load(path, progress=False, memory64=True) as big:
        assert big.memory64 and not small.memory64
        assert small.query(sql).equals(big.query(sql))


def test_columns_are_typed_numpy_arrays() -> None:
    with traceaug.load(TESTDATA / "small_training.json", progress=False) as t:
        c = t.columns("SELECT 7 AS i, 1.5 AS f, 'x' AS s UNION ALL SELECT 8, NULL, NULL")
        df = t.query("SELECT COUNT(*) AS n, SUM(dur) AS total FROM slice")
        n = t.columns("SELECT COUNT(*) AS n, SUM(dur) AS total FROM slice")
    assert c["i"].dtype == np.int64 and c["i"].tolist() == [7, 8]
    assert c["f"].dtype == np.float64 and c["f"][0] == 1.5 and np.isnan(c["f"][1])
    assert c["s"].dtype == object and c["s"].tolist() == ["x", None]
    assert [n["n"][0], n["total"][0]] == [df["n"][0], df["total"][0]] and n["n"][0] > 0


def test_a_column_is_typed_whatever_the_batches_the_engine_sends() -> None:
    """The engine splits a large result into batches; a column mixing integers, a float and a
    string is one object column of the values as they are (each integer a Python int), not
    typed batch by batch (the first batch's integers became floats beside the float there)."""
    rows = 100_000
    with traceaug.load(TESTDATA / "small_training.json", progress=False) as t:
        sql = (f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {rows - 1}) "
               f"SELECT CASE i WHEN 0 THEN 0.5 WHEN {rows - 1} THEN 'x' ELSE i END AS v, i FROM n")
        assert len(t.tp.backend.execute_query(sql).batch) > 1  # the case this test is about
        c = t.columns(sql)
    want = [0.5, *range(1, rows - 1), "x"]
    assert c["v"].dtype == object and c["v"].tolist() == want
    assert [type(v) for v in c["v"].tolist()] == [type(v) for v in want]
    assert c["i"].dtype == np.int64 and c["i"].tolist() == list(range(rows))


@pytest.mark.parametrize("command", ["counters", "diff", "query", "info"])
def test_commands_never_import_pandas(tmp_path: Path, command: str) -> None:
    """counters, diff, query and info work on numpy tables and hide pandas from the perfetto API's
    import: pandas alone is a third of a second of a command."""
    src = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    args = {"counters": [str(src), str(tmp_path / "out.json.gz")],
            "diff": [str(shared_trace("kineto/diff/tiny_base")), str(shared_trace("kineto/diff/tiny_test"))],
            "query": [str(src), "SELECT COUNT(*) AS n FROM slice"], "info": [str(src)]}[command]
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "traceaug", command, *args],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert {"numpy", "perfetto.common.query_result_iterator", "wasmtime"} <= imported
    assert not {m for m in imported if m.startswith("pandas.")}  # only the halted "import pandas"
    with traceaug.load(TESTDATA / "small_training.json", progress=False) as t:  # in-process:
        assert len(t.query("SELECT name FROM slice")) > 0  # DataFrames as ever


def _heap(instance) -> np.ndarray:
    return np.frombuffer(instance._view(0, instance.memory.data_len(instance.store)), np.uint8).copy()


def test_an_engine_started_from_the_image_is_a_fresh_engine() -> None:
    """From the second start in a process, engines start from an image of a started heap:
    their memory is byte for byte a fully started engine's, but where two full starts differ
    from each other (the start's time, which only progress logs read)."""
    from traceaug.engine import wasm_instance
    from traceaug.engine.wasm_module import load_build

    build = load_build(False)
    full = []
    for _ in range(2):  # two full starts (from the process's second, each keeps its image)
        wasm_instance._IMAGES.pop(build.name, None)
        full.append(wasm_instance.WasmInstance(build))
    first, second = full
    assert build.name in wasm_instance._IMAGES
    starts = dict(wasm_instance._FULL_STARTS)
    imaged = wasm_instance.WasmInstance(build)
    assert wasm_instance._FULL_STARTS == starts  # started from the image, not in full
    a, b, c = _heap(first), _heap(second), _heap(imaged)
    assert len(a) == len(b) == len(c) == 57_081_856
    own = a != b  # what differs between any two full starts
    assert 0 < own.sum() <= 8
    assert np.array_equal(c[~own], a[~own])  # the image is the second's; the first is apart
    for i in (first, second, imaged):
        i.close()


def test_a_process_starts_from_the_heap_an_earlier_one_kept(tmp_path: Path) -> None:
    """A process with no image of its own starts from the one the cache keeps beside the module (written by
    the first full start there): its heap is byte for byte the heap the image was taken from (a restored
    engine answers as a fresh one: the tests below); a damaged file is never used (a full start writes it
    again)."""
    import dataclasses

    from traceaug.engine import wasm_instance
    from traceaug.engine.wasm_module import load_build

    build = dataclasses.replace(load_build(False), heap=tmp_path / "trace_processor.heap")

    def start() -> tuple[wasm_instance.WasmInstance, int]:
        """An engine started as a new process's first (no image of its own, its file not yet read)."""
        wasm_instance._IMAGES.pop(build.name, None)
        wasm_instance._READ.discard(build.heap)
        before = sum(wasm_instance._FULL_STARTS.values())
        return wasm_instance.WasmInstance(build), sum(wasm_instance._FULL_STARTS.values()) - before

    try:
        kept, full = start()  # none kept: a full start, whose heap is kept
        assert full == 1 and build.heap.stat().st_size > 1 << 20
        restored, full = start()
        assert full == 0  # from the file
        assert np.array_equal(_heap(restored), _heap(kept))
        data = bytearray(build.heap.read_bytes())
        data[-1] ^= 0xFF  # one bit of the heap's last page flipped on disk
        build.heap.write_bytes(bytes(data))
        again, full = start()
        assert full == 1 and build.heap.read_bytes() != bytes(data)  # not used; written again
        assert (_heap(again) != _heap(kept)).sum() <= 8  # a full start: as far from the first as two are
        for i in (kept, restored, again):
            i.close()
    finally:
        wasm_instance._IMAGES.pop(build.name, None)  # the process's engines start as before


def test_engines_of_one_process_never_see_an_earlier_trace() -> None:
    """Two ranks in sequence through one process's engines (the second started from the
    image the first ranks' starts left): the second rank's collective tables are exactly its
    raw JSON's NCCL kernels, GPU ops and CPU ops, none of the first rank's."""
    from collectives_raw import raw_kernels
    from rawjson import load_raw, ns

    from traceaug.analysis.collective_rank import LOAD, tables
    from traceaug.engine import wasm_instance
    from traceaug.trace import Trace

    first = shared_trace("kineto/jobs/dlrm_v100_8ranks/worker0_step_12.1694128201545.pt.trace.json.gz")
    second = shared_trace("kineto/a100_nccl_rank0_of2.json.gz")
    for _ in range(2):
        with Trace(first, progress=False, **LOAD) as trace:
            tables(trace)
    starts = dict(wasm_instance._FULL_STARTS)
    with Trace(second, progress=False, **LOAD) as trace:
        assert wasm_instance._FULL_STARTS == starts  # the second trace's engine: from the image
        got = tables(trace)
        base = trace.base_ns
        g = trace.columns("SELECT ts, dur, name FROM traceaug_gpu_op")
        c = trace.columns("SELECT ts, dur, name FROM slice "
                          "WHERE category IN ('cpu_op', 'Operator', 'user_annotation')")
    raw = load_raw(second)["traceEvents"]
    kernels = raw_kernels(raw)
    assert len(kernels) == 21
    assert list(zip(got.colls["ts"], got.colls["end"], got.colls["name"])) == \
        [(ts, end, e["name"]) for ts, end, e in kernels]

    def spans(cats: set[str]) -> list[tuple[int, int, str]]:
        return sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]) for e in raw
                      if e.get("ph") == "X" and e.get("cat") in cats)

    gpu = spans({"kernel", "gpu_memcpy", "gpu_memset"})
    cpu = spans({"cpu_op", "user_annotation"})
    assert len(gpu) == 3774 and len(cpu) == 14388
    def mine(cols) -> list[tuple[int, int, str]]:
        ts = [int(x) + base for x in cols["ts"]]
        return sorted((s, s + int(d), n) for s, d, n in zip(ts, cols["dur"], cols["name"]))

    assert mine(g) == gpu
    assert mine(c) == cpu


def test_engines_share_one_set_of_rpc_message_classes() -> None:
    """Upstream builds its RPC message classes from their descriptors for every engine
    (10 ms); ours are built once per process, and an engine still answers through them."""
    a, b = TraceProcessor(), TraceProcessor()
    try:
        assert a.protos is b.protos
        b.backend.parse(b'{"traceEvents":[{"ph":"X","name":"k","pid":1,"tid":2,"ts":5,"dur":3}]}')
        assert b.backend.notify_eof() == ""
        assert [(r.name, r.dur) for r in b.query("SELECT name, dur FROM slice")] == [("k", 3000)]
    finally:
        a.close()
        b.close()


EPOCH_PROBE = (
    "import sys; from traceaug import runtime;"
    "from traceaug.engine.backend import TraceProcessor;"
    "from traceaug.errors import EngineError;"
    "runtime.enter(runtime.Runtime(worker=sys.argv[1] == 'worker'));"
    "tp = TraceProcessor(); b = tp.backend.instance.build; b.engine.increment_epoch()\n"
    "try:\n"
    "    print(b.interruptible, list(tp.backend.execute_query('SELECT 6 * 7 AS x').batch[0].varint_cells))\n"
    "except EngineError as e:\n"
    "    print(b.interruptible, 'stopped')"
)


@pytest.mark.parametrize("worker, answer", [(False, "True stopped"), (True, "False [42]")])
def test_only_engines_a_signal_can_reach_check_the_epoch(worker: bool, answer: str) -> None:
    """Epoch checks (how Ctrl-C stops a running engine call) cost ~20-30% of the engine's CPU,
    so a job's pool worker, which the parent stops by killing it, runs a build without them:
    a bumped epoch stops the main process's engine, never a worker's."""
    out = subprocess.run([sys.executable, "-c", EPOCH_PROBE, "worker" if worker else "main"],
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == answer, out.stderr


def test_job_workers_starting_together_compile_the_engine_once(tmp_path: Path) -> None:
    """The first job on a machine starts its pool workers at once, each missing the worker
    build in the cache: one compiles it, the others wait for it and map the cached module."""
    env = {**os.environ, "TRACEAUG_CACHE_DIR": str(tmp_path)}
    code = ("from traceaug import runtime; runtime.enter(runtime.Runtime(worker=True));"
            "from traceaug.engine.wasm_module import load_build; print(load_build(False).from_cache)")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert sorted(o.strip() for o, _ in outs) == ["False", "True"], outs
    # the build without epoch checks (its cache name has no "-epoch")
    assert [p.name.endswith("-r0.cwasm") for p in tmp_path.glob("*.cwasm")] == [True]
