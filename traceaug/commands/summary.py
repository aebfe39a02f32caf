"""``traceaug summary``: the GPU Performance Analyzer's report, from CSVs, configs or traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..analysis import gpa_summary as gpa
from ..errors import TraceaugError
from ..output import json_text
from ..read import gpa_config, nsys, nsys_stats


def _csv_input(title: str, files: dict[str, Path | None], notes: list[str]) -> gpa.SummaryInput:
    """Read a set of ``nsys stats`` CSVs; a missing optional report is noted, not fatal."""
    tables: dict[str, dict | None] = {}
    for report in gpa_config.CSV_KEYS:
        path = files.get(report)
        if path is not None and report != "kernel_sum" and not path.exists():
            notes.append(f"{path}: no such file; {nsys_stats.TITLES[report]} figures left out")
            path = None
        tables[report] = None if path is None else nsys_stats.read(path, report)
    if tables["kernel_sum"] is None:
        raise TraceaugError(f"{title}: no cuda_gpu_kern_sum CSV given")
    return gpa.SummaryInput(title, tables["kernel_sum"], tables["mem_time_sum"],
                            tables["nvtx_proj_trace"], notes=notes)


def _trace_input(path: Path, title: str, tag: str | None, tp_bin: str | None) -> gpa.SummaryInput:
    from ..trace import Trace

    if not path.exists() and not nsys.is_report(path):
        raise TraceaugError(f"{path}: no such file")
    with Trace(path, tp_bin=tp_bin) as trace:
        return gpa.from_trace(trace, title, tag)


def _cli_inputs(inputs: list[Path]) -> list[tuple[str, str, dict]]:
    """Command-line inputs: CSVs together form one input (by the report each header names);
    every other file is a trace of its own."""
    csvs: dict[str, Path] = {}
    out: list[tuple[str, str, dict]] = []
    for p in inputs:
        if p.suffix.lower() == ".csv":
            kind = nsys_stats.kind_of(p)
            if kind in csvs:
                raise TraceaugError(f"{p}: a second {nsys_stats.TITLES[kind]} CSV (first: {csvs[kind]})")
            csvs[kind] = p
        else:
            out.append((p.name, "trace", {"path": p}))
    if csvs:
        if "kernel_sum" not in csvs:
            raise TraceaugError(f"{next(iter(csvs.values()))}: give the cuda_gpu_kern_sum CSV too")
        out.insert(0, (csvs["kernel_sum"].name, "csv", csvs))
    return out


def run(inputs: list[Path], config: Path | None, class_map_path: Path | None, iters: int | None,
        gpus: int | None, tag: str | None, tp_bin: str | None = None) -> list[dict]:
    """One summary (``gpa_summary.summarize``) per input of the config and of the command line."""
    specs: list[gpa_config.ConfigInput] = []
    mapping_doc, mapping_source = {}, "kernel_to_class_map"
    if config is not None:
        specs, mapping_doc = gpa_config.load(config)
        mapping_source = str(config)
    for title, fmt, files in _cli_inputs(inputs):
        specs.append(gpa_config.ConfigInput(title, fmt, files, None, None, None))
    if not specs:
        raise TraceaugError("give INPUT files or --config")
    if class_map_path is not None:
        mapping_doc = gpa_config.read_json(class_map_path, "class map")
        mapping_source = str(class_map_path)
    mapping = gpa.class_map(mapping_doc, mapping_source) if mapping_doc != {} else gpa.DEFAULT_MAP
    results = []
    for spec in specs:
        notes: list[str] = [gpa.DEFAULT_NOTE] if mapping is gpa.DEFAULT_MAP else []
        it_tag = tag or spec.tag
        if spec.format == "nsys-rep":
            results.append({"title": spec.title, "skipped": (
                f"{spec.files['path']}: an Nsight Systems report; run `nsys stats -r cuda_gpu_kern_sum,"
                "cuda_gpu_mem_time_sum,nvtx_gpu_proj_trace --format csv` or `nsys export --type "
                "sqlite` on it first (traceaug reads the CSVs or the .sqlite)")})
            continue
        if spec.format == "csv":
            data = _csv_input(spec.title, spec.files, notes)
        else:
            data = _trace_input(spec.files["path"], spec.title, it_tag, tp_bin)
            data.notes[:0] = notes  # the default class map, said for a trace as for CSVs
            it_tag = it_tag or "ProfilerStep#*"
        n_iter = iters or spec.iters
        if n_iter is None:  # a trace: its iteration ranges, else the whole run as one
            n_iter = len(data.ranges["duration"]) if data.ranges is not None else 1
        results.append(gpa.summarize(data, mapping, n_iter, gpus or spec.gpus or 1, it_tag))
    return results


# ----- output ---------------------------------------------------------------------------------

def _rows(table: dict, cols: list[tuple[str, str, str]]) -> list[str]:
    """Fixed-width rows: (column key, header, format)."""
    head = "".join(f"{h:>{len(h) + 2}}" if i else f"{h:<24}" for i, (_, h, _) in enumerate(cols))
    lines = [head]
    for r in range(len(table["name"])):
        cells = []
        for i, (key, h, fmt) in enumerate(cols):
            v = table[key][r]
            text = format(v, fmt) if fmt else str(v)
            cells.append(f"{text:>{len(h) + 2}}" if i else f"{text:<24}")
        lines.append("".join(cells))
    return lines


KERNEL_COLS = [("name", "Class", ""), ("per_iter_ms", "TimePerIter(ms)", ".2f"),
               ("per_iter_instances", "InstancePerIter", "d"), ("per_iter_pct", "TimePerIter(%)", ".2f"),
               ("total_ms", "TotalTime(ms)", ".2f"), ("instances", "TotalInstance", "d"),
               ("total_pct", "TotalTime(%)", ".2f")]
PLAIN_COLS = [("name", "Class", ""), ("per_iter_ms", "TimePerIter(ms)", ".2f"),
              ("per_iter_instances", "InstancePerIter", "d"), ("total_ms", "TotalTime(ms)", ".2f"),
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
                f"Kernel time per iteration: {k['per_iter_ms']:.3f} (ms)",
                f"Kernel instances per iteration: {k['per_iter_instances']}",
                f"Kernel total time: {k['total_ms']:.3f} (ms)",
                f"Kernel total instances: {k['instances']}", "Kernel Statistic:"]
        out += _rows(res["classes"], KERNEL_COLS)
        out += ["", f"NCCL time per iteration: {n['per_iter_ms']:.3f} (ms)",
                f"NCCL instances per iteration: {n['per_iter_instances']}",
                f"NCCL total time: {n['total_ms']:.3f} (ms)",
                f"NCCL total instances: {n['instances']}", "NCCL Statistic:"]
        out += _rows(res["nccl"], PLAIN_COLS)
        if "mem" in res:
            out += ["", "Mem Ops Statistic:"] + _rows(res["mem"], PLAIN_COLS)
        v = res.get("nvtx")
        if v:
            out += ["", f"NVTX range count: {v['count']}",
                    f"NVTX average range time: {v['mean_ms']:.3f} (ms)",
                    f"NVTX total range time: {v['total_ms']:.3f} (ms)", "",
                    f"Estimated non-hidden NCCL, mem ops and bubble time per range: "
                    f"{v['non_hidden_per_range_ms']:.3f} (ms)",
                    f"Estimated non-hidden NCCL, mem ops and bubble time per range: "
                    f"{v['non_hidden_per_range_pct']:.2f} (%)",
                    f"Estimated non-hidden NCCL, mem ops and bubble total time: "
                    f"{v['non_hidden_total_ms']:.3f} (ms)",
                    f"Estimated non-hidden NCCL, mem ops and bubble total time: "
                    f"{v['non_hidden_total_pct']:.2f} (%)"]
        m = res.get("measured")
        if m:
            out += ["", "Measured on the timeline (iteration window minus the union of compute kernels):",
                    f"Measured non-hidden NCCL, mem ops and bubble time per range: "
                    f"{m['non_hidden_per_range_ms']:.3f} (ms)",
                    f"Measured non-hidden NCCL, mem ops and bubble time per range: "
                    f"{m['non_hidden_pct']:.2f} (%)",
                    f"Measured non-hidden NCCL, mem ops and bubble total time: "
                    f"{m['non_hidden_total_ms']:.3f} (ms)"]
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
