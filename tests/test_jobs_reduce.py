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

from traceaug.commands import analyses
from traceaug.job.ranks import TraceFile
from traceaug.job.tasks import analysis_rank, gpu_rank
from traceaug.report.analyses_html import analyses as page

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


def _sent(file: TraceFile, part, collectives: bool = False) -> bytes:
    """What ``file``'s task sends back, as it crosses a process."""
    return pickle.dumps(analysis_rank(file, {"progress": False}, part, True, collectives))


def test_a_ranks_kernels_result_does_not_grow_with_its_kernels(ranks: dict) -> None:
    """``kernels``' per-rank result: one row per kernel name (4 here), whether the rank ran
    200 kernels or 10,000; its GPU ops, which the main process used to receive, grow 50×."""
    part = partial(analyses.kernels_part, step=None)
    small, big = (_sent(ranks[n], part) for n in (100, 5000))
    ops = {n: len(pickle.dumps(gpu_rank(ranks[n], {"progress": False}))) for n in (100, 5000)}
    assert ops[5000] > 20 * ops[100]  # the old result: every op
    assert len(big) <= len(small) + 256, (len(small), len(big))
    tables = pickle.loads(big).tables
    assert sorted(tables["kernels"]["name"].tolist()) == sorted(NAMES)
    assert tables["kernels"]["count"].tolist() == [2500] * 4  # 2 steps × 5,000 / 4 names


@pytest.mark.parametrize("part", [partial(analyses.report_part, step=None, top=10),
                                  partial(page, step=None)], ids=["report", "report-html"])
def test_a_ranks_report_result_holds_no_ops(ranks: dict, part) -> None:
    """``report``'s per-rank result (text and page, with the rank's collective tables):
    no ``GpuOps`` in it, and a small part of the ops' size on a rank of 10,000 kernels."""
    sent = _sent(ranks[5000], part, collectives=True)
    ops = len(pickle.dumps(gpu_rank(ranks[5000], {"progress": False})))
    assert b"GpuOps" not in sent
    result = pickle.loads(sent)
    assert result.ops == 10_000 and result.error is None
    assert len(pickle.dumps(result.tables)) < ops / 4, (len(pickle.dumps(result.tables)), ops)
