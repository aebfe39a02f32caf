"""``traceaug diff``'s serving phases (``analysis.serving_phases``) as text, csv and json: each phase's step
latency in A and B, and its op rows per step of that phase, so a change in decode is not hidden by prefill."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import orjson

from ..analysis.diff import DiffResult, clip
from ..analysis.serving_phases import latency_table, op_rows
from ..analysis.tables import Columns, objects
from ..output import render_columns
from .sections import shown

TOP_COLUMNS = ("device", "key", "status", "count_a", "count_b", "total_a_us", "total_b_us", "delta_us",
               "delta_pct")


def steps_said(result: dict, side: str) -> str:
    """A side's steps in ``diff``'s heading: "N serving steps" of a serving trace (its ``phases`` have steps
    there), else "N ProfilerSteps"."""
    n = result[side]["steps"]
    if any(p[side]["steps"] for p in result.get("phases") or ()):
        return f"{n} serving step{'s' if n != 1 else ''}"
    return f"{n} ProfilerSteps"


def csv_rows(rows: Columns, result: DiffResult) -> Columns:
    """``diff``'s csv rows (``all_rows``) with, when a rank has serving phases, a ``phase`` column (``all``:
    every step) and each phase's op rows after them; without phases, as they are."""
    per = [(r.rank, op_rows(r.result["phases"])) for r in result.ranks if r.result.get("phases")]
    per = [(rank, t) for rank, t in per if t is not None]
    if not per:
        return rows
    tables = [{"rank": rows["rank"], "phase": objects(["all"] * len(rows["rank"])),
               **{c: v for c, v in rows.items() if c != "rank"}}]
    tables += [{"rank": np.full(len(t["key"]), rank, dtype=object), **t} for rank, t in per]
    return {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}


def json_rows(phases: list[dict]) -> list[dict]:
    """A rank's phases for ``--format json``: per phase its latency row (ns), its ``ops`` (rows per step of
    that phase) and ``gate`` where it has them."""
    rows = orjson.loads(render_columns(latency_table(phases), "json"))
    for row, phase in zip(rows, phases):
        if "ops" in phase:
            row["ops"] = orjson.loads(render_columns(phase["ops"], "json"))
        if "gate" in phase:
            row["gate"] = phase["gate"]
    return rows


def text(phases: list[dict], top_changes: Callable[[Columns], tuple]) -> str:
    """The phases in the terminal: their step latencies (µs), a line per phase only one side has, and the
    regressions and improvements of each phase on both sides (``top_changes``: the rows of an op table)."""
    out = ["\nServing phases: step latency (us; CPU start to the later of its CPU end and its GPU ops' end)\n"
           + render_columns(shown(latency_table(phases), "table"), "table")]
    for p in phases:
        if "ops" not in p:
            side = "A" if p["present"].endswith("A") else "B"
            n = p[side.lower()]["steps"]
            out.append(f"{p['phase']}: only in {side} ({n} step{'s' if n != 1 else ''}), nothing to "
                       "compare it with\n")
            continue
        ops = shown(p["ops"], "table")
        ops["key"] = objects([clip(k) for k in ops["key"].tolist()])
        for title, rows in zip(("regressions", "improvements"), top_changes(p["ops"])):
            if len(rows):
                out.append(f"\nTop {title} in {p['phase']} steps (per {p['phase']} step)\n"
                           + render_columns({c: ops[c][rows] for c in TOP_COLUMNS}, "table"))
    return "".join(out)
