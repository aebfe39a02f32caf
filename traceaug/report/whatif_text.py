"""``traceaug whatif`` as printed: the baseline per step first (its replay error says how far to trust the
rest), then each change's predicted step time and speedup; csv / json one row per (step, change)."""

from __future__ import annotations

import numpy as np

from ..output import render_columns


def flat(steps: dict, changes: dict) -> dict:
    """One row per (step, change), the step's figures repeated (csv / json); a step without
    changes keeps one row with an empty change."""
    per_change = ("change", "predicted_ns", "speedup", "saving_pct")
    rows = {k: [] for k in (*steps, *per_change)}
    st = {k: v.tolist() for k, v in steps.items()}  # Python numbers: json writes them
    ch = {k: v.tolist() for k, v in changes.items()}
    for i, s in enumerate(st["step"]):
        mine = [j for j, c in enumerate(ch["step"]) if c == s] or [None]
        for j in mine:
            for k in steps:
                rows[k].append(st[k][i])
            for k in per_change:
                rows[k].append(None if j is None else ch[k][j])
    return {k: np.array(v, dtype=object) for k, v in rows.items()}


def render(steps: dict, changes: dict, fmt: str) -> str:
    """The baseline per step first (its replay error says how far to trust the rest), then
    each change's predicted step time and speedup."""
    if fmt != "table":
        text = render_columns(flat(steps, changes), fmt)
        return text if text.endswith("\n") else text + "\n"
    out = render_columns({"step": steps["step"], "measured_us": steps["measured_ns"] / 1e3,
                          "baseline_us": steps["baseline_ns"] / 1e3,
                          "baseline_error_pct": steps["baseline_error_pct"],
                          "unexplained_pct": steps["unexplained_pct"]}, "table")
    if len(changes["step"]):
        out += "\n" + render_columns({"step": changes["step"], "change": changes["change"],
                                      "predicted_us": changes["predicted_ns"] / 1e3,
                                      "speedup": changes["speedup"],
                                      "saving_pct": changes["saving_pct"]}, "table")
    return out
