"""The memory sections of ``report`` and ``diff`` (``analysis.memory``): each peak and what holds it, as
titled tables; a trace without ``[memory]`` events gets a one-row note instead."""

from __future__ import annotations

import numpy as np

from ..analysis.memory import NONE_TEXT, compare
from ..analysis.tables import Columns

PEAKS = "Memory: peak per step and device"
HOLDERS = "Memory: what holds it at the peak (allocations not yet freed, by the op that made them)"
DIFF_PEAKS = "Memory: peak, A vs B"
DIFF_HOLDERS = "Memory: what holds it at the peak, A vs B"


def _ranked(parts: dict, key: str) -> Columns:
    """Every rank's table ``key`` with a leading ``rank`` column."""
    tables = [{"rank": np.full(len(p[key]["device"]), r, dtype=object), **p[key]}
              for r, p in parts.items()]
    return {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}


def _note(text: str) -> list[tuple[str, Columns]]:
    return [("Memory", {"notes": np.array([text], dtype=object)})]


def report_sections(parts: dict) -> list[tuple[str, Columns]]:
    """``report``'s memory tables from each rank's ``memory.rank_part``, or a note when no rank has
    ``[memory]`` events."""
    if not parts or not any(len(p["steps"]["device"]) for p in parts.values()):
        return _note(NONE_TEXT if all(p["note"] for p in parts.values()) else
                     "no [memory] event in or before the step chosen")
    return [(PEAKS, _ranked(parts, "steps")), (HOLDERS, _ranked(parts, "holders"))]


def diff_sections(a: dict, b: dict) -> list[tuple[str, Columns]]:
    """``diff``'s memory tables: each rank's peak and holders in A and in B (``memory.compare``), or a
    note when neither side has ``[memory]`` events."""
    ranks = [r for r in a if r in b]
    if not any(len(side[r]["steps"]["device"]) for side in (a, b) for r in ranks):
        return _note(f"neither side: {NONE_TEXT}")
    done = {r: dict(zip(("peaks", "holders"), compare(a[r], b[r]))) for r in ranks}
    return [(DIFF_PEAKS, _ranked(done, "peaks")), (DIFF_HOLDERS, _ranked(done, "holders"))]
