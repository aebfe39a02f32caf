"""``report JOB --html``'s job section, from ``job_sections.job_sections``' tables (the verdict heads the
page: ``findings.overview``): the NCCL kernels' wait vs transfer, the wait heatmap (rank × collective
instance, job clock) and each rank's step time and wait."""

from __future__ import annotations

import html

import numpy as np

from ..analysis.tables import Columns
from .job_sections import JOB_NCCL, JOB_STEPS, JOB_WAITS, kind_of_label

HEATMAP = "job wait heatmap"


def wait_heatmap(heat: Columns) -> dict:
    """The heatmap of a ``JOB_WAITS`` table (a ``rank`` column, one column of waits in µs per
    instance): a row per rank, a column per instance; hover: rank, instance, kind, wait."""
    labels = [c for c in heat if c != "rank"]
    ranks = [int(r) for r in heat["rank"].tolist()]
    z = [[None if v != v else float(v) for v in row]  # NaN: the rank is not in that group
         for row in zip(*(np.asarray(heat[c], dtype=np.float64).tolist() for c in labels))] \
        if labels else [[] for _ in ranks]
    kinds = [kind_of_label(c) for c in labels]
    return {"data": [{"type": "heatmap", "z": z, "x": labels, "y": [f"rank {r}" for r in ranks],
                      "customdata": [kinds] * len(ranks), "colorscale": "Reds", "zmin": 0,
                      "hoverongaps": False, "xgap": 1, "ygap": 1,
                      "colorbar": {"title": {"text": "wait (µs)"}, "ticksuffix": " µs",
                                   "tickformat": ",~f"},
                      "hovertemplate": "%{y}<br>instance %{x}<br>kind %{customdata}<br>"
                                       "wait %{z:,.1f} µs<extra></extra>"}],
            "layout": {"title": {"text": "Wait per rank at each collective (µs, job clock; "
                                         "the pale cell of a column is its straggler)"},
                       "xaxis": {"title": {"text": "collective instance"}, "type": "category"},
                       "yaxis": {"title": {"text": "rank"}, "autorange": "reversed",
                                 "type": "category"},
                       "height": max(300, 22 * len(ranks) + 160)}}


def job_parts(sections: list[tuple[str, Columns]], table) -> tuple[str, str, list[tuple[str, dict]]]:
    """(the HTML before the job's charts, after them, the charts) of ``report JOB``'s job
    section; ``table`` renders a table as the page's others."""
    by = dict(sections)
    heat = next((t for title, t in sections if title.startswith(JOB_WAITS)), None)
    nccl = by.get(JOB_NCCL)
    head = ("<section id='job'><h2>Job: who waited for whom</h2>"
            + (f"<h3>{html.escape(JOB_NCCL)}</h3>" + table(nccl) if nccl else ""))
    steps = by.get(JOB_STEPS)
    rows = len(next(iter(steps.values()))) if steps else 0
    tail = (f"<details><summary>{html.escape(JOB_STEPS)} ({rows:,} rows)</summary>"
            + table(steps) + "</details>" if steps else "") + "</section>"
    return head, tail, [] if heat is None else [(HEATMAP, wait_heatmap(heat))]
