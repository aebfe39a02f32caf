"""``traceaug diff --html``: a self-contained report (plotly.js inlined, works offline)."""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go

from ..analysis.tables import frame
from ..atomic import atomic_output
from ..commands.diff import DiffResult, clip, headline_table, ops_ms


def _figures(ops, top: int) -> list[go.Figure]:
    worst = ops.reindex(ops["delta_ms"].abs().sort_values(ascending=False).index).head(top)
    labels = [f"{d}: {clip(k, 60)}" for d, k in zip(worst["device"], worst["key"], strict=True)]
    totals = go.Figure([go.Bar(name="A", y=labels, x=worst["total_a_ms"], orientation="h"),
                        go.Bar(name="B", y=labels, x=worst["total_b_ms"], orientation="h")])
    totals.update_layout(title="Total time per step (ms), largest changes", barmode="group")
    counts = go.Figure([go.Bar(name="A", y=labels, x=worst["count_a"], orientation="h"),
                        go.Bar(name="B", y=labels, x=worst["count_b"], orientation="h")])
    counts.update_layout(title="Count per step", barmode="group")
    colors = ["#c0392b" if d > 0 else "#27ae60" for d in worst["delta_ms"]]
    delta = go.Figure([go.Bar(y=labels, x=worst["delta_ms"], orientation="h", marker_color=colors)])
    delta.update_layout(title="Δ time per step (ms): B − A")
    for fig in (totals, counts, delta):
        fig.update_layout(height=max(400, 28 * len(labels) + 150), yaxis={"autorange": "reversed"},
                          margin={"l": 420})
    return [totals, counts, delta]


def write_report(result: DiffResult, path: Path, top: int = 20) -> None:
    """Write the report atomically."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>traceaug diff</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style></head><body>",
             "<h1>traceaug diff</h1>"]
    first = True
    for r in result.ranks:
        ops = frame(ops_ms(r.result["ops"]))
        parts.append(f"<h2>rank {r.rank}</h2><p>A = {html.escape(str(r.a))}<br>B = "
                     f"{html.escape(str(r.b))}</p>")
        parts.append(frame(headline_table(r.result)).to_html(index=False, na_rep=""))
        for fig in _figures(ops, top):
            parts.append(fig.to_html(full_html=False, include_plotlyjs=first))
            first = False
        cols = ["device", "key", "status", "count_a", "count_b", "total_a_ms", "total_b_ms", "delta_ms",
                "delta_pct"]
        parts.append("<h3>All ops (per step)</h3>" + ops[cols].round(4).to_html(index=False, na_rep=""))
    parts.append("</body></html>")
    with atomic_output(path, "w") as f:
        f.write("\n".join(parts))
