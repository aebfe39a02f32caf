"""``traceaug cupti`` (issue 35 item 6): the CUPTI range-profiler counters per kernel against the raw
``cuda_profiler_range`` events and HTA 0.6.1's ``get_cupti_counter_data_with_operators``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import require_hta, run_cli, shared_trace
from rawjson import load_raw

import traceaug
from traceaug.render.cupti_text import KERNELS, METRICS

TRACE = "kineto/a100_cupti_counters.json.gz"
PREFIX = "smsp__sass_thread_inst_executed_op_"


def raw_ranges(path: Path) -> list[dict]:
    """The cuda_profiler_range events in time order (file order at equal times)."""
    ranges = [e for e in load_raw(path)["traceEvents"] if e.get("cat") == "cuda_profiler_range"]
    return sorted(ranges, key=lambda e: e["ts"])


def flops_of(args: dict) -> dict[str, int]:
    """FLOPs by precision from the SASS thread-instruction counts: an FMA is 2, a MUL or ADD 1."""
    out = {"fp64": 0, "fp32": 0, "fp16": 0}
    for letter, precision in (("d", "fp64"), ("f", "fp32"), ("h", "fp16")):
        out[precision] = (2 * args.get(f"{PREFIX}{letter}fma_pred_on.sum", 0)
                          + args.get(f"{PREFIX}{letter}mul_pred_on.sum", 0)
                          + args.get(f"{PREFIX}{letter}add_pred_on.sum", 0))
    return out


@pytest.fixture(scope="module")
def tables() -> dict:
    return traceaug.cupti(shared_trace(TRACE), progress=False)


def test_metrics_and_flops_equal_the_raw_events(tables) -> None:
    """Every metric of every range as recorded; FLOPs per precision from the formula above."""
    raw = raw_ranges(shared_trace(TRACE))
    kernels, metrics = tables[KERNELS], tables[METRICS]
    assert len(kernels) == len(raw) == 77
    assert kernels["name"].tolist() == [e["name"] for e in raw]
    got = {(k, m): v for k, m, v in zip(metrics["kernel"], metrics["metric"], metrics["value"])}
    assert got == {(i, m): v for i, e in enumerate(raw) for m, v in e["args"].items()}
    for i, e in enumerate(raw):
        f = flops_of(e["args"])
        row = kernels.iloc[i]
        assert (row["fp64_flops"], row["fp32_flops"], row["fp16_flops"]) == (f["fp64"], f["fp32"], f["fp16"])
        assert row["flops"] == sum(f.values())
    assert kernels["flops"].sum() > 10**10


def test_ops_and_counters_equal_hta(tables, tmp_path: Path) -> None:
    """HTA pairs the i-th range with the i-th cudaLaunchKernel and names the outermost and innermost CPU
    op around it: the same ops here, the same counter values, and HTA's FLOP weights give ours."""
    require_hta()
    from hta.analyzers.cupti_counter_analysis import CUDA_SASS_INSTRUCTION_COUNTER_FLOPS
    from hta.trace_analysis import TraceAnalysis

    shutil.copy(shared_trace(TRACE), tmp_path / "rank0.json.gz")
    (hta,) = TraceAnalysis(trace_dir=str(tmp_path)).get_cupti_counter_data_with_operators()
    hta = hta.sort_values("ts").reset_index(drop=True)
    kernels = tables[KERNELS]
    assert kernels["top_op"].tolist() == hta["top_level_op"].tolist()
    assert kernels["bottom_op"].tolist() == hta["bottom_level_op"].tolist()
    flops = sum(hta[c] * w for c, w in CUDA_SASS_INSTRUCTION_COUNTER_FLOPS.items() if c in hta)
    assert kernels["flops"].tolist() == flops.astype("int64").tolist()


def test_a_trace_without_ranges_says_so() -> None:
    done = run_cli("cupti", str(shared_trace("kineto/a100_triton.json.gz")))
    assert done.returncode == 0, done.stderr
    assert "no cuda_profiler_range events (CUPTI range-profiler metrics) in the trace" in done.stdout
