"""ProfilerStep windows and which step each CPU op and GPU op belongs to.

A CPU event belongs to the ``ProfilerStep#N`` annotation whose window holds
its start; a GPU op belongs to the step of the runtime call that launched it
(matched by correlation), as HTA assigns iterations.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..trace import Trace

KINDS = ("cpu_op", "runtime", "kernel", "memcpy", "memset")
GPU_KINDS = ("kernel", "memcpy", "memset")
_COMM = re.compile(r"^nccl|ncclKernel|^hip.*nccl|^rccl|ncclDevKernel", re.IGNORECASE)


def steps(trace: Trace) -> pd.DataFrame:
    """ProfilerStep annotations: step number, ts, dur (engine ns), sorted by ts."""
    trace.include("traceaug.kineto")
    df = trace.query("SELECT ts, dur, name FROM traceaug_step ORDER BY ts")
    df["step"] = df["name"].str.extract(r"ProfilerStep\s*#\s*(\d+)", expand=False).astype("Int64")
    return df.dropna(subset=["step"]).drop_duplicates("step").reset_index(drop=True)


def _window(ts: np.ndarray, st: pd.DataFrame) -> np.ndarray:
    """Step number whose window [ts, ts + dur) holds each timestamp, else -1."""
    if st.empty or not len(ts):
        return np.full(len(ts), -1, dtype=np.int64)
    starts = st["ts"].to_numpy(np.int64)
    ends = starts + st["dur"].to_numpy(np.int64)
    idx = np.searchsorted(starts, ts, side="right") - 1
    ok = (idx >= 0) & (ts < ends[np.clip(idx, 0, None)])
    return np.where(ok, st["step"].to_numpy(np.int64)[np.clip(idx, 0, None)], -1)


def category(kind: pd.Series, name: pd.Series) -> pd.Series:
    """HTA's kernel types for GPU ops (communication, memory, computation); the kind otherwise."""
    names = pd.unique(name)  # a few hundred distinct names: match each once
    comm = name.map(dict(zip(names, pd.Series(names).str.contains(_COMM).tolist())))
    gpu = kind.isin(GPU_KINDS)
    return pd.Series(np.select(
        [gpu & comm, gpu & kind.isin(("memcpy", "memset")), gpu],
        ["communication", "memory", "computation"], default=kind), index=kind.index)


def ops_with_steps(trace: Trace) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(events of KINDS with a ``step`` column, the steps table)."""
    st = steps(trace)
    ev = trace.query(
        "SELECT id, ts, dur, name, kind, correlation, device, stream FROM traceaug_event "
        f"WHERE kind IN ({', '.join(repr(k) for k in KINDS)})")
    ev["step"] = _window(ev["ts"].to_numpy(np.int64), st)
    gpu = ev["kind"].isin(GPU_KINDS).to_numpy()
    runtime = ev.loc[(ev["kind"] == "runtime") & ev["correlation"].notna(), ["correlation", "step"]]
    runtime = runtime.drop_duplicates("correlation")
    launched = ev.loc[gpu, ["correlation"]].merge(runtime, on="correlation", how="left")["step"]
    ev.loc[gpu, "step"] = launched.fillna(-1).astype(np.int64).to_numpy()
    ev["category"] = category(ev["kind"], ev["name"])
    return ev, st


def shorten(name: str) -> str:
    """A kernel / op name without template and argument lists (``f<int>(x)`` -> ``f``)."""
    if name.startswith(("Memcpy", "Memset")) or ("<" not in name and "(" not in name):
        return name
    out: list[str] = []
    depth = 0
    for c in name.replace("->", ""):
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(c)
    return " ".join("".join(out).split()) or name
