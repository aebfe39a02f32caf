"""``diff --explain``: a step-time change split along both runs' critical paths (of traces or ``job_path``s).
The pieces tile each step (idle is a category of its own), so the changes sum to the step-time change."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from . import critical_path as cp
from . import dag, stacked
from .steps import steps as all_steps
from .tables import objects

if TYPE_CHECKING:
    from ..trace import Trace

IDLE_EVENT = "(idle)"


def path_times(trace: Trace, step_numbers: list[int | None]) -> tuple[float, dict, dict]:
    """(mean step time, mean ns per category, mean ns per (event, category)) over the critical paths of
    ``step_numbers`` (None: the whole trace), every window's path found at once (``stacked``)."""
    every = cp.step_windows(trace) if len(step_numbers) > 1 else {}
    wins = [every[n] if n in every else cp.window(trace, n) for n in step_numbers]
    graph, win = stacked.graph(cp.events(trace), wins)
    path, on = dag.longest_paths(graph, np.repeat(win, 2))
    kind, event = graph.kind[path], graph.event[path]
    shown = np.where(event >= 0, event, graph.dst[path] // 2)
    name = graph.ev["name"][shown]
    unread = np.flatnonzero(name == None)  # noqa: E711  (GPU ops: their names on the paths)
    name[unread] = cp.names(trace, graph.ev["id"][shown[unread]])
    weight = graph.weight[path]
    length = np.array([w.end - w.start for w in wins], np.int64)
    idle = length - np.bincount(on, weights=weight, minlength=len(wins)).astype(np.int64)
    return tally(int(length.sum()), len(wins), np.r_[cp.category_of(graph, kind, shown, name),
                                                     np.full(len(wins), cp.IDLE, object)],
                 np.r_[name, np.full(len(wins), IDLE_EVENT, object)], np.r_[weight, idle])


def job_path_times(paths: list) -> tuple[float, dict, dict]:
    """``path_times`` of a job's paths (``job_path.JobPath``, one per step)."""
    pieces = [jpath.pieces() for jpath in paths]
    total = sum(jpath.window.end - jpath.window.start for jpath in paths)
    cat = np.concatenate([p["category"] for p in pieces] or [np.empty(0, object)])
    name = np.concatenate([np.where(p["category"] == cp.IDLE, IDLE_EVENT, p["event"]) for p in pieces]
                          or [np.empty(0, object)])
    dur = np.concatenate([p["end"] - p["ts"] for p in pieces] or [np.empty(0, np.int64)])
    return tally(total, len(paths), cat, name, dur)


def tally(total: int, windows: int, category: np.ndarray, name: np.ndarray, dur: np.ndarray
          ) -> tuple[float, dict, dict]:
    """Means over ``windows`` steps of ``total`` ns, from pieces of the paths by category, event name and
    duration: (step time, ns per category, ns per (event, category)); pieces of no time left out."""
    keep = dur > 0
    df = pd.DataFrame({"name": name[keep], "category": category[keep], "ns": dur[keep]})
    by = df.groupby(["name", "category"], sort=False)["ns"].sum()
    per_cat = df.groupby("category")["ns"].sum()
    k = max(windows, 1)
    return (total / k, {c: float(per_cat.get(c, 0)) / k for c in cp.CATEGORIES},
            {key: v / k for key, v in by.items()})


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
