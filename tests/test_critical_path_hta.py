"""``critical-path --hta-weights`` against HTA's newest release (``traceinsight`` 0.6.1, ``import hta``) on
every shared trace with steps (its first step; the A100 6-stream trace's step 551 too): the summed weights of
HTA's path equal ours. HTA weighs 0 the own time of its BLOCKING_SYNC_CALLS but cudaMemcpyAsync (counted
through its runtime-lock edge), and of no hip* call. Like HTA, ``--hta-weights`` rounds a trace with
fractional-µs timestamps (each start up, each end down to a whole µs), takes the GPU ops launched in the step
(none whose launch is not in the trace) and follows them past the step's end, and walks the backward thread's
calls on the forward thread's stack (``a100_nccl_rank0_of2``, ``multi_rank_sampled``).

Where HTA is wrong, ours is HTA's answer on a copy of the trace that avoids the fault, and the difference is
asserted: ``v100_ns_resolution`` (HTA reads 16-digit epoch µs through float64, in steps of 0.25 µs, before
rounding: its path is 43 µs longer), ``no_distributed_info`` (no GPU op: HTA fails), ``cpu_only_gloo`` (no
CPU op in the step: no path). Not compared: the 2021-schema pair ``v100_resnet50_2021`` (HTA fails on its
first step: "Could not find runtime index")."""

from __future__ import annotations

import gzip
import json
import logging
import os
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import TESTDATA, require_hta, shared_trace

import traceaug
from traceaug.analysis import critical_path as cp

DLRM = "kineto/jobs/dlrm_v100_8ranks/worker{}_step_12.{}.pt.trace.json.gz"
CASES = [  # (trace, step or None for the whole trace)
    ("testdata:pageable_copy_cross_stream", None),
    ("kineto/a100_rank0_of16_6streams.json.gz", 550),
    ("kineto/a100_rank0_of16_6streams.json.gz", 551),
    ("kineto/a100_event_sync.json.gz", 100),
    ("kineto/a100_nccl_rank0_of2.json.gz", 4),
    ("kineto/a100_triton.json.gz", 1),
    ("kineto/mi250_rocm62.json.gz", 1),
    ("kineto/h100_bert_small_inference.json.gz", 6),
    ("kineto/h100_qwen05b_inference.json.gz", 6),
    ("kineto/multi_rank_sampled/rank-0.json.gz", 551),
    ("kineto/multi_rank_sampled/rank-1.json.gz", 551),
    ("kineto/diff/a100_vs_v100/control/rank-3.json.gz", 1009),
    ("kineto/diff/a100_vs_v100/test/rank-1.json.gz", 1009),
    ("kineto/diff/h100_runs/a/trace.json.gz", 1),
    ("kineto/diff/h100_runs/b/trace.json.gz", 6),
    ("kineto/diff/tiny_base/base.json.gz", 1009),
    ("kineto/diff/tiny_test/test.json.gz", 1009),
] + [(DLRM.format(rank, stamp), 10) for rank, stamp in enumerate(
    ("1694128201545", "1694128201556", "1694128201554", "1694128201557", "1694128201547", "1694128201549",
     "1694128201553", "1694128201553"))]


@pytest.fixture(scope="module")
def hta_length(tmp_path_factory):
    """HTA's critical path of ``ProfilerStep#step`` (or the whole trace) of a trace: its edges' summed
    weights in ns; each trace read by HTA once."""
    require_hta()
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    read: dict = {}

    def length(path: Path, step: int | None) -> int:
        if path not in read:
            folder = tmp_path_factory.mktemp("hta")
            os.symlink(path, folder / ("rank-0.json.gz" if path.suffix == ".gz" else "rank-0.json"))
            read[path] = TraceAnalysis(trace_dir=str(folder))
        a = read[path]
        graph, ok = a.critical_path_analysis(rank=next(iter(a.t.traces)),
                                             annotation="" if step is None else f"ProfilerStep#{step}",
                                             instance_id=None if step is None else 0)
        assert ok
        return round(sum(e.weight for e in graph.critical_path_edges_set) * 1000)

    return length


def _ours(path: Path, step: int | None) -> int:
    with traceaug.load(path, kind="sync", progress=False) as t:
        return cp.analyse(t, step=step, sync_wait=False).length


def _edited(path: Path, out: Path, edit) -> Path:
    """A copy of the trace at ``out`` with ``edit`` applied to its events (numbers read exactly)."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    edit(doc["traceEvents"])
    with gzip.open(out, "wt", compresslevel=1) as f:
        json.dump(doc, f, default=float)
    return out


@pytest.mark.parametrize("rel,step", CASES, ids=[f"{r.split('/')[-1].split('.')[0]}-{s}" for r, s in CASES])
def test_hta_weights_give_htas_length(rel: str, step: int | None, hta_length) -> None:
    path = (TESTDATA / "critical_path" / f"{rel.split(':')[1]}.json" if rel.startswith("testdata:")
            else shared_trace(rel))
    assert _ours(path, step) == hta_length(path, step)


def test_hta_reads_epoch_us_through_float64(hta_length, tmp_path: Path) -> None:
    """HTA parses ``ts`` 1712195495505815.027 as 1712195495505815.0 (a double's step there is 0.25 µs) and
    rounds that up to ...815, not ...816; with the epoch's whole seconds taken off every ``ts`` (exact in a
    double) it gives our path: its own is 43 µs longer."""
    path = shared_trace("kineto/v100_ns_resolution.json.gz")

    def rebase(events: list) -> None:
        base = min(e["ts"] for e in events if "ts" in e) // 1_000_000 * 1_000_000
        for e in events:
            if "ts" in e:
                e["ts"] -= base

    exact = _edited(path, tmp_path / "rebased.json.gz", rebase)
    ours = _ours(path, 101)
    assert ours == hta_length(exact, 101)
    assert hta_length(path, 101) - ours == 43_000


def _kernel_before(events: list) -> None:
    """One kernel and its launch before every event: HTA then has the queue-length series it fails without
    (they lie outside any step, so no step's path changes)."""
    first = min(e["ts"] for e in events if "ts" in e)
    cpu = next(e for e in events if e.get("cat") == "cpu_op")
    corr = {"correlation": 987654321}
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": cpu["pid"],
                "tid": cpu["tid"], "ts": int(first) - 100, "dur": 5, "args": corr},
               {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": int(first) - 90, "dur": 5,
                "args": {**corr, "device": 0, "stream": 7}}]


def test_no_gpu_op(hta_length, tmp_path: Path) -> None:
    """HTA fails on a trace without GPU ops ("Queue length time series is required"); with one kernel
    before the trace it gives our path."""
    path = shared_trace("kineto/no_distributed_info.json.gz")
    with pytest.raises(AssertionError, match="Queue length"):
        hta_length(path, 1009)
    assert _ours(path, 1009) == hta_length(_edited(path, tmp_path / "kernel.json.gz", _kernel_before), 1009)


def test_no_cpu_op_in_the_step(hta_length, tmp_path: Path) -> None:
    """``cpu_only_gloo``'s step 551 holds user annotations only (its four ``aten::empty`` come after it): no
    path, HTA's fails (fewer than 2 nodes), ours weighs 0."""
    path = shared_trace("kineto/cpu_only_gloo.json.gz")
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    step = next(e for e in events if e.get("name") == "ProfilerStep#551")
    ops = [e for e in events if e.get("cat") in ("cpu_op", "cuda_runtime")]
    assert ops and not [e for e in ops if step["ts"] <= e["ts"] <= step["ts"] + step["dur"]]
    with pytest.raises(AssertionError):
        hta_length(_edited(path, tmp_path / "kernel.json.gz", _kernel_before), 551)
    assert _ours(path, 551) == 0
