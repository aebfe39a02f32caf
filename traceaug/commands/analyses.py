"""Run ``traceaug kernels | gaps | breakdown | launches`` over a file or every rank of a
directory, and render their tables (times in µs in the terminal, exact ns in csv / json,
every column named with its unit: ``public``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

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


def load(path: Path, rank: int | None = None, tp_bin: str | None = None,
         prefetched: Prefetched | None = None, job: JobOptions | None = None) -> list[GpuOps]:
    """Every rank's GPU ops (one for a file), ranks in order, read by the job's executor
    (``job.api.gather``); each rank's engine is closed once its ops are read."""
    return load_job(path, rank, tp_bin, prefetched, job, collectives=False)[0]


def load_job(path: Path, rank: int | None = None, tp_bin: str | None = None,
             prefetched: Prefetched | None = None, job: JobOptions | None = None,
             collectives: bool = True) -> tuple[list[GpuOps], list | None]:
    """``load``, and for a job of several ranks (``collectives``) each rank's collective
    tables (``analysis.collectives.ranked``) taken from the same read of the rank
    (``job.tasks.report_rank``); None for one rank (no job to match)."""
    from ..analysis.collectives import ranked
    from ..job.api import gather
    from ..job.ranks import select
    from ..job.run import JobOptions
    from ..job.tasks import gpu_rank, report_rank

    job = job or JobOptions()
    files = select(path, rank, job.skip_bad, job.storage)
    options = {"tp_bin": tp_bin, "prefetched": prefetched}
    tables = None
    if collectives and len(files) > 1:
        both = gather(path, report_rank, "collectives", rank, job, options, files=files)
        out = [ops for ops, _ in both.values()]
        tables = ranked({r: t for r, (_, t) in both.items()})
    else:
        out = list(gather(path, gpu_rank, LOAD["kind"], rank, job, options, files=files).values())
    if not any(len(g.ops["ts"]) for g in out):
        raise TraceaugError(f"{path}: no GPU kernels, copies or sets to analyse")
    return out, tables


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


def comm_split(ranks: list[GpuOps], step: int | None) -> dict[str, dict] | None:
    """Each communication kernel's wait and transfer across the ranks (``kernel_split``),
    None when no rank has one."""
    if not any((g.ops["category"] == "communication").any() for g in ranks):
        return None
    from ..analysis import collectives as co

    return co.kernel_split([co.from_gpu_ops(g.rank if g.rank is not None else i,
                                            g.trace.base_ns, g.ops, g.rows(step))
                            for i, g in enumerate(ranks)])


def kernels(ranks: list[GpuOps], step: int | None, kind: str | None, sort: str,
            top: int | None) -> list[tuple[str, Columns]]:
    tables = [kn.sort(kn.kernel_table(g, step, kind), sort) for g in ranks]
    out = [("kernels", concat([{k: v[:top] for k, v in t.items()} for t in tables]))]
    if len(ranks) > 1:
        across = kn.across_ranks(tables, comm_split(ranks, step))
        out.append(("kernels across ranks", {k: v[:top] for k, v in across.items()}))
    return out


def gaps(ranks: list[GpuOps], step: int | None, hist_min: float | None, hist_max: float | None,
         bins: int, top: int | None, sort: str) -> list[tuple[str, Columns]]:
    pairs = [gp.stream_pairs(g, step) for g in ranks]
    hist = gp.histogram(np.concatenate([p["gap"] for p in pairs]), hist_min, hist_max, bins)
    trans = []
    for g in ranks:
        t = {k: v[:top] for k, v in gp.transitions(g, step, sort).items()}
        trans.append({"rank": objects([g.rank] * len(t["count"])), **t})
    return [("gaps per stream", concat([gp.stream_gaps(g, step) for g in ranks])),
            ("gaps per device (union of its streams)", concat([gp.device_gaps(g, step) for g in ranks])),
            ("gap histogram (µs, log-spaced bins, gaps > 0 on every stream)", hist),
            ("kernel transitions on a stream (gap after A before B)", concat(trans))]


def bars(hist: Columns, width: int = 50) -> str:
    """The histogram drawn in the terminal."""
    peak = max(int(hist["count"].max(initial=0)), 1)
    def us(v: float) -> str:  # log-spaced bins start below 1 µs: 0.0012, not 0.0
        return f"{v:.1f}" if abs(v) >= 1 or v == 0 else f"{v:.2g}"

    lines = [f"{us(lo):>12} – {us(hi):<12} {'█' * round(width * n / peak):<{width}} {n}"
             for lo, hi, n in zip(hist["lo_us"].tolist(), hist["hi_us"].tolist(),
                                  hist["count"].tolist())]
    return "\n".join(lines) + "\n"


def breakdown(ranks: list[GpuOps], step: int | None, kernel_wait_us: float) -> list[tuple[str, Columns]]:
    return [("temporal breakdown per step (GPU windows; step None = all steps)",
             concat([bd.temporal(g, step) for g in ranks])),
            ("idle breakdown per stream (HTA's rules)",
             concat([bd.idle_by_stream(g, step, kernel_wait_us) for g in ranks]))]


def launches(ranks: list[GpuOps], step: int | None, runtime_cutoff: float,
             delay_cutoff: float, top: int | None) -> list[tuple[str, Columns]]:
    tables = [ln.launch_table(g, step) for g in ranks]
    summary = [ln.summary(t, g, step, runtime_cutoff, delay_cutoff) for t, g in zip(tables, ranks)]
    summ = {k: objects([s[k] for s in summary]) if k == "rank" else np.array([s[k] for s in summary])
            for k in summary[0]}
    out = [("launch summary", summ)]
    for title, key, col in (("runtime outliers", "runtime", "cpu_duration"),
                            ("launch-delay outliers", "delay", "launch_delay"),
                            ("short GPU ops (shorter than their runtime call)", "short", "gpu_duration")):
        parts = []
        for t in tables:
            mask = ln.outliers(t, runtime_cutoff, delay_cutoff)[key]
            rows = np.flatnonzero(mask)
            rows = rows[np.argsort(-t[col][rows], kind="stable")][:top]
            parts.append({k: v[rows] for k, v in t.items()})
        out.append((title, concat(parts)))
    out.append(("launches", concat(tables)))
    return out


def report(ranks: list[GpuOps], step: int | None, top: int) -> list[tuple[str, Columns]]:
    """Every analysis's tables (the text form of ``report``)."""
    return (kernels(ranks, step, None, "total", top)
            + breakdown(ranks, step, bd.KERNEL_WAIT_US)
            + gaps(ranks, step, None, None, 20, top, "count")
            + launches(ranks, step, ln.RUNTIME_CUTOFF_US, ln.DELAY_CUTOFF_US, top)[:-1])
