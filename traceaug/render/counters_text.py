"""``traceaug counters``' summary: queue length per stream and memory bandwidth per copy kind,
every rank, as a table, CSV (long form) or JSON."""

from __future__ import annotations

import numpy as np
import orjson

from ..output import json_text, render_columns
from .sections import shown

SUMMARIES = ("queue_summary", "bandwidth_summary", "memory_summary")
IDENTITY = {"queue_summary": "stream", "bandwidth_summary": "kind", "memory_summary": "step"}


def with_rank(results: list[dict]) -> list[dict]:
    """Each result's summary tables with a leading ``rank`` column."""
    out = []
    for r in results:
        r = dict(r)
        for key in SUMMARIES:
            if key in r:
                table = r[key]
                r[key] = {"rank": np.full(len(table["device"]), r["rank"], dtype=object), **table}
        out.append(r)
    return out


def summary_text(results: list[dict], fmt: str) -> str:
    """The per-stream and per-copy-kind summaries as a table, CSV (long form) or JSON."""
    results = with_rank(results)
    tables = {key: {c: np.concatenate([r[key][c] for r in results if key in r])
                    for c in next(r[key] for r in results if key in r)}
              for key in SUMMARIES if any(key in r for r in results)}
    if fmt == "json":
        data = {k.removesuffix("_summary"): orjson.loads(render_columns(v, "json"))
                for k, v in tables.items()}
        data["outputs"] = [r["out"] for r in results if r["out"]]
        return json_text(data)
    if fmt == "csv":  # long form: series, rank, device, key, metric, value
        long: dict[str, list] = {c: [] for c in ("series", "rank", "device", "key", "metric", "value")}
        for key, table in tables.items():
            ident = IDENTITY[key]
            for metric in [c for c in table if c not in ("rank", "device", ident)]:
                n = len(table[metric])
                long["series"] += [key.removesuffix("_summary")] * n
                long["metric"] += [metric] * n
                for column, source in (("rank", "rank"), ("device", "device"), ("key", ident),
                                       ("value", metric)):
                    long[column] += table[source].tolist()
        return render_columns(long, "csv") if tables else ""
    parts = []
    titles = {"queue_summary": "Queue length per stream (time-weighted over the trace)",
              "bandwidth_summary": "Memory bandwidth per copy kind",
              "memory_summary": "Memory per step and device: peak allocated and reserved"}
    for key, table in tables.items():
        if key == "memory_summary" and not len(table["device"]):
            from ..analysis.memory import NONE_TEXT

            parts.append(f"Memory: {NONE_TEXT}\n")
            continue
        parts.append(titles[key] + "\n" + render_columns(shown(table, "table"), "table"))
    return "\n".join(parts)
