"""Pass 1 in child processes (read.prefetch): the same plan as in-process, used once, and
never in the way when it fails or does not apply."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import orjson
import pytest
from conftest import TESTDATA, plan_fields, shared_trace, started_by

from traceaug.read import normalize, prefetch, workers
from traceaug.read.pass1 import GPU_ONLY_CATEGORIES, HOST_ONLY_CALLS
from traceaug.trace import Trace


def _children_are(pre: prefetch.Prefetched, how: str) -> bool:
    kind = workers.Forked if how == "fork" else subprocess.Popen
    return bool(pre._children) and all(isinstance(c, kind) for c in pre._children.values())


@pytest.mark.parametrize("how", ["fork", "spawn"])
@pytest.mark.parametrize("only", [None, "gpu", "ops"])
@pytest.mark.parametrize("name", ["testdata", "kineto/v100_ns_resolution.json.gz"])
def test_child_plan_equals_in_process_plan(name: str, only: str | None, how: str) -> None:
    path = TESTDATA / "small_training.json" if name == "testdata" else shared_trace(name)
    with started_by(how):
        pre = prefetch.start([path], only=only)
    assert _children_are(pre, how)
    child = pre.take(path, False, only)
    here = normalize.plan(path, full=False, only=only, workers=0)
    assert child is not None
    assert plan_fields(child) == plan_fields(here)
    if name == "testdata":
        assert child.moved_slices == 1  # the overlapping kernel pair got its lane in the child
    assert pre.take(path, False, only) is None  # a plan is handed out once


def test_trace_with_prefetched_plan_answers_the_same() -> None:
    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    sql = ("SELECT COUNT(*) AS n, SUM(dur) AS total, MIN(ts) AS first FROM slice "
           "WHERE name NOT LIKE 'traceaug%'")
    pre = prefetch.start([path], only="gpu")
    assert len(pre._children) == 1
    with Trace(path, only="gpu", prefetched=pre, progress=False) as t:
        assert not pre._children  # the loader took the child's plan
        got = t.query(sql).iloc[0].tolist(), t.span()
    with Trace(path, only="gpu", progress=False) as t:
        want = t.query(sql).iloc[0].tolist(), t.span()
    assert got == want
    raw = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kept = [e for e in raw if e.get("ph") == "X" and (
        (e.get("cat") in GPU_ONLY_CATEGORIES and e["name"] not in HOST_ONLY_CALLS)
        or e["name"].startswith("ProfilerStep#"))]
    assert got[0][:2] == [len(kept), sum(e["dur"] for e in kept) * 1000]


def test_a_load_kind_not_prefetched_plans_in_process() -> None:
    path = TESTDATA / "small_training.json"
    pre = prefetch.start([path], only="gpu")
    with Trace(path, prefetched=pre, progress=False) as t:  # an analysis load, not GPU-only
        assert t.only is None
        assert t.query("SELECT COUNT(*) AS n FROM slice WHERE name = 'aten::addmm'")["n"][0] == 6
    assert len(pre._children) == 1  # the GPU-only plan is still waiting: closing stops it
    child = next(iter(pre._children.values()))
    pre.close()
    assert child.poll() is not None and not pre._children


@pytest.mark.parametrize("content, reason", [
    (b'{"hello": [1, 2, 3]}', "no traceEvents array"),
    (b'{"traceEvents": [{"ph": "X", "ts": 1, ', "malformed JSON"),
])
@pytest.mark.parametrize("how", ["fork", "spawn"])
def test_a_failed_child_gives_no_plan(tmp_path: Path, content: bytes, reason: str, how: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with started_by(how):
        pre = prefetch.start([bad])
    assert list(pre._children) == [(bad.resolve(), "analysis")] and _children_are(pre, how)
    assert pre.take(bad, kind="analysis") is None  # the key it was started with: its child answered
    assert not pre._children
    with pytest.raises(Exception, match=reason):  # the loader then plans here and reports it
        normalize.plan(bad, full=False, workers=0)


def test_no_children_for_large_traces_rank_directories_or_missing_files(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    small = TESTDATA / "small_training.json"
    assert len(prefetch.start([TESTDATA / "rank_dir"])._children) == 0  # two ranks
    assert len(prefetch.start([small, tmp_path / "missing.json"])._children) == 0
    monkeypatch.setattr(prefetch, "UP_TO", small.stat().st_size - 1)
    assert len(prefetch.start([small])._children) == 0
    monkeypatch.setattr(prefetch, "UP_TO", small.stat().st_size)
    pre = prefetch.start([small])
    assert len(pre._children) == 1
    pre.close()


def test_a_forked_child_does_not_hold_its_siblings_pipes() -> None:
    """A child forked after another closes its copy of that one's request pipe: else the
    first would never see the end of its requests while the second lives."""
    def echo(requests, results) -> None:
        while True:
            try:
                workers.send(results, workers.recv(requests))
            except EOFError:
                return

    first = workers.fork(echo, requests=True)
    second = workers.fork(echo, requests=True)
    try:
        first.stdin.close()
        assert first.wait(timeout=10) == 0
        workers.send(second.stdin, [7])
        assert workers.recv(second.stdout) == [7]  # the second still serves
        second.stdin.close()
        assert second.wait(timeout=10) == 0
    finally:
        for child in (first, second):
            child.kill()
            child.stdout.close()


def test_a_directory_plans_its_one_rank_in_a_child() -> None:
    """The analyses of one rank of a directory (``--rank``) plan it in a child, as in this
    process; every rank of it runs in the job's pool instead, whose processes plan them."""
    directory = shared_trace("kineto/multi_rank_sampled")
    pre = prefetch.start_ranks(directory, None, "gpu_steps")
    assert pre._children == {}
    one = prefetch.start_ranks(directory, 1, "gpu_steps")
    assert [path.name for path, _ in one._children] == ["rank-1.json.gz"]
    path = directory / "rank-1.json.gz"
    here = normalize.plan(path, kind="gpu_steps", workers=0)
    assert plan_fields(one.take(path, kind="gpu_steps")) == plan_fields(here)
    one.close()
