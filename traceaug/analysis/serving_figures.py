"""A serving trace's figures for ``report`` (``analysis.serving`` finds its steps): per step its latency, GPU
busy / idle, launch and scheduler time, per phase their distribution and where its GPU time goes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .percentiles import percentiles
from .serving import PHASES, WARM_UP
from .tables import Columns, objects

if TYPE_CHECKING:
    from .gpu_steps import GpuOps


def part(g: GpuOps) -> dict:
    """A rank's serving figures (``report``): its steps (``step_rows``), the GPU time per attributed op of
    each phase (``graph_replay``) and the replay line."""
    from .graph_replay import op_times

    st, ops, replays = g.serving, g.ops, g.replays
    n = len(st["step"])
    mine = (ops["step"] >= 0) & (ops["step"] < n)
    label = labels(st)
    at = np.searchsorted(st["ts"], replays.ops["launch_ts"], side="right") - 1
    phase = np.where(at >= 0, label[np.maximum(at, 0)] if n else "", "none").astype(object)
    direct = ops["launched"] & ~np.isin(ops["correlation"], replays.ops["correlation"]) & mine
    return {"steps": step_rows(g), "ops": op_times(replays, phase),
            "direct": {"phase": label[ops["step"][direct]], "dur": ops["dur"][direct]},
            "replayed": replays.replayed, "attributed": replays.attributed, "line": replays.line()}


def step_rows(g: GpuOps) -> Columns:
    """Per serving step its ``phase``, ``batch``, ``latency`` (CPU start to the later of its CPU end and its
    GPU ops' end), GPU ``busy`` / ``idle`` in its GPU window, ``launch`` (its launch calls' time),
    ``cpu_gap`` (CPU time since the step before ended: the scheduler's; -1 for the first). Steps before the
    steady state (``steady``) are the phase ``warm-up``, not their own."""
    from .breakdown import window_rows

    st, w, ops = g.serving, g.steps, g.ops
    n = len(st["step"])
    mine = (ops["step"] >= 0) & (ops["step"] < n)
    cpu_end = st["ts"] + st["dur"]
    rows = window_rows(g, w["ts"], w["end"])
    launched = mine & ops["launched"]
    calls = sorted(set(zip(ops["step"][launched].tolist(), ops["correlation"][launched].tolist(),
                           ops["launch_dur"][launched].tolist())))
    launch = np.bincount([s for s, _, _ in calls], [d for _, _, d in calls], n).astype(np.int64) \
        if calls else np.zeros(n, np.int64)
    return {"step": st["step"], "phase": labels(st), "batch": st["batch"],
            "latency": latency(st, ops["step"], ops["end"]), "busy": rows["busy"], "idle": rows["idle"],
            "launch": launch, "cpu_gap": np.r_[-1, st["ts"][1:] - cpu_end[:-1]].astype(np.int64)[:n]}


def labels(st: Columns) -> np.ndarray:
    """Each serving step's phase, the steps before the steady state ``warm-up`` (kept apart)."""
    return np.where(st["steady"], st["phase"], WARM_UP).astype(object)


def latency(st: Columns, op_step: np.ndarray, op_end: np.ndarray) -> np.ndarray:
    """Each serving step's latency (ns): its CPU start to the later of its CPU end and the end of the GPU
    ops it launched (``op_step``: each op's step, -1: none)."""
    n = len(st["step"])
    end = np.full(n, np.iinfo(np.int64).min)
    mine = (op_step >= 0) & (op_step < n)
    np.maximum.at(end, op_step[mine], op_end[mine])
    return np.maximum(st["ts"] + st["dur"], end) - st["ts"]


def combine(parts: list[dict]) -> list[tuple[str, Columns]]:
    """The ranks' serving figures as two tables: per phase its steps' figures (``phase_table``), and per
    phase where its GPU time goes (GPU time per op, graph replays attributed)."""
    ops = {k: np.concatenate([p["ops"][k] for p in parts]) for k in parts[0]["ops"]}
    direct = {k: np.concatenate([p["direct"][k] for p in parts]) for k in ("phase", "dur")}
    by: dict[tuple, list] = {}
    for phase, op, count, total in zip(*(ops[k].tolist() for k in ("phase", "op", "count", "total"))):
        got = by.setdefault((phase, op), [0, 0])
        got[0], got[1] = got[0] + count, got[1] + total
    for phase in set(direct["phase"].tolist()):
        m = direct["phase"] == phase
        by[(phase, "(launched directly, not by a graph)")] = [int(m.sum()), int(direct["dur"][m].sum())]
    return [(PHASE_TABLE, phase_table([p["steps"] for p in parts])), (WHERE_TABLE, shares(by, "op"))]


def phase_order(phases) -> list[str]:
    """Phases as the tables list them: prefill, decode, mixed, then the others (warm-up, unknown)."""
    return sorted(set(phases), key=lambda p: (p not in PHASES, PHASES.index(p) if p in PHASES else 0, p))


def phase_table(parts: list[Columns]) -> Columns:
    """Per phase, over its steps (every rank's ``part``'s ``steps``): the step latency distribution
    (count, mean, p50, p90, p99, max; numpy's linear percentiles), GPU busy / idle in their GPU windows,
    launch time and the mean CPU time between steps."""
    st = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    rows: dict[str, list] = {k: [] for k in (
        "phase", "steps", "mean_batch", "latency_mean_ns", "latency_p50_ns", "latency_p90_ns",
        "latency_p99_ns", "latency_max_ns", "gpu_busy_ns", "gpu_idle_ns", "gpu_idle_pct", "launch_ns",
        "cpu_between_steps_mean_ns")}
    for phase in phase_order(st["phase"].tolist()):
        m = st["phase"] == phase
        lat, busy, idle = st["latency"][m], int(st["busy"][m].sum()), int(st["idle"][m].sum())
        gaps, batch = st["cpu_gap"][m & (st["cpu_gap"] >= 0)], st["batch"][m & (st["batch"] >= 0)]
        p50, p90, p99 = percentiles(lat, [50, 90, 99])
        for k, v in zip(rows, (phase, int(m.sum()), float(batch.mean()) if len(batch) else np.nan,
                               float(lat.mean()), p50, p90, p99, int(lat.max()), busy, idle,
                               100.0 * idle / max(busy + idle, 1), int(st["launch"][m].sum()),
                               float(gaps.mean()) if len(gaps) else np.nan)):
            rows[k].append(v)
    return {k: objects(v) if k == "phase" else np.array(v, np.float64 if isinstance(v[0], float)
                                                        else np.int64) for k, v in rows.items()}


def shares(by: dict[tuple, list], key: str) -> Columns:
    """``by`` ({(phase, name): [count, GPU ns]}) as a table: per phase (in name order) its names, largest
    first, each with its count, GPU time and share of the phase's GPU time."""
    phase_total: dict[str, int] = {}
    for (phase, _), (_, total) in by.items():
        phase_total[phase] = phase_total.get(phase, 0) + total
    order = sorted(by, key=lambda k: (k[0], -by[k][1]))
    return {"phase": objects([k[0] for k in order]), key: objects([k[1] for k in order]),
            "count": np.array([by[k][0] for k in order], np.int64),
            "gpu_time_ns": np.array([by[k][1] for k in order], np.int64),
            "share_pct": np.array([100.0 * by[k][1] / max(phase_total[k[0]], 1) for k in order])}


PHASE_TABLE = "serving: steps per phase"
WHERE_TABLE = "serving: where each phase's GPU time goes (per op)"
