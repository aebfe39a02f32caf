"""Run ``traceaug kernels | gaps | breakdown | launches`` over a file or every rank of a
directory, and render their tables (times in µs in the terminal, exact ns in csv / json,
every column named with its unit: ``public``). Each command is a per-rank part (``*_part``,
run in the rank's task where its ops are: only its tables come back) and a combine of the
ranks' parts, so the main process never holds a rank's ops."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ..analysis import breakdown as bd
from ..analysis import gaps as gp
from ..analysis import kernels as kn
from ..analysis import launches as ln
from ..analysis.gpu_steps import LOAD, GpuOps
from ..analysis.tables import Columns, objects
from ..errors import TraceaugError
from ..output import CELL_WIDTH, cut, json_text, render_columns

if TYPE_CHECKING:
    from ..job.run import JobOptions
    from ..read.prefetch import Prefetched

# Columns the analyses keep in ns under bare names (``analysis.*``, the report reads them so):
# CSV, JSON and the API's DataFrames name them ``*_ns`` (``public``), the terminal ``*_us``.
NS = {"total", "mean", "std", "min", "max", "median", "window_start", "window", "cpu_step", "busy",
      "idle", "computation", "communication", "memory", "comp_only", "comm_only", "mem_only",
      "comp_comm", "comp_mem", "comm_mem", "comp_comm_mem", "cpu_duration", "gpu_duration",
      "launch_delay", "mean_total", "min_total", "max_total", "mean_cpu_duration",
      "max_cpu_duration", "mean_launch_delay", "max_launch_delay", "mean_wait", "mean_transfer"}
# Shares, as percent (``kernels``'), or as fractions (the idle breakdown's ``ratio``) made percent.
PERCENT = {"share_launches": "launches_pct", "share_time": "time_pct"}
FRACTION = {"ratio": "share_pct"}


@dataclass
class RankPart:
    """One rank's share of an analysis command, computed where the rank was read (its task,
    ``job.tasks.analysis_rank``): the command's small tables (``tables``), never the rank's ops,
    so the main process holds tables, not a job's ops. ``error``: the analysis's user error (a
    step the rank lacks), raised by the main process in rank order as it always was."""

    rank: int | None
    ops: int  # the rank's GPU ops (a job with none on any rank is an error)
    tables: dict
    collectives: Any = None  # report: the rank's collective tables from the same read
    error: TraceaugError | None = None


def run_part(part: Callable, g: GpuOps, job: bool, collectives: Any = None) -> RankPart:
    """``part(g, job)`` (a rank's tables; ``job``: one rank of several) as a ``RankPart``."""
    try:
        return RankPart(g.rank, len(g.ops["ts"]), part(g, job), collectives)
    except TraceaugError as e:
        return RankPart(g.rank, len(g.ops["ts"]), {}, collectives, e)


def load_job(path: Path, part: Callable, rank: int | None = None, tp_bin: str | None = None,
             prefetched: Prefetched | None = None, job: JobOptions | None = None,
             collectives: bool = True, kind: str = LOAD["kind"]
             ) -> tuple[list[RankPart], list | None]:
    """Each rank's ``RankPart`` of ``part`` (``part(ops, job) -> dict``, picklable: a
    module-level function or a ``functools.partial`` of one), ranks in order, computed in each
    rank's task of the job's executor (``job.api.gather``) so that only tables come back; and
    for a job of several ranks (``collectives``) each rank's collective tables
    (``analysis.collectives.ranked``) taken from the same read of the rank
    (``job.tasks.report_rank``); None for one rank (no job to match). ``kind``: the load
    kind ``part`` needs (without collectives)."""
    from ..analysis.collectives import ranked
    from ..job.api import gather
    from ..job.run import JobOptions
    from ..job.tasks import analysis_rank

    job = job or JobOptions()
    files = job.select(path, rank)
    options = {"tp_bin": tp_bin, "prefetched": prefetched}
    both = collectives and len(files) > 1
    task = partial(analysis_rank, part=part, job=len(files) > 1, collectives=both,
                   kind=None if both else kind)
    done = gather(path, task, "collectives" if both else kind, rank, job, options,
                  files=files)
    if not any(p.ops for p in done.values()):
        raise TraceaugError(f"{path}: no GPU kernels, copies or sets to analyse")
    tables = ranked({r: p.collectives for r, p in done.items()}) if both else None
    for p in done.values():
        p.collectives = None
    return list(done.values()), tables


def tables(parts: list[RankPart]) -> list[dict]:
    """Each rank's tables; the first rank's analysis error (in rank order) raised, as the
    analyses raised it when they ran here."""
    for p in parts:
        if p.error is not None:
            raise p.error
    return [p.tables for p in parts]


def concat(tables: list[Columns]) -> Columns:
    """Tables with the same columns, one after the other."""
    if not tables:
        return {}
    return {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}


def public(table: Columns) -> Columns:
    """The table as CSV, JSON and the API's DataFrames give it: each time with its unit in its
    name (``total`` -> ``total_ns``), each share a percent named ``*_pct``."""
    out = {}
    for c, v in table.items():
        if c in NS:
            out[f"{c}_ns"] = v
        elif c in PERCENT:
            out[PERCENT[c]] = v
        elif c in FRACTION:
            out[FRACTION[c]] = 100 * v
        else:
            out[c] = v
    return out


def clip_names(table: Columns, width: int = CELL_WIDTH) -> Columns:
    """Long names cut as a terminal table cuts them (``output.cut``), for pages that show
    tables outside the terminal (the report)."""
    out = dict(table)
    for c in ("name", "from", "to"):
        if c in out:
            out[c] = objects([cut(n, width) if isinstance(n, str) else n for n in out[c].tolist()])
    return out


def shown(table: Columns, fmt: str, full_names: bool = True) -> Columns:
    """A ``public`` table as rendered: in the terminal ``*_ns`` columns become ``*_us``; the
    window's start and the full names of a transition's ops are left to csv / json.
    ``full_names=False``: names cut (``clip_names``)."""
    table = public(table if full_names else clip_names(table))
    if fmt != "table":
        return table
    out = {}
    for c, v in table.items():
        if c in ("from", "to") and "transition" in table:  # the short "A → B" says it
            continue
        if c == "window_start_ns":
            continue
        if c.endswith("_ns") and v.dtype.kind in "iuf":
            out[f"{c[:-3]}_us"] = v / 1e3
        elif c.endswith("_ns") and v.dtype == object:  # integers with missing values (None)
            out[f"{c[:-3]}_us"] = objects([None if x is None else x / 1e3 for x in v.tolist()])
        else:
            out[c] = v
    return out


def render(sections: list[tuple[str, Columns]], fmt: str, full_names: bool = False) -> str:
    """Titled tables: in the terminal one after the other (a histogram as bars); in csv each
    table as its own block after a ``# title`` line; in json one object keyed by title. Long
    names are cut in the terminal unless ``full_names`` (``output.cut``)."""
    if fmt == "json":
        data = {title: orjson.loads(render_columns(public(t), "json")) for title, t in sections}
        return json_text(data)
    parts = []
    for title, t in sections:
        if fmt == "table" and "lo_us" in t:
            parts.append(f"{title}\n{bars(t)}")
            continue
        body = render_columns(shown(t, fmt), fmt, full=full_names)
        parts.append(f"# {title}\n{body}" if fmt == "csv" else f"{title}\n{body}")
    return "\n".join(parts)


def comm_rows(g: GpuOps, step: int | None) -> tuple[bool, Any]:
    """A rank's part of ``comm_split``: whether it has a communication kernel, and its
    communication kernels' rows (``collectives.from_gpu_ops``; rank None: set by the job)."""
    from ..analysis import collectives as co

    return (bool((g.ops["category"] == "communication").any()),
            co.from_gpu_ops(g.rank, g.trace.base_ns, g.ops, g.rows(step)))


def comm_split(rows: list[tuple[bool, Any]]) -> dict[str, dict] | None:
    """Each communication kernel's wait and transfer across the ranks (``kernel_split``) from
    each rank's ``comm_rows`` (a rank without a number: its place), None when no rank has one."""
    if not any(has for has, _ in rows):
        return None
    from ..analysis import collectives as co

    return co.kernel_split([t if t.rank is not None else replace(t, rank=i)
                            for i, (_, t) in enumerate(rows)])


def kernels_part(g: GpuOps, job: bool, step: int | None, kind: str | None = None,
                 sort: str = "total") -> dict:
    """A rank's part of ``kernels``: its sorted kernel table, and in a job its ``comm_rows``."""
    out = {"kernels": kn.sort(kn.kernel_table(g, step, kind), sort)}
    if job:
        out["comm"] = comm_rows(g, step)
    return out


def kernels(parts: list[dict], top: int | None) -> list[tuple[str, Columns]]:
    """``kernels``' sections from each rank's ``kernels_part``."""
    tables = [p["kernels"] for p in parts]
    out = [("kernels", concat([{k: v[:top] for k, v in t.items()} for t in tables]))]
    if len(parts) > 1:
        across = kn.across_ranks(tables, comm_split([p["comm"] for p in parts]))
        out.append(("kernels across ranks", {k: v[:top] for k, v in across.items()}))
    return out


def gaps_part(g: GpuOps, job: bool, step: int | None, top: int | None, sort: str) -> dict:
    """A rank's part of ``gaps``: its gap tables, its ``top`` transitions, and its positive
    gaps (what the job's histogram counts)."""
    gap = gp.stream_pairs(g, step)["gap"]
    t = {k: v[:top] for k, v in gp.transitions(g, step, sort).items()}
    return {"gap": gap[gap > 0], "transitions": {"rank": objects([g.rank] * len(t["count"])), **t},
            "stream": gp.stream_gaps(g, step), "device": gp.device_gaps(g, step)}


def gaps(parts: list[dict], hist_min: float | None, hist_max: float | None,
         bins: int) -> list[tuple[str, Columns]]:
    """``gaps``' sections from each rank's ``gaps_part``."""
    hist = gp.histogram(np.concatenate([p["gap"] for p in parts]), hist_min, hist_max, bins)
    return [("gaps per stream", concat([p["stream"] for p in parts])),
            ("gaps per device (union of its streams)", concat([p["device"] for p in parts])),
            ("gap histogram (µs, log-spaced bins, gaps > 0 on every stream)", hist),
            ("kernel transitions on a stream (gap after A before B)",
             concat([p["transitions"] for p in parts]))]


def bars(hist: Columns, width: int = 50) -> str:
    """The histogram drawn in the terminal."""
    peak = max(int(hist["count"].max(initial=0)), 1)
    def us(v: float) -> str:  # log-spaced bins start below 1 µs: 0.0012, not 0.0
        return f"{v:.1f}" if abs(v) >= 1 or v == 0 else f"{v:.2g}"

    lines = [f"{us(lo):>12} – {us(hi):<12} {'█' * round(width * n / peak):<{width}} {n}"
             for lo, hi, n in zip(hist["lo_us"].tolist(), hist["hi_us"].tolist(),
                                  hist["count"].tolist())]
    return "\n".join(lines) + "\n"


def breakdown_part(g: GpuOps, job: bool, step: int | None, kernel_wait_us: float) -> dict:
    """A rank's part of ``breakdown``: its temporal and idle breakdowns."""
    return {"temporal": bd.temporal(g, step), "idle": bd.idle_by_stream(g, step, kernel_wait_us)}


def breakdown(parts: list[dict]) -> list[tuple[str, Columns]]:
    """``breakdown``'s sections from each rank's ``breakdown_part``."""
    return [("temporal breakdown per step (GPU windows; step None = all steps)",
             concat([p["temporal"] for p in parts])),
            ("idle breakdown per stream (HTA's rules)", concat([p["idle"] for p in parts]))]


OUTLIERS = (("runtime outliers", "runtime", "cpu_duration"),
            ("launch-delay outliers", "delay", "launch_delay"),
            ("short GPU ops (shorter than their runtime call)", "short", "gpu_duration"))


def launches_part(g: GpuOps, job: bool, step: int | None, runtime_cutoff: float,
                  delay_cutoff: float, top: int | None, full: bool = True) -> dict:
    """A rank's part of ``launches``: its summary, its ``top`` outliers of each kind, and
    (``full``) its launch table."""
    t = ln.launch_table(g, step)
    out = {"summary": ln.summary(t, g, step, runtime_cutoff, delay_cutoff)}
    masks = ln.outliers(t, runtime_cutoff, delay_cutoff)
    for _, key, col in OUTLIERS:
        rows = np.flatnonzero(masks[key])
        rows = rows[np.argsort(-t[col][rows], kind="stable")][:top]
        out[key] = {k: v[rows] for k, v in t.items()}
    if full:
        out["launches"] = t
    return out


def launches(parts: list[dict]) -> list[tuple[str, Columns]]:
    """``launches``' sections from each rank's ``launches_part`` (the launch list when the
    parts hold it)."""
    summary = [p["summary"] for p in parts]
    summ = {k: objects([s[k] for s in summary]) if k == "rank" else np.array([s[k] for s in summary])
            for k in summary[0]}
    out = [("launch summary", summ)]
    out += [(title, concat([p[key] for p in parts])) for title, key, _ in OUTLIERS]
    if "launches" in parts[0]:
        out.append(("launches", concat([p["launches"] for p in parts])))
    return out


def report_part(g: GpuOps, job: bool, step: int | None, top: int) -> dict:
    """A rank's part of ``report``'s text: each analysis's part with the report's options."""
    return {"kernels": kernels_part(g, job, step),
            "breakdown": breakdown_part(g, job, step, bd.KERNEL_WAIT_US),
            "gaps": gaps_part(g, job, step, top, "count"),
            "launches": launches_part(g, job, step, ln.RUNTIME_CUTOFF_US, ln.DELAY_CUTOFF_US, top,
                                      full=False)}


def report(parts: list[dict], top: int) -> list[tuple[str, Columns]]:
    """Every analysis's tables (the text form of ``report``) from each rank's ``report_part``."""
    def each(name: str) -> list[dict]:
        return [p[name] for p in parts]

    return (kernels(each("kernels"), top) + breakdown(each("breakdown"))
            + gaps(each("gaps"), None, None, 20) + launches(each("launches")))
