"""``traceaug summary``: the GPU Performance Analyzer's report, from CSVs, configs or traces."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import traceaug.paths as paths

from ..errors import TraceaugError
from . import declare
from .declare import POSITIVE, Call, Command, argument, echo, option

if TYPE_CHECKING:
    from ..analysis import gpa_summary as gpa


def _csv_input(title: str, files: dict[str, Path | None], notes: list[str]) -> gpa.SummaryInput:
    """Read a set of ``nsys stats`` CSVs; a missing optional report is noted, not fatal."""
    from ..analysis import gpa_summary as gpa
    from ..read import gpa_config, nsys_stats

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


def _trace_input(path: Path, title: str, tag: str | None) -> gpa.SummaryInput:
    """A trace's summary input, read on the job runner (a job of one rank)."""
    from ..analysis import gpa_summary as gpa
    from ..job import parts
    from ..job.run import Item, Work, run
    from ..read import nsys
    from ..read.ranks import TraceFile

    if not path.exists() and not nsys.is_report(path):
        raise TraceaugError(f"{path}: no such file")
    work = Work("analysis", parts.apply, {"fn": gpa.from_trace, "title": title, "tag": tag})
    return run(work, [Item(None, TraceFile(path, None))])[None]


def _cli_inputs(inputs: list[Path]) -> list[tuple[str, str, dict]]:
    """Command-line inputs: CSVs together form one input (by the report each header names);
    every other file is a trace of its own."""
    from ..read import nsys_stats

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


def compute(call: Call) -> list[dict]:
    """One summary (``gpa_summary.summarize``) per input of the config and of the command line."""
    from ..analysis import gpa_summary as gpa
    from ..read import gpa_config

    config, class_map_path, iters, gpus, tag = (call[k] for k in ("config", "class_map", "iters",
                                                                   "gpus", "tag"))
    specs: list[gpa_config.ConfigInput] = []
    mapping_doc, mapping_source = {}, "kernel_to_class_map"
    if config is not None:
        specs, mapping_doc = gpa_config.load(config)
        mapping_source = str(config)
    for title, fmt, files in _cli_inputs(list(call["inputs"])):
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
            data = _trace_input(spec.files["path"], spec.title, it_tag)
            data.notes[:0] = notes  # the default class map, said for a trace as for CSVs
            it_tag = it_tag or "ProfilerStep#*"
        n_iter = iters or spec.iters
        if n_iter is None:  # a trace: its iteration ranges, else the whole run as one
            n_iter = len(data.ranges["duration"]) if data.ranges is not None else 1
        results.append(gpa.summarize(data, mapping, n_iter, gpus or spec.gpus or 1, it_tag))
    return results


def _text(results: list[dict], fmt: str) -> str:
    from ..render.gpa_text import render_json, render_text

    return (render_json if fmt == "json" else render_text)(results)


COMMAND = Command(
    "summary", "Kernel time per class and iteration, NCCL, memory ops, NVTX iterations and the "
    "time not hidden behind compute (the GPU Performance Analyzer's report). INPUT: a Kineto "
    "trace, an nsys SQLite export, or `nsys stats` CSVs (cuda_gpu_kern_sum, "
    "cuda_gpu_mem_time_sum, nvtx_gpu_proj_trace).",
    (argument("inputs", metavar="INPUT...", nargs=-1, type=paths.Input(what=None)),
     option("--config", type=paths.Input(what="a JSON config"),
            help="A GPU Performance Analyzer JSON config (either layout)."),
     option("--class-map", type=paths.Input(what="a JSON class map"),
            help="JSON object: kernel-name substring -> class (replaces the config's)."),
     option("--iters", type=POSITIVE, help="Iterations in the input (divides the totals)."),
     option("--gpus", type=POSITIVE, help="GPUs in the input (divides the totals)."),
     option("--iter-tag", "tag", help="Name of the NVTX range of one iteration (glob with *)."),
     declare.fmt(choices=("text", "json"))),
    compute, lambda results, call: echo(_text(results, call["fmt"])),
    api=lambda results, call: results)
