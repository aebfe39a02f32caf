"""``traceaug report --html``: kernels, gaps, breakdowns and launches of every rank in one
self-contained page (plotly charts, plotly.js inlined; works offline)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import orjson
import plotly.graph_objects as go
import plotly.io as pio

from ..analysis import breakdown as bd
from ..analysis import gaps as gp
from ..analysis import kernels as kn
from ..analysis import launches as ln
from ..analysis.gpu_steps import GpuOps
from ..analysis.tables import Columns
from ..atomic import atomic_output
from ..commands.analyses import clip_names, concat, shown
from .plotly_inline import BOOT, packed_plotly

TYPES = ("computation", "communication", "memory")
SEGMENTS = (("comp_only", "computation"), ("comm_only", "communication"), ("mem_only", "memory"),
            ("comp_comm", "comp + comm"), ("comp_mem", "comp + mem"), ("comm_mem", "comm + mem"),
            ("comp_comm_mem", "all three"), ("idle", "idle"))


def _label(rank) -> str:
    return "trace" if rank is None else f"rank {rank}"


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def figures(ranks: list[GpuOps], step: int | None, top: int) -> list[tuple[str, go.Figure]]:
    """Every chart of the report, titled."""
    tables = [kn.kernel_table(g, step) for g in ranks]
    out = []
    pie = go.Figure()
    n = len(ranks)
    for i, (g, t) in enumerate(zip(ranks, tables)):
        totals = [int(t["total"][t["type"] == typ].sum()) for typ in TYPES]
        pie.add_trace(go.Pie(labels=list(TYPES), values=[v / 1e3 for v in totals], name=_label(g.rank),
                             title=_label(g.rank), domain={"x": [i / n, (i + 1) / n]}, sort=False))
    pie.update_layout(title="GPU time per kernel type (µs), per rank")
    out.append(("kernel types", pie))
    across = kn.across_ranks(tables)
    for typ in TYPES:
        rows = np.flatnonzero(across["type"] == typ)[:top]
        if not len(rows):
            continue
        mean = across["mean_total"][rows] / 1e3
        fig = go.Figure(go.Bar(
            y=[_short(x) for x in across["name"][rows]], x=mean, orientation="h",
            error_x={"type": "data", "symmetric": False,
                     "array": across["max_total"][rows] / 1e3 - mean,
                     "arrayminus": mean - across["min_total"][rows] / 1e3}))
        fig.update_layout(title=f"Top {typ} kernels: total µs (mean over ranks, bars min–max)",
                          yaxis={"autorange": "reversed"}, margin={"l": 420},
                          height=max(300, 26 * len(rows) + 120))
        out.append((f"top {typ}", fig))
    pairs = concat([gp.stream_pairs(g, step) for g in ranks])
    gap_us = pairs["gap"][pairs["gap"] > 0] / 1e3 if pairs else np.empty(0)
    edges = np.geomspace(max(float(gap_us.min()), 1e-3), float(gap_us.max()) * 1.0001, 31) \
        if len(gap_us) else np.array([0.0, 1.0])
    counts, _ = np.histogram(gap_us, bins=edges)
    hist = go.Figure(go.Bar(x=[f"{a:.3g}–{b:.3g}" for a, b in zip(edges[:-1], edges[1:])], y=counts))
    hist.update_layout(title="Idle gaps between ops on a stream (µs, log-spaced bins)",
                       xaxis={"title": "gap (µs)"}, yaxis={"title": "gaps"})
    out.append(("gap histogram", hist))
    idle = concat([bd.idle_by_stream(g, step) for g in ranks])
    fig = go.Figure()
    for cat in ("host_wait", "kernel_wait", "other"):
        m = idle["category"] == cat if idle else np.zeros(0, bool)
        fig.add_trace(go.Bar(name=cat, x=[f"{_label(r)} stream {s}" for r, s in
                                          zip(idle["rank"][m], idle["stream"][m])] if idle else [],
                             y=idle["idle"][m] / 1e3 if idle else []))
    fig.update_layout(title="Idle time per stream (µs): host wait / kernel wait / other",
                      barmode="stack")
    out.append(("idle breakdown", fig))
    temporal = concat([bd.temporal(g, step) for g in ranks])
    per_step = np.array([s is not None for s in temporal["step"]]) if temporal else np.zeros(0, bool)
    x = [f"{_label(r)} step {s}" for r, s in zip(temporal["rank"][per_step], temporal["step"][per_step])] \
        if temporal else []
    fig = go.Figure()
    for col, label in SEGMENTS:
        fig.add_trace(go.Bar(name=label, x=x, y=temporal[col][per_step] / 1e3 if temporal else []))
    fig.update_layout(title="Busy and idle time per step in its GPU window (µs)", barmode="stack")
    out.append(("timeline", fig))
    return out


def _table(t: Columns, digits: int = 3) -> str:
    t = shown(t, "table", full_names=False)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t)
    body = []
    for row in zip(*(v.tolist() for v in t.values())):
        cells = "".join(f"<td>{html.escape(f'{v:.{digits}f}' if isinstance(v, float) else str(v))}</td>"
                        for v in row)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def write_report(ranks: list[GpuOps], path: Path, step: int | None = None, top: int = 10,
                 title: str = "traceaug report") -> int:
    """Write the page atomically; the number of charts."""
    figs = figures(ranks, step, top)
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
             "font-size:12px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;"
             "text-align:right}.chart{min-height:300px}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    specs = []
    for i, (name, fig) in enumerate(figs):
        parts.append(f"<div class='chart' id='chart{i}' data-chart='{html.escape(name)}'></div>")
        specs.append(orjson.loads(pio.to_json(fig, validate=False, engine="orjson")))
    sections = [("Temporal breakdown per step", concat([bd.temporal(g, step) for g in ranks])),
                ("Idle breakdown per stream", concat([bd.idle_by_stream(g, step) for g in ranks])),
                ("Top kernels", concat([{k: v[:top] for k, v in kn.kernel_table(g, step).items()}
                                        for g in ranks])),
                ("Gaps per stream", concat([gp.stream_gaps(g, step) for g in ranks])),
                ("Launch summary", _summary(ranks, step))]
    for name, t in sections:
        parts.append(f"<h2>{html.escape(name)}</h2>" + _table(clip_names(t, 60)))
    parts.append(f"<script>{BOOT}</script>")
    parts.append("<script>const FIGS = " + orjson.dumps(specs).decode().replace("</", "<\\/")
                 + ";\nconst PLOTLY = \"" + packed_plotly() + "\";\n"
                 "bootPlotly(PLOTLY, () => { FIGS.forEach((f, i) => Plotly.newPlot("
                 "'chart' + i, f.data, f.layout, {responsive: true})); "
                 "document.body.dataset.ready = '1'; });</script></body></html>")
    with atomic_output(path, "w") as f:
        f.write("\n".join(parts))
    return len(figs)


def _summary(ranks: list[GpuOps], step: int | None) -> Columns:
    rows = [ln.summary(ln.launch_table(g, step), g, step) for g in ranks]
    return {k: np.array([r[k] for r in rows], dtype=object if k == "rank" else None) for k in rows[0]}
