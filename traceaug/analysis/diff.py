"""Compare two traces of one rank: per op / kernel counts and times, per ProfilerStep.

Values are per step (totals over the steps ÷ the number of steps), so runs
with different numbers of steps compare; ``step=N`` compares one step.
Status: added / removed (present on one side only), increased / decreased
(per-step total time changed by more than ``threshold`` percent), unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import TraceaugError
from ..trace import Trace
from .steps import ops_with_steps, shorten

BY = ("name", "short-name", "category")
DEVICES = ("cpu", "gpu", "all")
DEFAULT_THRESHOLD = 5.0  # percent


@dataclass
class Side:
    """One trace's events with their steps, ready to compare."""

    trace: Trace
    events: pd.DataFrame
    steps: pd.DataFrame

    @classmethod
    def of(cls, trace: Trace) -> Side:
        events, st = ops_with_steps(trace)
        return cls(trace, events, st)

    def window(self, step: int | None) -> tuple[np.ndarray, int]:
        """Which events are in the compared steps (a mask), and how many steps that is."""
        at = self.events["step"].to_numpy()
        if step is not None:
            if step not in set(self.steps["step"].tolist()):
                have = ", ".join(map(str, self.steps["step"].tolist())) or "none"
                raise TraceaugError(f"{self.trace.path}: no ProfilerStep#{step} (steps: {have})")
            return at == step, 1
        if self.steps.empty:
            return np.ones(len(at), dtype=bool), 1
        return at >= 0, len(self.steps)


def _on_device(ev: pd.DataFrame, device: str) -> np.ndarray:
    """Mask of the GPU ops, the CPU ops, or both."""
    gpu = ev["gpu"].to_numpy()
    if device == "gpu":
        return gpu
    cpu = (ev["kind"] == "cpu_op").to_numpy()
    return cpu if device == "cpu" else gpu | cpu


def op_table(side: Side, by: str = "name", device: str = "all", step: int | None = None) -> pd.DataFrame:
    """Per (device, key): count and total ns per step."""
    rows, n = side.window(step)
    ev = side.events
    rows &= _on_device(ev, device)
    where = np.where(ev["gpu"].to_numpy()[rows], "gpu", "cpu")
    key = ev["category" if by == "category" else "name"].to_numpy()[rows]
    if by == "short-name":
        codes, names = pd.factorize(key)
        key = np.array([shorten(x) for x in names], dtype=object)[codes]
    df = pd.DataFrame({"device": where, "key": key, "dur": ev["dur"].to_numpy()[rows]})
    out = df.groupby(["device", "key"], sort=False)["dur"].agg(count="count", total="sum").reset_index()
    out["count"] = out["count"] / n
    out["total"] = out["total"] / n
    return out


def compare(a: pd.DataFrame, b: pd.DataFrame, threshold: float = DEFAULT_THRESHOLD) -> pd.DataFrame:
    """Outer join of two op tables with deltas and a status per row."""
    m = a.merge(b, on=["device", "key"], how="outer", suffixes=("_a", "_b"), indicator=True)
    for col in ("count_a", "count_b", "total_a", "total_b"):
        m[col] = m[col].fillna(0.0)
    m["mean_a"] = m["total_a"] / m["count_a"].replace(0, np.nan)
    m["mean_b"] = m["total_b"] / m["count_b"].replace(0, np.nan)
    m["delta"] = m["total_b"] - m["total_a"]
    m["delta_pct"] = 100 * m["delta"] / m["total_a"].replace(0, np.nan)
    m["delta_count"] = m["count_b"] - m["count_a"]
    pct = m["delta_pct"].fillna(0)
    m["status"] = np.select(
        [m["_merge"] == "right_only", m["_merge"] == "left_only", pct > threshold, pct < -threshold],
        ["added", "removed", "increased", "decreased"], default="unchanged")
    m = m.drop(columns="_merge")
    m = m.reindex(m["delta"].abs().sort_values(ascending=False, kind="stable").index)
    return m[["device", "key", "status", "count_a", "count_b", "delta_count", "total_a", "total_b",
              "delta", "delta_pct", "mean_a", "mean_b"]].reset_index(drop=True)


def _union(ts: np.ndarray, end: np.ndarray) -> int:
    """Total length of the union of intervals [ts, end)."""
    if not len(ts):
        return 0
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], end[order]
    reach = np.maximum.accumulate(end)
    starts_new = np.r_[True, ts[1:] > reach[:-1]]
    lo = ts[starts_new]
    hi = np.maximum.reduceat(end, np.flatnonzero(starts_new))
    return int((hi - lo).sum())


def headline(side: Side, step: int | None = None) -> dict:
    """Step time, GPU busy / idle time and compute / communication / memory time, per step (ms)."""
    rows, n = side.window(step)
    st = side.steps
    if step is not None:
        st = st[st["step"] == step]
    if st.empty:
        start, end = side.trace.span()  # diff() saw GPU ops, so there is a span
        step_ns = float(end - start)
    else:
        step_ns = float(st["dur"].mean())
    ev = side.events
    rows &= ev["gpu"].to_numpy()
    ts = ev["ts"].to_numpy()[rows]
    end = ts + ev["dur"].to_numpy()[rows]
    busy = _union(ts, end) / n
    out = {"steps": 0 if st.empty else len(st), "step_ms": step_ns / 1e6, "gpu_busy_ms": busy / 1e6,
           "gpu_idle_ms": max(step_ns - busy, 0) / 1e6}
    cat = ev["category"].to_numpy()[rows]
    for c in ("computation", "communication", "memory"):
        sel = cat == c
        out[f"{c}_ms"] = _union(ts[sel], end[sel]) / n / 1e6
    return out


def diff(a: Side, b: Side, by: str = "name", device: str = "all", step: int | None = None,
         threshold: float = DEFAULT_THRESHOLD) -> dict:
    """Headline for both sides and the per-op comparison."""
    if by not in BY:
        raise TraceaugError(f"--by must be one of {', '.join(BY)}")
    if device not in DEVICES:
        raise TraceaugError(f"--device must be one of {', '.join(DEVICES)}")
    for side in (a, b):
        if not side.events["gpu"].any():
            raise TraceaugError(f"{side.trace.path}: no GPU kernels, copies or sets to compare")
    ops = compare(op_table(a, by, device, step), op_table(b, by, device, step), threshold)
    return {"a": headline(a, step), "b": headline(b, step), "ops": ops}
