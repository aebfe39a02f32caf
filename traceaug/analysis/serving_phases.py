"""A serving trace per phase (prefill, decode, mixed; warm-up steps apart) for ``breakdown`` and ``diff``:
each phase's steps (``serving_figures``: latency, GPU busy / idle, launch and scheduler time), its GPU time
per kernel family, and two traces compared phase by phase, so a change in decode is not hidden by prefill."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from . import serving_figures as figures
from .diff import DEFAULT_THRESHOLD, change_status, gate, gate_lines, min_delta_ns, op_table
from .diff import compare as compare_ops
from .gpa_summary import DEFAULT_MAP, classify
from .percentiles import percentiles
from .serving import steps as serving_steps
from .sums import group_sums
from .tables import Columns, codes, objects

if TYPE_CHECKING:
    from .diff import DiffResult, Side
    from .gpu_steps import GpuOps

STEPS_TABLE = ("serving phases: latency over each phase's steps (CPU start to the later of CPU and GPU end), "
               "GPU busy / idle in their GPU windows")
FAMILY_TABLE = "serving phases: GPU time per kernel family (share_pct: of the phase's GPU time)"
LATENCY = ("mean", "p50", "p90")  # the step latency figures ``diff`` compares per phase
ONLY = {"a": "only in A", "b": "only in B"}


def part(g: GpuOps, step: int | None = None) -> dict | None:
    """A rank's per-phase figures for ``breakdown`` (``step``: that step's alone): its steps' figures and
    per (phase, kernel family) the GPU ops' count and time; None for a trace without serving steps."""
    n = len(g.serving.get("step", ()))
    if not n:
        return None
    steps = figures.step_rows(g)
    keep = np.ones(n, bool) if step is None else steps["step"] == step
    ops = g.ops
    mine = np.flatnonzero((ops["step"] >= 0) & (ops["step"] < n))
    mine = mine[keep[ops["step"][mine]]]
    first = np.unique(ops["name_id"], return_index=True)[1]  # each distinct name's first op: named once
    family, families = codes(classify(ops["name"][first], DEFAULT_MAP))
    phase, phases = codes(steps["phase"])
    pair, at = np.unique(phase[ops["step"][mine]] * len(families) + family[ops["name_id"][mine]],
                         return_inverse=True)
    return {"steps": {k: v[keep] for k, v in steps.items()}, "families": {
        "key": [(phases[k // len(families)], families[k % len(families)]) for k in pair.tolist()],
        "count": np.bincount(at, minlength=len(pair)).astype(np.int64),
        "total": group_sums(at, ops["dur"][mine], len(pair), "GPU op durations")}}


def sections(parts: list[dict | None]) -> list[tuple[str, Columns]]:
    """``breakdown``'s per-phase tables from the ranks' ``part``s (none without serving steps)."""
    got = [p for p in parts if p is not None]
    if not got:
        return []
    by: dict[tuple, list] = {}
    for p in got:
        f = p["families"]
        for key, count, total in zip(f["key"], f["count"].tolist(), f["total"].tolist()):
            have = by.setdefault(tuple(key), [0, 0])
            have[0], have[1] = have[0] + count, have[1] + total
    return [(STEPS_TABLE, figures.phase_table([p["steps"] for p in got])),
            (FAMILY_TABLE, figures.shares(by, "family"))]


def _phases(side: Side) -> tuple[np.ndarray, np.ndarray] | None:
    """Each serving step's phase (warm-up apart) and latency on one side of a diff; None: no serving steps."""
    st = serving_steps(side.trace)
    if not len(st["step"]):
        return None
    gpu = side.gpu
    end = gpu["ts"].astype(np.int64) + gpu["dur"].astype(np.int64)
    return figures.labels(st), figures.latency(st, gpu["step"].astype(np.int64), end)


def _of_phase(side: Side, phases: np.ndarray, phase: str) -> Side:
    """``side`` with the steps of ``phase`` alone (the other steps' ops in none): ``diff``'s op table of it
    is per step of that phase."""
    mask = phases == phase
    ops = dict(side.ops)
    ops["step"] = np.where(np.isin(ops["step"], side.steps["step"][mask]), ops["step"], -1)
    return replace(side, ops=ops, steps={k: v[mask] for k, v in side.steps.items()})


def compare(a: Side, b: Side, how: dict | None = None) -> list[dict] | None:
    """Per phase of either side (``phase_order``), a ``diff`` result of its own (``how``: ``diff``'s ``by``,
    ``device``, ``threshold``, ``inclusive``; their defaults where missing): ``a`` / ``b`` its steps
    there and their latency (``step_ns`` the mean; ``latency_mean_ns``, ``_p50_ns``, ``_p90_ns``; None
    without steps), ``present`` (``both`` or the side it is only in) and, on both sides, ``ops``: the ops
    compared per step of that phase (``diff.compare``). None: neither side is a serving trace."""
    found = {"a": _phases(a), "b": _phases(b)}
    if not any(found.values()):
        return None
    how = {"by": "name", "device": "all", "threshold": DEFAULT_THRESHOLD, "inclusive": False, **(how or {})}
    threshold = how["threshold"]
    out = []
    for phase in figures.phase_order(np.concatenate([f[0] for f in found.values() if f]).tolist()):
        row: dict = {"phase": phase}
        for s, f in found.items():
            lat = f[1][f[0] == phase] if f else np.zeros(0, np.int64)
            stats = [float(lat.mean()), *percentiles(lat, [50, 90])] if len(lat) else [None] * 3
            row[s] = {"steps": len(lat), "step": None, "step_ns": stats[0],
                      **{f"latency_{k}_ns": v for k, v in zip(LATENCY, stats)}}
        missing = [s for s in "ab" if not row[s]["steps"]]
        row["present"] = ONLY["b" if missing == ["a"] else "a"] if missing else "both"
        row["status"] = row["present"] if missing else _status(row["a"]["step_ns"], row["b"]["step_ns"],
                                                               threshold)
        if not missing:
            tables = [op_table(_of_phase(side, found[s][0], phase), how["by"], how["device"], None,
                               how["inclusive"]) for s, side in (("a", a), ("b", b))]
            row["ops"] = compare_ops(*tables, threshold)
        out.append(row)
    return out


def _status(a: float, b: float, threshold: float) -> str:
    """A phase's mean latency change called as an op's is (``diff.change_status``)."""
    return str(change_status(np.array([100 * (b - a) / a if a else 0.0]), threshold)[0])


def latency_table(phases: list[dict]) -> Columns:
    """The phases' step latencies side by side (ns), the change of the mean and its ``status``
    (``compare``'s)."""
    rows: dict[str, list] = {}
    for r in phases:
        a, b = r["a"]["step_ns"], r["b"]["step_ns"]
        both = r["present"] == "both"
        for k, v in (("phase", r["phase"]), ("status", r["status"]), ("steps_a", r["a"]["steps"]),
                     ("steps_b", r["b"]["steps"]),
                     *((f"latency_{s}_{x}_ns", r[x][f"latency_{s}_ns"]) for s in LATENCY for x in "ab"),
                     ("latency_mean_delta_ns", b - a if both else None),
                     ("latency_mean_delta_pct", 100 * (b - a) / a if both and a else None)):
            rows.setdefault(k, []).append(v)
    return {k: objects(v) if k in ("phase", "status") or any(x is None for x in v)
            else np.array(v, np.int64 if k.startswith("steps") else np.float64) for k, v in rows.items()}


def op_rows(phases: list[dict]) -> Columns | None:
    """Every phase's op rows (``diff``'s, per step of that phase), a ``phase`` column first; None: none."""
    tables = [{"phase": objects([r["phase"]] * len(r["ops"]["key"])), **r["ops"]}
              for r in phases if "ops" in r]
    if not tables:
        return None
    return {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}


def check(result: DiffResult, pct: float, min_delta_us: float | None = None) -> None:
    """``--fail-on-regression PCT`` per phase found on both sides: ``diff.gate`` on its mean step latency
    and its op rows (the floor: ``min_delta_us``, else 1 % of the phase's mean latency), each phase's
    ``gate``."""
    for r in result.ranks:
        for phase in r.result.get("phases") or ():
            if "ops" in phase:
                phase["gate"] = gate(phase, pct, min_delta_ns(phase, min_delta_us))


def regressions(result: DiffResult, mode: str = "all") -> tuple[list[str], list[str]]:
    """Why the phases' gates fail, and the notes on their ops (``diff.gate_lines``), each line naming its
    rank (of several) and phase."""
    fail, notes = [], []
    for r in result.ranks:
        where = f"rank {r.rank}: " if len(result.ranks) > 1 else ""
        for phase in r.result.get("phases") or ():
            if "gate" in phase:
                f, n = gate_lines(phase["gate"], f"{where}{phase['phase']} steps: ", mode, "step latency")
                fail, notes = fail + f, notes + n
    return fail, notes
