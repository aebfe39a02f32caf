"""Jobs (issue 25): what a rank's task sends back to the main process is its small tables,
never its GPU ops, so the main process's memory does not grow with the job's ops.

The observable is the real task's result as it crosses a process (its pickle), on traces
built with a known number of kernels: 100 and 5,000 per step.
"""

from __future__ import annotations

import pickle
from functools import partial
from pathlib import Path

import kineto_gen as kg
import pytest

from traceaug.analysis import kernels, report
from traceaug.job import parts
from traceaug.job.run import Item, Work, task
from traceaug.read.ranks import TraceFile
from traceaug.render.analyses_html import analyses as page
from traceaug.runtime import Runtime

NAMES = ("gemm_kernel", "relu_kernel", "softmax_kernel", "layernorm_kernel")


def _rank(path: Path, per_step: int, steps: int = 2) -> TraceFile:
    """A rank of ``steps`` steps, each launching ``per_step`` kernels (four names) that run
    back to back on one stream, 1 µs apart."""
    evs = list(kg.METADATA)
    for i in range(steps):
        t = kg.BASE_US + i * per_step * 20
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1000,
                    "tid": 1000, "ts": t, "dur": per_step * 20 - 5})
        for k in range(per_step):
            c = i * per_step + k + 1
            evs += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000,
                     "tid": 1000, "ts": t + k * 5, "dur": 4, "args": {"correlation": c}},
                    {"ph": "X", "cat": "kernel", "name": NAMES[k % 4], "pid": 0, "tid": 7,
                     "ts": t + 10 + k * 10, "dur": 9,
                     "args": {"correlation": c, "device": 0, "stream": 7}}]
    return TraceFile(kg.write(path, kg.trace(evs)), 0)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[int, TraceFile]:
    d = tmp_path_factory.mktemp("reduce")
    return {n: _rank(d / f"rank_{n}.json", n) for n in (100, 5000)}


WORKER = Runtime(progress=False).for_worker()


def _task(file: TraceFile, work: Work):
    """``work``'s task on ``file``, as a job's worker runs it."""
    return task(work, Item(file.rank, file), WORKER)


def _sent(file: TraceFile, part, collectives: bool = False) -> bytes:
    """What ``file``'s task of an analysis command sends back, as it crosses a process."""
    work = Work("collectives" if collectives else "gpu_steps", parts.part,
                {"fn": part.func, "in_job": True, **part.keywords},
                parts.open_ops_and_tables if collectives else parts.open_ops)
    return pickle.dumps(_task(file, work))


def _ops(file: TraceFile):
    """A rank's GPU ops, as ``traceaug.load_job`` keeps them."""
    return _task(file, Work("gpu_steps", parts.ops, opens=parts.open_ops))


def test_a_ranks_kernels_result_does_not_grow_with_its_kernels(ranks: dict) -> None:
    """``kernels``' per-rank result: one row per kernel name (4 here), whether the rank ran
    200 kernels or 10,000; its GPU ops, which the main process used to receive, grow 50×."""
    part = partial(kernels.part, step=None)
    small, big = (_sent(ranks[n], part) for n in (100, 5000))
    ops = {n: len(pickle.dumps(_ops(ranks[n]))) for n in (100, 5000)}
    assert ops[5000] > 20 * ops[100]  # the old result: every op
    assert len(big) <= len(small) + 256, (len(small), len(big))
    tables = pickle.loads(big).tables
    assert sorted(tables["kernels"]["name"].tolist()) == sorted(NAMES)
    assert tables["kernels"]["count"].tolist() == [2500] * 4  # 2 steps × 5,000 / 4 names


@pytest.mark.parametrize("part", [partial(report.part, step=None, top=10),
                                  partial(page, step=None)], ids=["report", "report-html"])
def test_a_ranks_report_result_holds_no_ops(ranks: dict, part) -> None:
    """``report``'s per-rank result (text and page, with the rank's collective tables):
    no ``GpuOps`` in it, and a small part of the ops' size on a rank of 10,000 kernels."""
    sent = _sent(ranks[5000], part, collectives=True)
    ops = len(pickle.dumps(_ops(ranks[5000])))
    assert b"GpuOps" not in sent
    result = pickle.loads(sent)
    assert result.ops == 10_000 and result.error is None
    assert len(pickle.dumps(result.tables)) < ops / 4, (len(pickle.dumps(result.tables)), ops)


OPS = ("aten::mm", "aten::relu", "aten::softmax", "aten::layer_norm")
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _job_rank(path: Path, per_step: int, steps: int = 2) -> TraceFile:
    """A rank of ``steps`` steps, each ``per_step`` CPU ops (four names, 4 µs each) launching
    as many kernels (four names, 9 µs each) on stream 7, then an all-reduce on stream 20 that
    starts after them: the ranks built differ only in their number of non-collective events."""
    evs = list(kg.METADATA)
    span = per_step * 20 + 100
    for i in range(steps):
        t = kg.BASE_US + i * span
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1000,
                    "tid": 1000, "ts": t, "dur": span - 5})
        for k in range(per_step):
            c = i * per_step + k + 1
            evs += [{"ph": "X", "cat": "cpu_op", "name": OPS[k % 4], "pid": 1000, "tid": 1000,
                     "ts": t + k * 5, "dur": 4},
                    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000,
                     "tid": 1000, "ts": t + k * 5 + 1, "dur": 2, "args": {"correlation": c}},
                    {"ph": "X", "cat": "kernel", "name": NAMES[k % 4], "pid": 0, "tid": 7,
                     "ts": t + 10 + k * 10, "dur": 9,
                     "args": {"correlation": c, "device": 0, "stream": 7}}]
        c = 1_000_000 + i
        evs += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000,
                 "tid": 1000, "ts": t + per_step * 5 + 15, "dur": 5, "args": {"correlation": c}},
                {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 20,
                 "ts": t + per_step * 10 + 20, "dur": 20,
                 "args": {"correlation": c, "device": 0, "stream": 20,
                          "Collective name": "allreduce", "In msg nelems": 1024,
                          "Out msg nelems": 1024, "dtype": "Float", "Group size": 2}}]
    return TraceFile(kg.write(path, kg.trace(evs)), 0)


@pytest.fixture(scope="module")
def job_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[int, TraceFile]:
    d = tmp_path_factory.mktemp("reduce_job")
    return {n: _job_rank(d / f"rank_{n}.json", n) for n in (100, 5000)}


def test_a_ranks_collective_tables_do_not_grow_with_its_other_events(job_ranks: dict) -> None:
    """``collectives`` / ``stragglers`` / ``merge``'s per-rank result (``commands.collectives``)
    and ``report JOB``'s collective tables: as small for a rank of 10,000 CPU ops and kernels
    as for one of 200 (the old result carried every op); what names a cause still comes back:
    per name, the time of the ops between the two all-reduces (step 1's)."""
    from traceaug.commands.collectives import TABLES

    found = {n: _task(job_ranks[n], TABLES) for n in (100, 5000)}
    small, big = (len(pickle.dumps(found[n])) for n in (100, 5000))
    assert len(found[5000].colls) == 2
    assert big <= small + 512, (small, big)
    part = partial(report.part, step=None, top=10)
    sent = {n: pickle.loads(_sent(job_ranks[n], part, collectives=True)).collectives
            for n in (100, 5000)}
    assert len(pickle.dumps(sent[5000])) <= len(pickle.dumps(sent[100])) + 512
    for n in (100, 5000):
        for t in (found[n], sent[n]):
            at = t.windows.index()
            # the second all-reduce (row 1) after the first (row 0): step 1's ops, each name
            # n / 4 times, kernels 9 µs, CPU ops 4 µs (kernels from the first one's end,
            # CPU ops from its launch)
            gpu = t.windows.totals(at[("gpu", 1, 0)])
            cpu = t.windows.totals(at[("cpu", 1, 0)])
            assert gpu.to_dict() == {name: n // 4 * 9_000.0 for name in NAMES}
            assert cpu.to_dict() == {name: n // 4 * 4_000.0 for name in OPS}


def test_finding_the_ranks_holds_no_files_first_bytes(tmp_path: Path) -> None:
    """Rank discovery reads each file's first MB for its ``distributedInfo.rank``; it kept
    those bytes for every file until all were read: 310 MB in the main process for 256 ranks
    of the A100 trace (87 MB for 64), before any rank was analysed. Here 48 ranks of 1.5 MB:
    the discovery's allocations peak below a few files' heads, and the ranks are the recorded
    ones (not the names': the files are named in reverse)."""
    import tracemalloc

    from traceaug.read.ranks import resolve

    pad = [{"ph": "i", "name": "pad", "pid": 1, "tid": 1, "ts": kg.BASE_US + i, "s": "t",
            "args": {"text": "x" * 200}} for i in range(6000)]
    for r in range(48):
        doc = kg.trace(list(kg.METADATA) + pad)
        doc = {**doc, "distributedInfo": {"rank": r, "world_size": 48}}
        kg.write(tmp_path / f"rank-{47 - r}.json", doc)
    assert (tmp_path / "rank-0.json").stat().st_size > 1 << 20
    tracemalloc.start()
    try:
        files = resolve(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(f.path.name, f.rank) for f in files] == [(f"rank-{47 - r}.json", r) for r in range(48)]
    assert peak < 6 << 20, f"{peak / 2**20:.1f} MB held while finding 48 ranks"


def test_a_ranks_verdict_part_is_its_replay_models_alone(job_ranks: dict) -> None:
    """``stragglers``' and ``report JOB``'s per-rank result for the job verdict: the collective tables once
    (the replay's part shares them; they were read twice) and, of the job path, only what the verdict's
    replay uses: under 60 % of the critical path's part of the same rank (which holds the path's arrays;
    the verdict's part was that part), and with ``--step`` only that step's graph (both commands)."""
    from traceaug.commands.stragglers import tables_and_path

    f = job_ranks[5000]
    full = _task(f, Work("job_path", parts.job_path, {"scales": ()}))
    tables, part = pickle.loads(pickle.dumps(_task(f, Work("job_path", parts.apply, {"fn": tables_and_path},
                                                           parts.open_ops_and_tables))))
    assert part.tables.colls is tables.colls  # (a shallow copy: the replay keys it by the ops' rank)
    assert sorted(part.graphs) == sorted(full.graphs) == [0, 1]
    assert len(pickle.dumps(part)) < 0.6 * len(pickle.dumps(full)), (len(pickle.dumps(part)),
                                                                      len(pickle.dumps(full)))
    one = _task(f, Work("job_path", parts.apply, {"fn": tables_and_path},
                        partial(parts.open_ops_and_tables, step=1)))[1]  # (as ``stragglers --step 1`` asks)
    assert sorted(one.graphs) == [1]
    sent = pickle.loads(_sent(f, partial(report.part, step=None, top=10), collectives=True))
    assert sent.path.tables.colls is sent.collectives.colls
    assert len(pickle.dumps(sent.path)) < 0.6 * len(pickle.dumps(full))
    work = Work("job_path", parts.part, {"fn": report.part, "in_job": True, "step": 1, "top": 10},
                partial(parts.open_ops_and_tables, step=1))  # (as ``report JOB --step 1`` asks)
    assert sorted(_task(f, work).path.graphs) == [1]


def test_a_ranks_verdict_part_holds_its_steps_ports(job_ranks: dict) -> None:
    """The verdict's part keeps each step's replay model reduced to its collectives' kernels (``job_ports``:
    the main process relaxes a few numbers per rank, never every rank's graph joined), no model: the ports of
    the model the critical path's part of the same rank computed, a fraction of that model's bytes."""
    import dataclasses

    import numpy as np

    from traceaug.analysis.job_ports import ports
    from traceaug.commands.stragglers import tables_and_path

    f = job_ranks[5000]
    full = _task(f, Work("job_path", parts.job_path, {"scales": ()}))
    _, part = _task(f, Work("job_path", parts.apply, {"fn": tables_and_path}, parts.open_ops_and_tables))
    unpacked = {k: part.graphs[k] for k in part.graphs}
    assert sorted(unpacked) == [0, 1]
    for k, g in unpacked.items():
        assert g.model is None
        want = ports(full.graphs[k].model, full.graphs[k].coll_event)
        for name in (x.name for x in dataclasses.fields(want)):
            assert np.array_equal(getattr(g.ports, name), getattr(want, name)), (k, name)
    models = sum(len(pickle.dumps(g.model)) for g in full.graphs.values())
    assert len(pickle.dumps(part.graphs)) < 0.25 * models, (len(pickle.dumps(part.graphs)), models)


def test_a_ranks_critical_path_part_holds_its_steps_packed(job_ranks: dict) -> None:
    """``whatif`` / ``critical-path --job``'s part of a rank, from its own read and from the one whole read
    the cache keeps, holds each step's graph and replay model packed: a job holds every rank's part and
    replays one step at a time (64 ranks of the A100 trace: 1.0 GB held unpacked); a step unpacks with its
    model, or without it where the part asked for none."""
    from traceaug.read.kinds import ONE_READ

    f = job_ranks[5000]
    own = _task(f, Work("job_path", parts.job_path, {"scales": ()}))
    whole = _task(f, Work(ONE_READ, parts.job_path_of, {"scales": ()}, parts.open_whole))
    bare = _task(f, Work(ONE_READ, parts.job_path_of, {"scales": None}, parts.open_whole))
    for part in (own, whole):
        assert sorted(part.graphs) == [0, 1]
        unpacked = sum(len(pickle.dumps(part.graphs[k])) for k in part.graphs)
        assert len(pickle.dumps(part)) < 0.5 * unpacked, (len(pickle.dumps(part)), unpacked)
        assert all(part.graphs[k].model is not None for k in part.graphs)
    edges = [len(whole.graphs[k].model.src) for k in whole.graphs]
    assert [len(own.graphs[k].model.src) for k in own.graphs] == edges
    assert all(bare.graphs[k].model is None and bare.graphs[k].picked is None for k in bare.graphs)
    assert [len(bare.graphs[k].src) for k in bare.graphs] == [len(whole.graphs[k].src) for k in whole.graphs]
