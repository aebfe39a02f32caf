"""``diff --explain``: a step-time change split along both runs' critical paths (of traces or ``job_path``s).
The pieces tile each step (idle is a category of its own), so the changes sum to the step-time change."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import critical_path as cp
from .steps import steps as all_steps
from .tables import objects

if TYPE_CHECKING:
    from ..trace import Trace

IDLE_EVENT = "(idle)"


def path_times(trace: Trace, step_numbers: list[int | None]) -> tuple[float, dict, dict]:
    """(mean step time, mean ns per category, mean ns per (event, category)) over the
    critical paths of ``step_numbers`` (None: the whole trace)."""
    cut = []
    for n in step_numbers:
        r = cp.analyse(trace, n)
        p, e = r.pieces(), r.edges
        name = np.where(p["category"] == cp.IDLE, IDLE_EVENT, e["event_name"][np.maximum(p["edge"], 0)]
                        if len(e["event_name"]) else IDLE_EVENT)
        cut.append((r.window.end - r.window.start, p["category"], name, p["end"] - p["ts"]))
    return tally(cut)


def job_path_times(paths: list) -> tuple[float, dict, dict]:
    """``path_times`` of a job's paths (``job_path.JobPath``, one per step)."""
    cut = []
    for jpath in paths:
        p = jpath.pieces()
        name = np.where(p["category"] == cp.IDLE, IDLE_EVENT, p["event"])
        cut.append((jpath.window.end - jpath.window.start, p["category"], name,
                    p["end"] - p["ts"]))
    return tally(cut)


def tally(cut: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]) -> tuple[float, dict, dict]:
    """Means over steps, each (its window's length, and per piece category, event name and
    duration): (step time, ns per category, ns per (event, category))."""
    total, cats, events = 0, {c: 0 for c in cp.CATEGORIES}, {}
    for length, category, name, dur in cut:
        for c, x, d in zip(category.tolist(), name.tolist(), dur.tolist()):
            cats[c] += d
            events[(x, c)] = events.get((x, c), 0) + d
        total += length
    k = max(len(cut), 1)
    return total / k, {c: v / k for c, v in cats.items()}, {x: v / k for x, v in events.items()}


def numbers(trace: Trace, step: int | None) -> list[int | None]:
    """The steps compared on one side: ``step``, else every ProfilerStep, else the whole
    trace (None)."""
    if step is not None:
        return [step]
    found = all_steps(trace)["step"].tolist()
    return found or [None]


def explain(a: Trace, b: Trace, step_a: int | None = None, step_b: int | None = None) -> dict:
    """``step_a_ns``, ``step_b_ns``, ``delta_ns`` (per step) and tables ``categories`` (``category, a_ns,
    b_ns, delta_ns, share_of_change_pct``, ``CATEGORIES`` order) and ``events`` (``event, category, a_ns,
    b_ns, delta_ns``, largest |delta| first); each table's ``delta_ns`` sums to ``delta_ns``."""
    return split(path_times(a, numbers(a, step_a)), path_times(b, numbers(b, step_b)))


def split(side_a: tuple[float, dict, dict], side_b: tuple[float, dict, dict]) -> dict:
    """``explain``'s result from each side's ``path_times`` (or ``job_path_times``)."""
    (sa, ca, ea), (sb, cb, eb) = side_a, side_b
    delta = sb - sa
    cat = list(cp.CATEGORIES)
    da = np.array([cb[c] - ca[c] for c in cat])
    categories = {"category": objects(cat), "a_ns": np.array([ca[c] for c in cat]),
                  "b_ns": np.array([cb[c] for c in cat]), "delta_ns": da,
                  "share_of_change_pct": (100 * da / delta if delta else np.zeros(len(cat))) + 0.0}
    keys = sorted(ea.keys() | eb.keys(), key=lambda k: (str(k[0]), k[1]))
    a_ns = np.array([ea.get(k, 0.0) for k in keys])
    b_ns = np.array([eb.get(k, 0.0) for k in keys])
    o = np.argsort(-np.abs(b_ns - a_ns), kind="stable")
    events = {"event": objects([keys[i][0] for i in o]),
              "category": objects([keys[i][1] for i in o]),
              "a_ns": a_ns[o], "b_ns": b_ns[o], "delta_ns": (b_ns - a_ns)[o]}
    return {"step_a_ns": sa, "step_b_ns": sb, "delta_ns": delta, "categories": categories,
            "events": events}
