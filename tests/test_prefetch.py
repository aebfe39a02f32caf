"""Pass 1 in child processes (read.prefetch): the same plan as in-process, used once, and
never in the way when it fails or does not apply."""

from __future__ import annotations

import gzip
import subprocess
import time
from pathlib import Path

import orjson
import pytest
from conftest import TESTDATA, plan_fields, shared_trace, started_by

from traceaug import processes
from traceaug.read import normalize, prefetch
from traceaug.read.kinds import HOST_ONLY_CALLS, STEP_CATEGORIES
from traceaug.trace import Trace


@pytest.fixture(autouse=True)
def _nothing_pending(monkeypatch: pytest.MonkeyPatch):
    """Every test starts and ends with no child planning (``prefetch`` is process-wide); the small test traces
    are planned in children as larger ones are (``prefetch.FROM``: ``test_startup.py``)."""
    monkeypatch.setattr(prefetch, "FROM", 0)
    prefetch.close()
    yield
    prefetch.close()


def _children_are(how: str) -> bool:
    kind = processes.Forked if how == "fork" else subprocess.Popen
    children = [c for pool, _ in prefetch._pending.values() for c in pool.children]
    return bool(children) and all(isinstance(c, kind) for c in children)


@pytest.mark.parametrize("how", ["fork", "spawn"])
@pytest.mark.parametrize("kind", ["analysis", "gpu", "ops"])
@pytest.mark.parametrize("name", ["testdata", "kineto/v100_ns_resolution.json.gz"])
def test_child_plan_equals_in_process_plan(name: str, kind: str, how: str) -> None:
    path = TESTDATA / "small_training.json" if name == "testdata" else shared_trace(name)
    with started_by(how):
        prefetch.start([path], kind)
    assert _children_are(how)
    child = prefetch.take(path, kind)
    here = normalize.plan(path, kind=kind, workers=0)
    assert child is not None
    assert plan_fields(child) == plan_fields(here)
    if name == "testdata":
        assert child.moved_slices == 1  # the overlapping kernel pair got its lane in the child
    assert prefetch.take(path, kind) is None  # a plan is handed out once


def test_trace_with_prefetched_plan_answers_the_same() -> None:
    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    sql = ("SELECT COUNT(*) AS n, SUM(dur) AS total, MIN(ts) AS first FROM slice "
           "WHERE name NOT LIKE 'traceaug%'")
    prefetch.start([path], "gpu")
    assert len(prefetch._pending) == 1
    with Trace(path, "gpu", progress=False) as t:
        assert not prefetch._pending  # the loader took the child's plan
        got = t.query(sql).iloc[0].tolist(), t.span()
    with Trace(path, only="gpu", progress=False) as t:
        want = t.query(sql).iloc[0].tolist(), t.span()
    assert got == want
    raw = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kept = [e for e in raw if e.get("ph") == "X" and (
        (e.get("cat") in STEP_CATEGORIES and e["name"] not in HOST_ONLY_CALLS)
        or e["name"].startswith("ProfilerStep#"))]
    assert got[0][:2] == [len(kept), sum(e["dur"] for e in kept) * 1000]


def test_a_load_kind_not_prefetched_plans_in_process() -> None:
    path = TESTDATA / "small_training.json"
    prefetch.start([path], "gpu")
    with Trace(path, progress=False) as t:  # an analysis load, not GPU-only
        assert t.only is None
        assert t.query("SELECT COUNT(*) AS n FROM slice WHERE name = 'aten::addmm'")["n"][0] == 6
    assert len(prefetch._pending) == 1  # the GPU-only plan is still waiting: closing stops it
    child = next(iter(prefetch._pending.values()))[0].children[0]
    prefetch.close()
    assert child.poll() is not None and not prefetch._pending


@pytest.mark.parametrize("content, reason", [
    (b'{"hello": [1, 2, 3]}', "no traceEvents array"),
    (b'{"traceEvents": [{"ph": "X", "ts": 1, ', "malformed JSON"),
])
@pytest.mark.parametrize("how", ["fork", "spawn"])
def test_a_failed_child_gives_no_plan(tmp_path: Path, content: bytes, reason: str, how: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with started_by(how):
        prefetch.start([bad], "analysis")
    assert list(prefetch._pending) == [(bad.resolve(), "analysis")] and _children_are(how)
    assert prefetch.take(bad, "analysis") is None  # its child answered: no plan
    assert not prefetch._pending
    with pytest.raises(Exception, match=reason):  # the loader then plans here and reports it
        normalize.plan(bad, full=False, workers=0)


def test_no_children_for_large_traces_or_missing_files(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    small = TESTDATA / "small_training.json"
    prefetch.start([tmp_path / "missing.json"], "analysis")
    assert not prefetch._pending
    monkeypatch.setattr(prefetch, "UP_TO", small.stat().st_size - 1)
    prefetch.start([small], "analysis")
    assert not prefetch._pending
    monkeypatch.setattr(prefetch, "UP_TO", small.stat().st_size)
    prefetch.start([small], "analysis")
    assert len(prefetch._pending) == 1


def _exit_code(child: processes.Forked, within_s: float = 10) -> int | None:
    """The child's exit code once it ends, None if it is still running after ``within_s``."""
    deadline = time.monotonic() + within_s
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return child.poll()


def test_a_forked_child_does_not_hold_its_siblings_pipes() -> None:
    """A child forked after another closes its copy of that one's request pipe: else the
    first would never see the end of its requests while the second lives."""
    def echo(requests, results) -> None:
        while True:
            try:
                processes.send(results, processes.recv(requests))
            except EOFError:
                return

    first = processes.fork(echo, requests=True)
    second = processes.fork(echo, requests=True)
    try:
        first.stdin.close()
        assert _exit_code(first) == 0
        processes.send(second.stdin, [7])
        assert processes.recv(second.stdout) == [7]  # the second still serves
        second.stdin.close()
        assert _exit_code(second) == 0
    finally:
        for child in (first, second):
            child.kill()
            child.stdout.close()


def test_a_command_prefetches_the_files_it_selected(tmp_path: Path) -> None:
    """A command plans each of its inputs in a child when each is one local file: a lone
    trace, or one rank of a directory (``--rank``); every rank of a directory runs in the
    job's pool instead, whose processes plan them."""
    from traceaug.commands.declare import Call
    from traceaug.commands.kernels import COMMAND as KERNELS

    directory = shared_trace("kineto/multi_rank_sampled")
    Call(KERNELS, {"trace": directory, "rank": None, "step": None}).prefetch()
    assert prefetch._pending == {}
    Call(KERNELS, {"trace": directory, "rank": 1, "step": 5}).prefetch()
    assert [(p.name, k) for p, k in prefetch._pending] == [("rank-1.json.gz", "gpu_steps")]
    path = directory / "rank-1.json.gz"
    here = normalize.plan(path, kind="gpu_steps", workers=0)
    assert plan_fields(prefetch.take(path, "gpu_steps")) == plan_fields(here)
