"""``traceaug critical-path``: IN with its critical path drawn, or (``--job``) each step's path
across every rank, joined at each collective, drawn on the merged job trace."""

from __future__ import annotations

from pathlib import Path

import click

import traceaug.paths as paths

from ..errors import TraceaugError
from . import rewriters
from .declare import COUNT, US, Call, echo, fmt, option, rank, said, step


# ----- a whole job (``--job``) ------------------------------------------------------------------
def job_paths(call: Call) -> tuple[list, int | None]:
    """The job's critical path per step (``--hta-weights``: the longest by weight), and the events
    it added to OUT (unless None: the merged job trace with the path as lanes and arrows)."""
    import traceaug.guard as guard

    from ..analysis import job_path as jp
    from ..analysis import job_timing
    from ..job import parts
    from ..job.run import Work, items_of, local_files, run
    from ..rewrite import job_path as drawn
    from ..rewrite.merge_job import write_job

    src, dst = call["src"], None if call.get("summary_only") else call.get("dst")
    files = call.files("src")
    if len(files) < 2:
        raise TraceaugError(f"{src}: --job needs a directory of two ranks or more")
    if dst is not None:  # before any work, as merge checks it
        guard.check([f.path for f in files], [Path(dst)])
    scales = None if call["hta_weights"] else ()
    done = run(Work("job_path", parts.job_path, {"scales": scales}), items_of(files), call.job)
    found, paths = job_timing.paths(jp.keyed(done), call["step"], call["hta_weights"])
    if dst is None:
        return paths, None
    window = (min(p.window.start for p in paths), max(p.window.end for p in paths)) if paths else None
    added = drawn.events(paths)
    with local_files(files) as local:
        write_job(local, Path(dst), found, added, window)
    return paths, len(added)


OPTIONS = ("step", "annotation", "instance", "all_edges", "hta_weights", "max_gap_us", "top", "roofline")


def prepare(call: Call) -> None:
    """``--job`` takes the job's options only; else a rewriter's IN and OUT, and one window."""
    if call["whole_job"]:
        if call["annotation"] is not None or call["rank"] is not None or call["all_edges"] \
                or call["roofline"] or call["open_ui"]:
            raise click.UsageError("--job takes --step, --top, --format, --summary-only, "
                                   "--hta-weights and the job options only")
        if call["dst"] is None and not call["summary_only"]:
            raise click.UsageError("give OUT, or --summary-only")
        return
    rewriters.prepare(call)
    if call["step"] is not None and call["annotation"] is not None:
        raise click.UsageError("choose --step or --annotation, not both")


def compute(call: Call):
    """The job's paths (``--job``), else each rank's through the rewriter; for the API the path and
    summary DataFrames (the rewriter run too when OUT is named)."""
    if call.get("whole_job"):
        return job_paths(call)
    if call.api and call.get("step") is not None and call.get("annotation") is not None:
        raise TraceaugError("choose step or annotation, not both")
    if not call.api:
        return (_marked if call.get("roofline") else _rewrite)(call)
    from ..analysis.critical_path import frames
    from ..job import parts
    from ..job.run import Work, items_of, run

    files = call.files("src")
    if len(files) != 1:
        raise TraceaugError(f"{call['src']}: {len(files)} ranks: choose one with rank=")
    gap_ns = round(call["max_gap_us"] * 1000) if call["max_gap_us"] else None
    work = Work("sync", parts.apply, {"fn": frames, "step": call["step"],
                                      "annotation": call["annotation"],
                                      "instance": call["instance"],
                                      "sync_wait": not call["hta_weights"], "max_gap_ns": gap_ns,
                                      "top": call["top"]})
    out = next(iter(run(work, items_of(files), call.job).values()))
    if call.get("dst") is not None:
        (_marked if call.get("roofline") else _rewrite)(call)
    return out


_rewrite = rewriters.compute("critical-path", lambda call: {k: call[k] for k in OPTIONS})
_marked = rewriters.compute("critical-path", lambda call: {k: call[k] for k in OPTIONS}, "MARKED")
_show = rewriters.show("critical-path")


def show(result, call: Call) -> None:
    if call["whole_job"]:
        from ..render.critical_path_text import job_text

        found, added = result
        if added is not None:
            said(f"wrote {call['dst']} ({added} events added by critical-path --job)")
        echo(paths.shown(job_text(found, call["fmt"], call["top"])),
             err=paths.is_stdout(call["dst"]))
    else:
        _show(result, call)


def _api(result, call: Call):
    """(path, summary) DataFrames: of one trace (``analysis.critical_path.frames``); of a job
    (``--job``), per step the job's step cut along its path, ``step, rank, ts_ns, end_ns,
    weight_ns, kind, category, event``, and per step and category ``step, category, ns,
    share_pct`` (per rank in ``summary.attrs["ranks"]``)."""
    if not call.get("whole_job"):
        return result
    import pandas as pd

    from ..analysis import job_path as jp

    found = result[0]
    segments = pd.concat([jp.segments(p) for p in found], ignore_index=True)
    cats, ranks = [], []
    for p in found:
        s = jp.summary(p)
        cats.append(pd.DataFrame({"step": p.step, **s["categories"]}))
        ranks.append(pd.DataFrame({"step": p.step, **s["ranks"]}))
    summary = pd.concat(cats, ignore_index=True)
    summary.attrs["ranks"] = pd.concat(ranks, ignore_index=True)
    return segments, summary


def _findings(done, call: Call) -> list[dict]:
    """``critical_path.blocked_call`` per rank's path (``render.findings``); none yet for ``--job``."""
    from ..render.findings import blocked_findings

    return [] if call["whole_job"] else blocked_findings(done)


COMMAND = rewriters.command(
    "critical-path", "Write OUT: IN with its critical path as flow arrows and a \"Critical "
    "path\" lane.\n\nIN and OUT may be directories of per-rank traces (one output per rank, "
    "same names).\nWith --job, IN is a job's directory and OUT one file: the merged job trace.",
    (step("Only ProfilerStep#N (default: the whole trace)."),
     option("--annotation", help="Only the window of a slice whose name contains this text."),
     option("--instance", type=int, default=0, show_default=True,
            help="Which --annotation slice, 0 = the first in time."),
     option("--all-edges", is_flag=True, help="Also draw the graph's edges off the path."),
     option("--hta-weights", is_flag=True,
            help="Weigh syncs 0 as HTA does (default: the CPU's wait after the GPU op); "
                 "with --job: the longest path by weight (default: the timing path)."),
     option("--max-gap-us", type=US, default=1500, show_default=True,
            help="Longest kernel-to-kernel gap that is a dependency, as HTA (0: any)."),
     option("--top", type=COUNT, default=10, show_default=True,
            help="Top events (--job: segments) in the summary."),
     option("--roofline", is_flag=True,
            help="Mark each GPU op on the lane with the % of roofline and bound of the op that "
                 "launched it (efficiency's models; loads the CPU ops' shapes)."),
     rank(),
     option("--job", "whole_job", is_flag=True,
            help="IN a directory of ranks: one path per step across every rank, joined at "
                 "each collective; OUT the merged job trace with the path drawn."),
     fmt("Format of the summary printed on stdout.")),
    lambda call: {k: call[k] for k in OPTIONS}, out={"one_file": "whole_job"},
    load_kind="sync",
    compute=compute, show=show, api=_api, prepare=prepare,
    kind=lambda p: None if p.get("whole_job") else "sync_shapes" if p.get("roofline") else "sync",
    findings=_findings, schema_version=2)
