"""``traceaug summary`` as printed: the GPU Performance Analyzer's report layout, in its ms (plus the
measured non-hidden time where a timeline exists), or every figure as JSON (ns)."""

from __future__ import annotations

import numpy as np

from ..output import json_text


def _rows(table: dict, cols: list[tuple[str, str, str]]) -> list[str]:
    """Fixed-width rows: (column key, header, format)."""
    head = "".join(f"{h:>{len(h) + 2}}" if i else f"{h:<24}" for i, (_, h, _) in enumerate(cols))
    lines = [head]
    for r in range(len(table["name"])):
        cells = []
        for i, (key, h, fmt) in enumerate(cols):
            v = table[key][r] / 1e6 if key.endswith("_ns") else table[key][r]  # ms, as the Analyzer
            text = format(v, fmt) if fmt else str(v)
            cells.append(f"{text:>{len(h) + 2}}" if i else f"{text:<24}")
        lines.append("".join(cells))
    return lines


KERNEL_COLS = [("name", "Class", ""), ("per_iter_ns", "TimePerIter(ms)", ".2f"),
               ("per_iter_instances", "InstancePerIter", "d"), ("per_iter_pct", "TimePerIter(%)", ".2f"),
               ("total_ns", "TotalTime(ms)", ".2f"), ("instances", "TotalInstance", "d"),
               ("total_pct", "TotalTime(%)", ".2f")]
PLAIN_COLS = [("name", "Class", ""), ("per_iter_ns", "TimePerIter(ms)", ".2f"),
              ("per_iter_instances", "InstancePerIter", "d"), ("total_ns", "TotalTime(ms)", ".2f"),
              ("instances", "TotalInstance", "d")]


def render_text(results: list[dict]) -> str:
    """The Analyzer's report layout, plus the measured non-hidden time where a timeline exists."""
    out: list[str] = []
    for res in results:
        out.append(f"===== {res['title']} =====")
        if "skipped" in res:
            out += [f"skipped: {res['skipped']}", ""]
            continue
        out += [f"note: {n}" for n in res["notes"]]
        k, n = res["kernel"], res["nccl_total"]
        out += [f"Iterations: {res['iters']}, GPUs: {res['gpus']}",
                f"Kernel time per iteration: {k['per_iter_ns'] / 1e6:.3f} (ms)",
                f"Kernel instances per iteration: {k['per_iter_instances']}",
                f"Kernel total time: {k['total_ns'] / 1e6:.3f} (ms)",
                f"Kernel total instances: {k['instances']}", "Kernel Statistic:"]
        out += _rows(res["classes"], KERNEL_COLS)
        out += ["", f"NCCL time per iteration: {n['per_iter_ns'] / 1e6:.3f} (ms)",
                f"NCCL instances per iteration: {n['per_iter_instances']}",
                f"NCCL total time: {n['total_ns'] / 1e6:.3f} (ms)",
                f"NCCL total instances: {n['instances']}", "NCCL Statistic:"]
        out += _rows(res["nccl"], PLAIN_COLS)
        if "mem" in res:
            out += ["", "Mem Ops Statistic:"] + _rows(res["mem"], PLAIN_COLS)
        v = res.get("nvtx")
        if v:
            out += ["", f"NVTX range count: {v['count']}",
                    f"NVTX average range time: {v['mean_ns'] / 1e6:.3f} (ms)",
                    f"NVTX total range time: {v['total_ns'] / 1e6:.3f} (ms)", "",
                    f"Estimated non-hidden NCCL, mem ops and bubble time per range: "
                    f"{v['non_hidden_per_range_ns'] / 1e6:.3f} (ms)",
                    f"Estimated non-hidden NCCL, mem ops and bubble time per range: "
                    f"{v['non_hidden_per_range_pct']:.2f} (%)",
                    f"Estimated non-hidden NCCL, mem ops and bubble total time: "
                    f"{v['non_hidden_total_ns'] / 1e6:.3f} (ms)",
                    f"Estimated non-hidden NCCL, mem ops and bubble total time: "
                    f"{v['non_hidden_total_pct']:.2f} (%)"]
        m = res.get("measured")
        if m:
            out += ["", "Measured on the timeline (iteration window minus the union of compute kernels):",
                    f"Measured non-hidden NCCL, mem ops and bubble time per range: "
                    f"{m['non_hidden_per_range_ns'] / 1e6:.3f} (ms)",
                    f"Measured non-hidden NCCL, mem ops and bubble time per range: "
                    f"{m['non_hidden_pct']:.2f} (%)",
                    f"Measured non-hidden NCCL, mem ops and bubble total time: "
                    f"{m['non_hidden_total_ns'] / 1e6:.3f} (ms)"]
        out.append("")
    return "\n".join(out) + "\n"


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def render_json(results: list[dict]) -> str:
    """Every figure, as JSON (per-range measurements included)."""
    return json_text(_plain(results))
