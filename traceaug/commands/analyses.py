"""Run ``traceaug kernels | gaps | breakdown | launches`` over a file or every rank of a
directory, and render their tables (times in µs in the terminal, exact ns in csv / json)."""

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
from ..output import render_columns

if TYPE_CHECKING:
    from ..job.run import JobOptions
    from ..read.prefetch import Prefetched

# Columns holding ns: shown in µs in the terminal (csv / json keep the exact ns).
NS = {"total", "mean", "std", "min", "max", "median", "window", "cpu_step", "busy", "idle",
      "computation", "communication", "memory", "comp_only", "comm_only", "mem_only", "comp_comm",
      "comp_mem", "comm_mem", "comp_comm_mem", "cpu_duration", "gpu_duration", "launch_delay",
      "mean_total", "min_total", "max_total", "mean_cpu_duration", "max_cpu_duration",
      "mean_launch_delay", "max_launch_delay"}


def load(path: Path, rank: int | None = None, tp_bin: str | None = None,
         prefetched: Prefetched | None = None, job: JobOptions | None = None) -> list[GpuOps]:
    """Every rank's GPU ops (one for a file), ranks in order, read by the job's executor
    (``job.api.gather``); each rank's engine is closed once its ops are read."""
    from ..job.api import gather
    from ..job.tasks import gpu_rank

    out = list(gather(path, gpu_rank, LOAD["kind"], rank, job,
                      {"tp_bin": tp_bin, "prefetched": prefetched}).values())
    if not any(len(g.ops["ts"]) for g in out):
        raise TraceaugError(f"{path}: no GPU kernels, copies or sets to analyse")
    return out


def concat(tables: list[Columns]) -> Columns:
    """Tables with the same columns, one after the other."""
    if not tables:
        return {}
    return {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}


def clip_names(table: Columns, width: int = 80) -> Columns:
    """Long names shortened for the terminal."""
    out = dict(table)
    for c in ("name", "from", "to"):
        if c in out:
            out[c] = objects([n if not isinstance(n, str) or len(n) <= width else n[: width - 1] + "…"
                              for n in out[c].tolist()])
    return out


def shown(table: Columns, fmt: str, full_names: bool = True) -> Columns:
    """The table as rendered: in the terminal, ns columns become ``*_us`` and names are clipped
    unless ``full_names``."""
    if fmt != "table":
        return table
    out = {}
    for c, v in table.items():
        if c in ("from", "to") and "transition" in table:  # the short "A → B" says it
            continue
        if c in NS and v.dtype.kind in "iuf":
            out[f"{c}_us"] = v / 1e3
        elif c == "window_start":
            continue
        else:
            out[c] = v
    return out if full_names else clip_names(out)


def render(sections: list[tuple[str, Columns]], fmt: str, full_names: bool = True) -> str:
    """Titled tables: in the terminal one after the other (a histogram as bars); in csv each
    table as its own block after a ``# title`` line; in json one object keyed by title."""
    if fmt == "json":
        data = {title: orjson.loads(render_columns(t, "json")) for title, t in sections}
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    parts = []
    for title, t in sections:
        if fmt == "table" and "lo_us" in t:
            parts.append(f"{title}\n{bars(t)}")
            continue
        body = render_columns(shown(t, fmt, full_names), fmt)
        parts.append(f"# {title}\n{body}" if fmt == "csv" else f"{title}\n{body}")
    return "\n".join(parts)


def kernels(ranks: list[GpuOps], step: int | None, kind: str | None, sort: str,
            top: int | None) -> list[tuple[str, Columns]]:
    tables = [kn.sort(kn.kernel_table(g, step, kind), sort) for g in ranks]
    out = [("kernels", concat([{k: v[:top] for k, v in t.items()} for t in tables]))]
    if len(ranks) > 1:
        across = kn.across_ranks(tables)
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
            ("gap histogram (µs, gaps > 0 on every stream)", hist),
            ("kernel transitions on a stream (gap after A before B)", concat(trans))]


def bars(hist: Columns, width: int = 50) -> str:
    """The histogram drawn in the terminal."""
    peak = max(int(hist["count"].max(initial=0)), 1)
    lines = [f"{lo:>12.1f} – {hi:<12.1f} {'█' * round(width * n / peak):<{width}} {n}"
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
