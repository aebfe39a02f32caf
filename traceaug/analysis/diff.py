"""Compare two traces of one rank: op / kernel counts and times per ProfilerStep (totals ÷ steps); status
added / removed / increased / decreased (beyond ``threshold`` %) / unchanged; ``compute`` avoids pandas."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TraceaugError
from ..output import cut
from . import graph_replay
from .gpu_steps import gpu_windows
from .intervals import covered_in
from .ranktest import bh_q, mann_whitney_p, min_p
from .shapes import NO_OP, launch_ops
from .steps import check_step, op_groups, shorten
from .sums import total
from .tables import Columns, codes, first_appearance, objects

if TYPE_CHECKING:
    from ..trace import Trace

BY = ("name", "short-name", "category", "op")
DEVICES = ("cpu", "gpu", "all")
DEFAULT_THRESHOLD = 5.0  # percent
Steps = tuple[int | None, int | None]  # the ProfilerStep number compared on each side (None: all)
OP_COLUMNS = ("device", "key", "status", "count_a", "count_b", "delta_count", "total_a_ns",
              "total_b_ns", "delta_ns", "delta_pct", "mean_a_ns", "mean_b_ns", "p_value")


@dataclass
class Side:
    """One trace's ops with their steps, ready to compare."""

    trace: Trace
    ops: Columns  # steps.op_groups: CPU ops per (name, step), GPU ops one row each
    gpu: Columns  # GPU ops: ts, dur, step, category (the headline's busy times)
    names: list  # the distinct op names; ops["name_code"] indexes them
    steps: Columns
    _launchers: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def of(cls, trace: Trace) -> Side:
        return cls(trace, *op_groups(trace))

    def launchers(self) -> np.ndarray:
        """Per row of ``ops``, its op for ``--by op``: a CPU op's name; a GPU op's launching CPU op (a
        graph-replayed kernel's, the op that captured it, as if that op launched it), ``NO_OP`` for none."""
        if self._launchers is None:
            link = launch_ops(self.trace)
            by_corr = dict(zip(link["correlation"].tolist(), link["name"].tolist(), strict=True))
            gpu = self.gpu
            own = [by_corr.get(c, NO_OP) for c in gpu["correlation"].tolist()]
            captured = graph_replay.op_of(graph_replay.attribute(self.trace), gpu["id"].astype(np.int64))
            replayed = captured != None  # noqa: E711  (an object column)
            gpu_op = np.where(replayed, captured, objects(own))
            cpu = objects(self.names)[self.ops["name_code"][~self.ops["gpu"]]]
            self._launchers = np.r_[cpu, gpu_op].astype(object)
        return self._launchers

    def window(self, at: np.ndarray, step: int | None) -> tuple[np.ndarray, int]:
        """Which rows (by their step numbers ``at``) are in the compared steps (a mask), and
        how many steps that is."""
        if step is not None:
            check_step(self.trace.path, self.steps["step"], step)
            return at == step, 1
        if not len(self.steps["step"]):
            return np.ones(len(at), dtype=bool), 1
        return at >= 0, len(self.steps["step"])

    def step_at(self, index: int) -> int:
        """The number of the ``index``-th ProfilerStep in time order (0-based; -1: the last)."""
        numbers = self.steps["step"].tolist()
        if not -len(numbers) <= index < len(numbers):
            have = ", ".join(map(str, numbers)) or "none"
            raise TraceaugError(f"{self.trace.path}: no step at index {index} "
                                f"({len(numbers)} ProfilerSteps: {have})")
        return numbers[index]


def pick_steps(a: Side, b: Side, step: int | None = None, step_a: int | None = None,
               step_b: int | None = None, step_index: int | None = None) -> Steps:
    """The ProfilerStep number compared on each side: ``step`` on both, ``step_a`` / ``step_b`` (one alone:
    against every step of the other), ``step_index`` (same position on both); None everywhere: every step."""
    if sum(x is not None for x in (step, step_index)) + (step_a is not None or step_b is not None) > 1:
        raise TraceaugError("choose the steps one way: --step, --step-a/--step-b or --step-index")
    if step_index is not None:
        return a.step_at(step_index), b.step_at(step_index)
    if step is not None:
        return step, step
    return step_a, step_b

def _on_device(ops: Columns, device: str) -> np.ndarray:
    """Mask of the GPU ops, the CPU ops, or both."""
    gpu = ops["gpu"]
    if device == "gpu":
        return gpu
    cpu = ops["kind"] == "cpu_op"
    return cpu if device == "cpu" else gpu | cpu


def _keys(side: Side, by: str, rows: np.ndarray) -> tuple[np.ndarray, list]:
    """Each row's key number and the keys it numbers."""
    ops = side.ops
    if by == "category":
        return codes(ops["category"][rows])
    if by == "op":
        return codes(side.launchers()[rows])
    code = ops["name_code"][rows]
    if by == "name":
        return code, side.names
    short, keys = codes([shorten(n) if isinstance(n, str) else n for n in side.names])
    return short[code], keys


def op_table(side: Side, by: str = "name", device: str = "all", step: int | None = None,
             inclusive: bool = False) -> Columns:
    """Per (device, key), in order of first appearance: count and total ns per step, and ``per_step``
    (keys × steps: the total in each compared step, for ``ranktest``); CPU ops by self time unless
    ``inclusive``."""
    ops = side.ops
    rows, n = side.window(ops["step"], step)
    rows = np.flatnonzero(rows & _on_device(ops, device))
    key_code, keys = _keys(side, by, rows)
    named = np.array([k is not None for k in keys], dtype=bool)[key_code]
    rows, key_code = rows[named], key_code[named]  # no key, no group (as pandas drops NaN)
    gpu = ops["gpu"][rows]
    group = first_appearance(key_code * 2 + gpu)
    first = np.unique(group, return_index=True)[1]  # each group's first row, in group order
    numbers = np.sort(side.steps["step"])
    at = np.searchsorted(numbers, ops["step"][rows]) if n > 1 else np.zeros(len(rows), np.int64)
    time = ops["total" if inclusive else "self"][rows].astype(np.float64)
    per_step = np.bincount(group * n + at, time, len(first) * n).reshape(len(first), n)
    return {"device": np.where(gpu[first], "gpu", "cpu").astype(object),
            "key": objects(keys)[key_code[first]],
            "count": np.bincount(group, ops["count"][rows].astype(np.float64), len(first)) / n,
            "total": per_step.sum(axis=1) / n, "per_step": per_step}


def change_status(pct: np.ndarray, threshold: float) -> np.ndarray:
    """A change of ``pct`` % called "increased" / "decreased" beyond ``threshold`` %, else "unchanged"."""
    return np.select([pct > threshold, pct < -threshold], ["increased", "decreased"], default="unchanged")


def compare(a: Columns, b: Columns, threshold: float = DEFAULT_THRESHOLD) -> Columns:
    """Outer join of two op tables with deltas (ns per step, float64: means over the steps), a status
    per row and the ``p_value`` of the change (``ranktest``: per-step times, an op's absent step
    counting 0), largest |delta| first (ties in (device, key) order)."""
    at = {k: i for i, k in enumerate(zip(a["device"].tolist(), a["key"].tolist()))}
    bt = {k: i for i, k in enumerate(zip(b["device"].tolist(), b["key"].tolist()))}
    keys = sorted(at.keys() | bt.keys())

    def side(table: Columns, where: dict, col: str) -> np.ndarray:
        return np.array([table[col][where[k]] if k in where else 0.0 for k in keys], np.float64)

    def steps(table: Columns, where: dict) -> np.ndarray:
        out = np.zeros((len(keys), table["per_step"].shape[1]))
        for i, k in enumerate(keys):
            if k in where:
                out[i] = table["per_step"][where[k]]
        return out

    step_a, step_b = steps(a, at), steps(b, bt)
    p_value = np.array([mann_whitney_p(x, y) for x, y in zip(step_a, step_b, strict=True)])
    count_a, count_b = side(a, at, "count"), side(b, bt, "count")
    total_a, total_b = side(a, at, "total"), side(b, bt, "total")
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_a = np.where(count_a != 0, total_a / count_a, np.nan)
        mean_b = np.where(count_b != 0, total_b / count_b, np.nan)
        delta = total_b - total_a
        delta_pct = np.where(total_a != 0, 100 * delta / total_a, np.nan)
    in_a = np.array([k in at for k in keys], bool)
    in_b = np.array([k in bt for k in keys], bool)
    pct = np.nan_to_num(delta_pct, nan=0.0)
    status = np.where(~in_a, "added", np.where(~in_b, "removed", change_status(pct, threshold)))
    out = {"device": objects([k[0] for k in keys]), "key": objects([k[1] for k in keys]),
           "status": status.astype(object), "count_a": count_a, "count_b": count_b,
           "delta_count": count_b - count_a, "total_a_ns": total_a, "total_b_ns": total_b,
           "delta_ns": delta, "delta_pct": delta_pct, "mean_a_ns": mean_a, "mean_b_ns": mean_b,
           "p_value": p_value}
    order = np.argsort(-np.abs(delta), kind="stable")
    return {c: out[c][order] for c in OP_COLUMNS}


def headline(side: Side, step: int | None = None) -> dict:
    """Per step (ns, float64: means over the steps): step time (CPU), GPU busy / idle and compute /
    communication / memory time inside each step's GPU window (``gpu_steps``: windows tile, so no op
    counts twice); ``step``: None for every step."""
    n = side.window(side.gpu["step"], step)[1]
    st_dur = side.steps["dur"]
    if step is not None:
        st_dur = st_dur[side.steps["step"] == step]
    gpu = side.gpu
    ts = gpu["ts"].astype(np.int64)
    end = ts + gpu["dur"].astype(np.int64)
    win = gpu_windows(side.trace, side.steps, ts, end, gpu["step"])
    pick = win["step"] == step if step is not None else np.ones(len(win["step"]), bool)
    lo, hi = win["ts"][pick].astype(np.int64), win["end"][pick].astype(np.int64)
    if not len(st_dur):  # no steps: the GPU ops' own span (none on a CPU-only trace)
        start, stop = side.trace.span() or (0, 0)
        step_ns = float(stop - start)
        lo, hi = (ts.min(keepdims=True), end.max(keepdims=True)) if len(ts) else (ts[:0], ts[:0])
    else:
        step_ns = float(st_dur.mean())

    def inside(sel: np.ndarray) -> float:
        return total(covered_in(ts[sel], end[sel], lo, hi)) / n

    busy = inside(np.ones(len(ts), bool))
    span = total(hi - lo, "step windows") / n
    out = {"steps": len(st_dur), "step": step, "step_ns": step_ns, "gpu_busy_ns": busy,
           "gpu_idle_ns": max(span - busy, 0.0)}
    for c in ("computation", "communication", "memory"):
        out[f"{c}_ns"] = inside(gpu["category"] == c)
    return out


def compute(a: Side, b: Side, by: str = "name", device: str = "all",
            step: int | None | Steps = None, threshold: float = DEFAULT_THRESHOLD,
            inclusive: bool = False) -> dict:
    """Headline for both sides and the per-op comparison (``Columns``); ``step``: one step
    number for both sides, or a (step of A, step of B) pair (``pick_steps``); CPU ops by self
    time unless ``inclusive``."""
    if by not in BY:
        raise TraceaugError(f"--by must be one of {', '.join(BY)}")
    if device not in DEVICES:
        raise TraceaugError(f"--device must be one of {', '.join(DEVICES)}")
    step_a, step_b = step if isinstance(step, tuple) else (step, step)
    if device != "cpu":
        for side in (a, b):
            if not len(side.gpu["ts"]):
                raise TraceaugError(f"{side.trace.path}: no GPU kernels, copies or sets to compare "
                                    "(--device cpu compares CPU ops only)")
    ops = compare(op_table(a, by, device, step_a, inclusive),
                  op_table(b, by, device, step_b, inclusive), threshold)
    return {"a": headline(a, step_a), "b": headline(b, step_b), "ops": ops}


@dataclass
class RankDiff:
    """The comparison of one rank (``gate``: set by ``check``)."""

    rank: int | None
    a: Path
    b: Path
    result: dict
    gate: dict | None = None


@dataclass
class DiffResult:
    ranks: list[RankDiff]
    unmatched: dict[str, list] = field(default_factory=dict)
    sides: list[tuple[Side, Side]] = field(default_factory=list)
    memory: list = field(default_factory=list)  # titled tables (render.memory_text.diff_sections)
    efficiency: list = field(default_factory=list)  # titled tables (render.efficiency_text.diff_sections)


MIN_DELTA_SHARE_PCT = 1.0  # default --min-delta: this share of the mean step time of A and B
LEVEL = 0.05  # an op change is significant when its Benjamini–Hochberg q-value is at most this


def min_delta_ns(res: dict, min_delta_us: float | None) -> float:
    """The floor an op's per-step change must pass to count: ``min_delta_us``, else
    ``MIN_DELTA_SHARE_PCT`` % of the mean of both step times (a change too small to move the step is
    noise; the mean, so that A against B and B against A have one floor)."""
    if min_delta_us is not None:
        return min_delta_us * 1e3
    return (res["a"]["step_ns"] + res["b"]["step_ns"]) / 2 * MIN_DELTA_SHARE_PCT / 100


def gate(res: dict, pct: float, floor_ns: float) -> dict:
    """What ``--fail-on-regression PCT`` decides for one rank: the step time on its own threshold;
    the ops present on both sides whose per-step time changed by over ``pct`` % (of the smaller side:
    symmetric) and over ``floor_ns``, each with its p-value and Benjamini–Hochberg q-value among them;
    a regression gates when q <= ``LEVEL`` (never with too few steps to reach it)."""
    va, vb = res["a"]["step_ns"], res["b"]["step_ns"]
    n, m = max(res["a"]["steps"], 1), max(res["b"]["steps"], 1)
    ops = res["ops"]
    ta, tb, delta = ops["total_a_ns"], ops["total_b_ns"], ops["delta_ns"]
    big = ((ops["count_a"] > 0) & (ops["count_b"] > 0) & (np.abs(delta) > floor_ns)
           & (np.maximum(ta, tb) > np.minimum(ta, tb) * (1 + pct / 100)))
    rows = np.flatnonzero(big)  # in the table's order: largest |delta| first
    q = bh_q(ops["p_value"][rows])
    listed = [{"device": ops["device"][i], "key": ops["key"][i],
               "change": "regression" if delta[i] > 0 else "improvement",
               "delta_ns": float(delta[i]), "delta_pct": float(ops["delta_pct"][i]),
               "p_value": float(ops["p_value"][i]), "q_value": float(qi),
               "gates": bool(delta[i] > 0 and qi <= LEVEL)} for i, qi in zip(rows, q, strict=True)]
    step_pct = 100 * (vb - va) / va if va > 0 else 0.0
    return {"fail_on_regression_pct": pct, "min_delta_ns": floor_ns, "level": LEVEL,
            "test": "two-sided Mann-Whitney U over per-step times, Benjamini-Hochberg over the "
                    "ops past both thresholds",
            "steps_a": n, "steps_b": m, "enough_steps": min_p(n, m) <= LEVEL,
            "step_a_ns": va, "step_b_ns": vb, "step_change_pct": step_pct,
            "step_regressed": step_pct > pct, "ops": listed}


def check(result: DiffResult, pct: float, min_delta_us: float | None = None) -> None:
    """Set every rank's ``gate`` (``--fail-on-regression``)."""
    for r in result.ranks:
        r.gate = gate(r.result, pct, min_delta_ns(r.result, min_delta_us))


def _named(ops: list[dict], top: int = 3) -> str:
    """The first ``top`` of the gate's ops (largest per-step change first), with their figures."""
    return ", ".join(f"{o['device']} {clip(o['key'])} ({o['delta_ns'] / 1e3:+.1f} us, "
                     f"{o['delta_pct']:+.1f}%, p={o['p_value']:.2g})" for o in ops[:top])


def regressions(result: DiffResult, mode: str = "all") -> tuple[list[str], list[str]]:
    """Why the gate fails (``check`` first), and notes on op changes reported but not gated: too few
    steps to tell them from noise, or not significant; ``mode`` "step": the step time alone."""
    fail, notes = [], []
    for r in result.ranks:
        f, n = gate_lines(r.gate, f"rank {r.rank}: " if len(result.ranks) > 1 else "", mode)
        fail, notes = fail + f, notes + n
    return fail, notes


def gate_lines(g: dict, where: str, mode: str = "all", what: str = "step time"
               ) -> tuple[list[str], list[str]]:
    """One ``gate``'s lines (``regressions``), each starting with ``where``; ``what``: the step figure."""
    fail, notes = [], []
    if g["step_regressed"]:
        fail.append(f"{where}{what} {g['step_a_ns'] / 1e3:,.3f} -> {g['step_b_ns'] / 1e3:,.3f} "
                    f"us (+{g['step_change_pct']:.1f}%)")
    if mode == "step":
        return fail, notes
    grew = [o for o in g["ops"] if o["change"] == "regression"]
    gates = [o for o in grew if o["gates"]]
    past = f"by over {g['fail_on_regression_pct']:g}% and {g['min_delta_ns'] / 1e3:,.1f} us per step"
    if gates:
        fail.append(f"{where}{len(gates)} op(s) grew {past}, significant over {g['steps_a']} vs "
                    f"{g['steps_b']} steps (q <= {g['level']:g}): {_named(gates)}")
    if len(gates) < len(grew):
        why = (f"not significant (q > {g['level']:g})" if g["enough_steps"] else
               f"{g['steps_a']} vs {g['steps_b']} steps are too few to tell a change from "
               f"noise (p >= {min_p(g['steps_a'], g['steps_b']):.2g} > {g['level']:g})")
        notes.append(f"{where}{len(grew) - len(gates)} op(s) grew {past}, reported, not gated: "
                     f"{why}: {_named([o for o in grew if not o['gates']])}")
    return fail, notes


def clip(name, width: int = 70):
    """A long key shortened to ``width`` characters (``output.cut``); a key that is not text
    (NULL) as it is."""
    return cut(name, width) if isinstance(name, str) else name
