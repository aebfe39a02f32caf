"""``traceaug info`` as printed: one trace as its key/value block; a job (several ranks) in the
terminal as one row per rank and a job line (csv / json: every field of every rank)."""

from __future__ import annotations

import os

from ..analysis.tables import objects
from ..output import render_columns, render_records


def rank_rows(records: list[dict], cache: list[str] | None = None) -> dict:
    """One row per rank: ``rank``, ``file`` (its name), ``size_mb`` (on disk), ``devices``,
    ``steps`` (their numbers, ``analysis.info.ranges``), ``span_us``, ``kernels``, ``warnings`` (how many),
    ``cache`` (the load kinds the table cache holds for it), when given."""
    def size(path: str):
        try:
            return round(os.path.getsize(path) / 1e6, 3)
        except OSError:
            return None
    rows = {
        "rank": [r["rank"] for r in records],
        "file": [os.path.basename(r["file"]) for r in records],
        "size_mb": [size(r["file"]) for r in records],
        "devices": [", ".join(d.split(":")[0] for d in r["devices"]) for r in records],
        "steps": [r["steps"] for r in records],
        "span_us": [_us(r["duration_ns"]) for r in records],
        "kernels": [r["kernels"] for r in records],
        "warnings": [len(r["warnings"]) + len(r["perfetto_ui"]) for r in records],
        **({"cache": cache} if cache is not None else {}),
    }
    return {k: objects(v) for k, v in rows.items()}


def job_line(records: list[dict]) -> str:
    """The job at a glance: ranks, world size, devices, the span over every rank, kernels,
    warnings."""
    starts = [r["start_ns"] for r in records if r["start_ns"] is not None]
    ends = [r["end_ns"] for r in records if r["end_ns"] is not None]
    span = f"{(max(ends) - min(starts)) / 1e3:,.3f} us" if starts and ends else "none"
    sizes = {r["world_size"] for r in records if r["world_size"] is not None}
    world = ", ".join(map(str, sorted(sizes))) or "unknown"
    devices = sum(len(r["devices"]) for r in records)
    warned = sum(len(r["warnings"]) + len(r["perfetto_ui"]) for r in records)
    kernels = sum(r["kernels"] for r in records)
    return (f"job: {len(records)} ranks (world size {world}), {devices} devices, span {span} "
            f"(first start to last end over the ranks), {kernels} kernels, {warned} warnings\n")


def _us(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e3


def render(records: list[dict], fmt: str, cache: list[str] | None = None) -> str:
    """``info``'s output for ``records`` (one per rank), the terminal showing the duration in µs; ``cache``:
    each rank's table cache state."""
    if fmt != "table":
        return render_records(records, fmt)
    if len(records) == 1:
        return render_records([{k.replace("duration_ns", "duration_us"): _us(v) if k == "duration_ns"
                                else v for k, v in records[0].items()}], fmt)
    text = render_columns(rank_rows(records, cache), "table") + job_line(records)
    warned = [r for r in records if r["warnings"] or r["perfetto_ui"]]
    for r in warned:  # what the counts stand for, rank by rank
        for w in r["warnings"] + r["perfetto_ui"]:
            text += f"  rank {r['rank']}: {w}\n"
    return text
