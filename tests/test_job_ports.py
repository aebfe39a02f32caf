"""A job verdict's replay from each rank's ports (``analysis.job_ports``, issue 38: a warm run's memory not
growing with the ranks' graphs): the same baseline and no-stragglers times as every rank's graph joined
(``job_replay.joined_model``, what ``whatif --no-stragglers`` replays), on the real DLRM job and on generated
jobs with planted late ranks, process groups and skewed clocks, with no graph joined."""

from __future__ import annotations

import tracemalloc
from functools import partial
from pathlib import Path

import jobgen
import pytest
from conftest import shared_trace

import traceaug
from traceaug.analysis import job_path as jp
from traceaug.analysis import job_replay
from traceaug.commands.stragglers import tables_and_path
from traceaug.job import parts
from traceaug.job.run import Work

DLRM = "kineto/jobs/dlrm_v100_8ranks"


def _verdict_parts(d: Path) -> tuple[dict, object, dict]:
    """Each rank's part of a verdict's replay (``job_path.replay_part``, as ``stragglers`` reads it), the
    ranks' collectives matched as the replay matches them, and each rank's whole graphs with their models
    (``job_path.rank_part``, as ``whatif`` reads them)."""
    with traceaug.load_job(d) as job:
        done = job.results("verdict", Work("stragglers", parts.apply, {"fn": tables_and_path},
                                           partial(parts.open_ops_and_tables, step=None)))
        whole = jp.keyed(job.results("path", Work("job_path", parts.job_path, {"scales": ()})))
    paths = jp.keyed({r: p for r, (_, p) in done.items()})
    return paths, jp.match_parts(paths), whole


def _joined(whole: dict, found, step: int) -> tuple[int, int]:
    """The step replayed on every rank's graph joined: unchanged, then at each collective's median arrival."""
    j = job_replay.joined_model(whole, found, step)
    return j.joined.replay(), job_replay._at_the_median(j).replay()


def _planted_dlrm(d: Path) -> Path:
    """16 ranks of the real DLRM job: rank 5's CPU late before collective 2, rank 11's compute kernel
    before collective 5 longer, rank 3's clock off by 250 µs."""
    job = jobgen.copy_job(shared_trace(DLRM), 16)
    jobgen.plant_cpu(job, 5, 2, 3000)
    jobgen.plant_gpu(job, 11, 5, 700)
    jobgen.shift_clock(job[3], 250)
    return jobgen.write(d, job)


def _groups(d: Path) -> Path:
    """8 ranks of the DLRM job in two process groups, rank 2's compute before collective 5 longer."""
    job = jobgen.copy_job(shared_trace(DLRM), 8)
    jobgen.plant_gpu(job, 2, 5, 1500)
    jobgen.split_groups(job, {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]})
    return jobgen.write(d, job)


def _early_end(d: Path) -> Path:
    """4 ranks, rank 2's loader late at every step; rank 0's all-reduce of step 1 ends before rank 2's starts
    (a record or a clock off): its instance's joins are only the pairs in time order, not every pair."""
    job = jobgen.job(4, 2, 500, steps=3)
    jobgen.kernels(job[0])[1]["dur"] = 5
    return jobgen.write(d, job)


JOBS = {
    "real": lambda d: shared_trace(DLRM),
    "planted": _planted_dlrm,
    "groups": _groups,
    "cpu": lambda d: jobgen.write(d, jobgen.job(4, 2, 500, steps=2)),
    "gpu": lambda d: jobgen.write(d, jobgen.job(6, 1, 300, steps=2, where="gpu")),
    "early end": _early_end,
}


@pytest.mark.parametrize("name", list(JOBS))
def test_ports_replay_is_the_joined_graphs(tmp_path: Path, name: str) -> None:
    """Every step's baseline and no-stragglers replay from the ports equals the joined graph's, and the
    late ranks' steps gain from the median arrival (the comparison is not of two unchanged replays)."""
    paths, found, whole = _verdict_parts(JOBS[name](tmp_path / name))
    steps = jp.step_keys(paths)
    got = {k: job_replay.replayed(paths, found, k) for k in steps}
    want = {k: _joined(whole, found, k) for k in steps}
    assert got == want
    assert any(b > w for b, w in want.values())


def test_a_verdict_joins_no_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``stragglers``' replay of a step never joins the ranks' graphs: its peak memory is a fraction of the
    joined graph's (16 ranks: one rank's graph unpacked at a time, a few numbers per rank kept)."""
    paths, found, whole = _verdict_parts(_planted_dlrm(tmp_path / "planted"))
    (step,) = jp.step_keys(paths)
    tracemalloc.start()
    try:
        want = _joined(whole, found, step)
        joined_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        monkeypatch.setattr(job_replay, "joined_model", lambda *a: pytest.fail("a graph was joined"))
        before = tracemalloc.get_traced_memory()[0]
        got = job_replay.without_stragglers(paths, found, step)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert got == want
    assert peak < joined_peak / 4, (peak, joined_peak)


def test_where_the_ports_cannot_tell_the_graphs_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """A step the ports cannot replay (an edge of the median replay back in time: told so here) is replayed
    on every rank's graph, read then: ``stragglers`` and ``report`` give the same verdicts."""
    d = shared_trace(DLRM)
    want = traceaug.stragglers(d).attrs["verdict"]
    shown = traceaug.report(d)["job: verdict"]
    monkeypatch.setattr(job_replay, "replayed", lambda *a: None)
    assert traceaug.stragglers(d).attrs["verdict"] == want
    assert traceaug.report(d)["job: verdict"].equals(shown)


def test_each_end_after_the_latest_of_the_other_arrivals() -> None:
    """``_latest_of_others`` (per member, the latest of its instance's other arrivals) and
    ``_first_latest_other`` (the first other member arriving that late) against every pair, with ties."""
    import numpy as np

    rng = np.random.default_rng(38)
    for _ in range(300):
        sizes = rng.integers(2, 7, rng.integers(1, 5))
        v = rng.integers(0, 4, int(sizes.sum())).astype(np.int64)  # (few values: many ties)
        at = np.cumsum(sizes) - sizes
        want = [max(int(v[a + j]) for j in range(s) if j != i) for a, s in zip(at, sizes) for i in range(s)]
        assert job_replay._latest_of_others(v, at).tolist() == want
        for a, s in zip(at.tolist(), sizes.tolist()):
            ts = v[a:a + s]
            first = [next(j for j in range(s) if j != i and ts[j] == max(ts[k] for k in range(s) if k != i))
                     for i in range(s)]
            assert job_replay._first_latest_other(ts).tolist() == first


def test_a_collectives_joins_grow_with_its_members_not_their_square(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A verdict's replay joins each member's end to its instance's other arrivals in one edge per end, not
    one per pair: the edges it binds per rank do not grow with the job (8 and 32 ranks, one all-reduce per
    step: 7 and 31 pair edges per rank before)."""
    from traceaug.analysis import replay

    bound = replay.binding
    per_rank = {}
    for n in (8, 32):
        paths, found, _ = _verdict_parts(jobgen.write(tmp_path / f"j{n}", jobgen.job(n, 1, 500)))
        edges: list[int] = []
        monkeypatch.setattr(replay, "binding", lambda *a, e=edges: (e.append(len(a[1])), bound(*a))[1])
        assert job_replay.replayed(paths, found, 0) is not None
        per_rank[n] = sum(edges) / n
    assert per_rank[32] <= per_rank[8], per_rank
