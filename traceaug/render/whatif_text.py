"""``traceaug whatif`` as printed: the baseline per step first (its replay error says how far to trust the
rest), the replays' errors over the steps, then each change's predicted step time and speedup; csv / json
one row per (step, change)."""

from __future__ import annotations

import numpy as np

from ..output import render_columns

PER_CHANGE = ("change", "predicted_ns", "speedup", "saving_pct")
LEGEND = """replay error over the steps, |replayed - measured| / measured (baseline: the recorded waits kept,
exact by construction; dependency-only: recorded durations and dependencies alone; + cpu gaps: also
each CPU thread's untraced time, before and between its top-level ops, as its work):
"""


def flat(steps: dict, changes: dict, errors: dict) -> dict:
    """One row per (step, change), the step's figures and the dependency-only replays' errors over the
    steps (``errors``) repeated (csv / json); a step without changes keeps one row with an empty change."""
    n, m = len(steps["step"]), len(changes["step"])
    # every step has the same changes, in step order (``replay.tables``)
    at = np.repeat(np.arange(n), m // n) if n and m else np.arange(n)
    out = {k: np.asarray(v, dtype=object)[at] for k, v in steps.items()}
    for k in PER_CHANGE:
        out[k] = np.asarray(changes[k], dtype=object) if m else np.full(n, None, object)
    for prefix, replay in (("dependency", "dependency-only"), ("with_cpu_gaps", "dependency + cpu gaps")):
        row = list(errors["replay"]).index(replay)
        for k in ("mean", "p90", "max"):
            out[f"{prefix}_{k}_abs_error_pct"] = np.full(len(at), errors[f"{k}_abs_error_pct"][row], object)
    return out


def render(steps: dict, changes: dict, errors: dict, fmt: str) -> str:
    """The baseline per step first (its replay error says how far to trust the rest), the replays'
    errors over the steps, then each change's predicted step time and speedup."""
    if fmt != "table":
        text = render_columns(flat(steps, changes, errors), fmt)
        return text if text.endswith("\n") else text + "\n"
    out = render_columns({"step": steps["step"], "measured_us": steps["measured_ns"] / 1e3,
                          "baseline_us": steps["baseline_ns"] / 1e3,
                          "baseline_error_pct": steps["baseline_error_pct"],
                          "unexplained_pct": steps["unexplained_pct"],
                          "dependency_us": steps["dependency_ns"] / 1e3,
                          "dependency_error_pct": steps["dependency_error_pct"],
                          "with_cpu_gaps_us": steps["with_cpu_gaps_ns"] / 1e3,
                          "with_cpu_gaps_error_pct": steps["with_cpu_gaps_error_pct"]}, "table")
    out += "\n" + LEGEND + render_columns(errors, "table")
    if len(changes["step"]):
        out += "\n" + render_columns({"step": changes["step"], "change": changes["change"],
                                      "predicted_us": changes["predicted_ns"] / 1e3,
                                      "speedup": changes["speedup"],
                                      "saving_pct": changes["saving_pct"]}, "table")
    return out
