"""CUPTI range-profiler counters (``cuda_profiler_range`` events, PyTorch's ``_ExperimentalConfig(
profiler_metrics=..., profiler_measure_per_kernel=True)``) as a per-kernel table: the metrics recorded,
the CPU ops that launched each kernel, and the FLOPs the SASS instruction counts measure."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .tables import Columns

if TYPE_CHECKING:
    from ..trace import Trace

CATEGORY = "cuda_profiler_range"
# FLOPs per thread instruction of each SASS counter (a fused multiply-add is 2), by precision; as HTA's
# CUDA_SASS_INSTRUCTION_COUNTER_FLOPS (hta/analyzers/cupti_counter_analysis.py)
PRECISIONS = {"fp64": "d", "fp32": "f", "fp16": "h"}
FLOPS = {f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": (name, 2 if op == "fma" else 1)
         for name, p in PRECISIONS.items() for op in ("fma", "mul", "add")}
DURATION = "gpu__time_duration.sum"  # ns, when recorded: gives the throughput
DRAM_BYTES = ("dram__bytes_read.sum", "dram__bytes_write.sum")  # bytes, when recorded
NONE_TEXT = "no cuda_profiler_range events (CUPTI range-profiler metrics) in the trace"


def _ranges(trace: Trace) -> tuple[Columns, dict[str, np.ndarray]]:
    """Every range in time order (``ts``, ``name``) and each numeric metric's values (NaN: not recorded)."""
    r = trace.columns(f"SELECT id, ts, name, arg_set_id FROM slice WHERE category = '{CATEGORY}' "
                      "ORDER BY ts, id")
    a = trace.columns(f"SELECT s.id, a.key, COALESCE(a.int_value, a.real_value) AS value FROM slice s "
                      f"JOIN args a USING (arg_set_id) WHERE s.category = '{CATEGORY}' "
                      "AND a.key GLOB 'args.*' AND a.value_type IN ('int', 'uint', 'real')")
    row = {i: n for n, i in enumerate(r["id"].tolist())}
    metrics: dict[str, np.ndarray] = {}
    for i, key, value in zip(a["id"].tolist(), a["key"].tolist(), a["value"].tolist()):
        column = metrics.setdefault(key.removeprefix("args."), np.full(len(row), np.nan))
        column[row[i]] = value
    return {"ts": r["ts"], "name": r["name"]}, dict(sorted(metrics.items()))


def _ops(trace: Trace, n: int) -> tuple[list[str], list[str]]:
    """The outermost and innermost CPU op around the launch of each of ``n`` ranges: HTA's pairing, the
    i-th range with the i-th ``cudaLaunchKernel*`` call in time order; "" for all when the counts differ."""
    calls = trace.columns("SELECT id FROM slice WHERE category IN ('cuda_runtime', 'Runtime') "
                          "AND name GLOB 'cudaLaunchKernel*' ORDER BY ts, id")
    if len(calls["id"]) != n:
        return [""] * n, [""] * n
    s = trace.columns("SELECT id, parent_id, name, category FROM slice WHERE category IN "
                      "('cpu_op', 'Operator', 'cuda_runtime', 'Runtime', 'user_annotation')")
    up = {i: (p, name, c) for i, p, name, c in zip(s["id"].tolist(), s["parent_id"].tolist(),
                                                    s["name"].tolist(), s["category"].tolist())}
    top, bottom = [], []
    for i in calls["id"].tolist():
        ops, j = [], up[i][0]
        while j is not None and j == j and j in up:
            if up[j][2] in ("cpu_op", "Operator"):
                ops.append(up[j][1])
            j = up[j][0]
        top.append(ops[-1] if ops else "")
        bottom.append(ops[0] if ops else "")
    return top, bottom


def kernels(trace: Trace) -> dict:
    """``kernels``: per range (a kernel), its ``name``, the ``top_op`` / ``bottom_op`` that launched it,
    the FLOPs the SASS counters measure (``flops`` and per precision, NaN when none is recorded),
    ``duration_ns`` and ``tflops_per_s`` when ``gpu__time_duration.sum`` is, DRAM bytes when recorded;
    ``metrics``: every recorded metric, long form (kernel, metric, value); ``note`` when there is none."""
    r, metrics = _ranges(trace)
    n = len(r["ts"])
    top, bottom = _ops(trace, n)
    out: Columns = {"kernel": np.arange(n, dtype=np.int64), "name": r["name"].astype(object),
                    "top_op": np.array(top, dtype=object), "bottom_op": np.array(bottom, dtype=object)}
    counted = [m for m in metrics if m in FLOPS]
    flops = {p: np.zeros(n) for p in PRECISIONS}
    for m in counted:
        name, weight = FLOPS[m]
        flops[name] += weight * np.nan_to_num(metrics[m])
    if counted:  # counts below 2^53: exact in float64
        out["flops"] = sum(flops.values()).astype(np.int64)
        out |= {f"{p}_flops": flops[p].astype(np.int64) for p in PRECISIONS
                if any(FLOPS[m][0] == p for m in counted)}
    if DURATION in metrics:
        out["duration_ns"] = metrics[DURATION]
        if counted:
            with np.errstate(divide="ignore", invalid="ignore"):
                out["tflops_per_s"] = np.where(metrics[DURATION] > 0,
                                               out["flops"] / metrics[DURATION] / 1e3, np.nan)
    if all(m in metrics for m in DRAM_BYTES):
        out["dram_bytes"] = metrics[DRAM_BYTES[0]] + metrics[DRAM_BYTES[1]]
    names = list(metrics)
    long = {"kernel": np.repeat(np.arange(n, dtype=np.int64), len(names)),
            "metric": np.array(names * n, dtype=object),
            "value": np.array([metrics[m][i] for i in range(n) for m in names], dtype=np.float64)}
    return {"kernels": out, "metrics": long, "note": "" if n else NONE_TEXT}
