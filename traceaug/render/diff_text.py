"""``traceaug diff``'s result as text, csv and json: the headline per step, the op rows, the
top regressions and improvements, the step-time change along the critical paths."""

from __future__ import annotations

from collections import Counter

import numpy as np
import orjson

from ..analysis.diff import DiffResult, clip
from ..analysis.tables import Columns, objects
from ..output import json_text, render_columns
from . import phases_text, sections
from .efficiency_text import DIFF_OPS
from .sections import shown

HEADLINE = (("step_ns", "step time"), ("gpu_busy_ns", "GPU busy"), ("gpu_idle_ns", "GPU idle"),
            ("computation_ns", "computation"), ("communication_ns", "communication"),
            ("memory_ns", "memory"))


def headline_table(res: dict) -> Columns:
    """The headline of one rank: A, B and their difference per step, in µs."""
    rows = []
    for key, label in HEADLINE:
        va, vb = res["a"][key] / 1e3, res["b"][key] / 1e3
        rows.append((label, round(va, 3), round(vb, 3), round(vb - va, 3),
                     round(100 * (vb - va) / va, 1) if va else None))
    names = ("per step (us)", "A", "B", "Δ", "Δ %")
    return {n: objects([r[i] for r in rows]) for i, n in enumerate(names)}


def ops_us(ops: Columns) -> Columns:
    """The op table as people read it (the terminal, the page): times in µs (``*_us``)."""
    return shown(ops, "table")


def all_rows(result: DiffResult) -> Columns:
    """Every rank's op rows (ns per step), a ``rank`` column first (``--format csv``)."""
    tables = [{"rank": np.full(len(r.result["ops"]["key"]), r.rank, dtype=object),
               **r.result["ops"]} for r in result.ranks]
    return {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}


def summary_rows(result: DiffResult) -> Columns:
    """The headline of every rank, one row per (rank, side): ``rank``, ``side`` (a / b),
    ``path``, ``steps``, ``step`` and the ``*_ns`` times per step."""
    rows = [{"rank": r.rank, "side": side, "path": str(getattr(r, side)), **r.result[side]}
            for r in result.ranks for side in ("a", "b")]
    return {c: objects([row[c] for row in rows]) for c in rows[0]}


def top_changes(ops: Columns, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the ``top`` largest regressions and improvements of an op table, largest first (it
    is ordered by |delta|); rows whose status is ``unchanged`` are never among them."""
    changed = ops["status"] != "unchanged"
    delta = ops["delta_ns"]
    return (np.flatnonzero(changed & (delta > 0))[:top], np.flatnonzero(changed & (delta < 0))[:top])


def render(result: DiffResult, fmt: str, top: int = 10) -> str:
    """Headline first, then the top regressions and improvements (table); everything (csv/json)."""
    if fmt == "csv":
        return render_columns(phases_text.csv_rows(all_rows(result), result), "csv")
    if fmt == "json":
        data = {"ranks": [{"rank": r.rank, "a": str(r.a), "b": str(r.b),
                           "summary": {"a": r.result["a"], "b": r.result["b"]},
                           "ops": orjson.loads(render_columns(r.result["ops"], "json")),
                           **({"phases": phases_text.json_rows(r.result["phases"])}
                              if r.result.get("phases") else {}),
                           **({"gate": r.gate} if r.gate is not None else {})}
                          for r in result.ranks],
                "unmatched_ranks": result.unmatched}
        for key in ("efficiency", "memory"):
            if getattr(result, key):
                data[key] = orjson.loads(sections.render(getattr(result, key), "json"))
        return json_text(data)
    parts = []
    for side, ranks in result.unmatched.items():
        if ranks:
            parts.append(f"only in {side.upper()}: rank(s) {', '.join(map(str, ranks))}\n")
    cols = ["device", "key", "status", "count_a", "count_b", "total_a_us", "total_b_us", "delta_us",
            "delta_pct", "p_value"]
    for r in result.ranks:
        ops = ops_us(r.result["ops"])
        ops["key"] = objects([clip(k) for k in ops["key"].tolist()])
        steps = " vs ".join(f"ProfilerStep#{h['step']}" if h["step"] is not None
                            else phases_text.steps_said(r.result, s)
                            for s, h in (("a", r.result["a"]), ("b", r.result["b"])))
        label = f"rank {r.rank}: " if r.rank is not None else ""
        parts.append(f"{label}A = {r.a}\n{' ' * len(label)}B = {r.b}  ({steps})\n")
        parts.append(render_columns(headline_table(r.result), "table"))
        worse, better = top_changes(r.result["ops"], top)
        counts = Counter(ops["status"].tolist())
        parts.append("status: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                                   or "no ops in the compared steps") + "\n")
        for title, rows in (("Top regressions", worse), ("Top improvements", better)):
            table = render_columns({c: ops[c][rows] for c in cols}, "table")
            parts.append(f"\n{title} (per step)\n{table}")
        if r.result.get("phases"):
            parts.append(phases_text.text(r.result["phases"], lambda ops: top_changes(ops, top)))
    cut = [(t, {c: v[:top] for c, v in table.items()} if t == DIFF_OPS else table)
           for t, table in result.efficiency]
    for found in (cut, result.memory):  # (the changed ops' efficiency: the ``top`` that changed most)
        if found:
            parts.append("\n" + sections.render(found, "table"))
    return "\n".join(parts)


def render_explain(res: dict, fmt: str, top: int = 10) -> str:
    """The step-time change per category, then the ``top`` events that moved most (table);
    both tables in full, one long table with a ``section`` column (csv / json)."""
    cats, events = res["categories"], res["events"]
    if fmt != "table":
        n, m = len(cats["category"]), len(events["event"])
        rows = {"section": objects(["category"] * n + ["event"] * m),
                "category": np.r_[cats["category"], events["category"]],
                "event": objects([None] * n + events["event"].tolist()),
                "a_ns": np.r_[cats["a_ns"], events["a_ns"]],
                "b_ns": np.r_[cats["b_ns"], events["b_ns"]],
                "delta_ns": np.r_[cats["delta_ns"], events["delta_ns"]]}
        text = render_columns(rows, fmt)
        return text if text.endswith("\n") else text + "\n"
    head, table, events = explain_tables(res, top)
    return (f"\nstep time along the critical paths: {head}\n" + render_columns(table, "table")
            + "\nEvents that moved most along the paths (per step)\n" + render_columns(events, "table"))


def explain_tables(res: dict, top: int = 10) -> tuple[str, Columns, Columns]:
    """``--explain``'s split for the table and the page: the change in a sentence, the categories and
    the ``top`` events that moved most, in µs per step."""
    cats, events = res["categories"], res["events"]
    head = (f"{res['step_a_ns'] / 1e3:,.3f} -> {res['step_b_ns'] / 1e3:,.3f} us "
            f"({res['delta_ns'] / 1e3:+,.3f} us; the rows below sum to it, idle included)")
    table = {"category": cats["category"], "a_us": cats["a_ns"] / 1e3, "b_us": cats["b_ns"] / 1e3,
             "delta_us": cats["delta_ns"] / 1e3, "share_of_change_pct": cats["share_of_change_pct"]}
    k = slice(0, top)
    moved = {"event": objects([clip(e) for e in events["event"][k].tolist()]),
             "category": events["category"][k], "a_us": events["a_ns"][k] / 1e3,
             "b_us": events["b_ns"][k] / 1e3, "delta_us": events["delta_ns"][k] / 1e3}
    return head, table, moved
