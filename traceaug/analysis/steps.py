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
    codes, names = pd.factorize(name)  # a few hundred distinct names: match each once
    comm = np.fromiter((_COMM.search(n) is not None for n in names), dtype=bool, count=len(names))
    comm = np.append(comm, False)  # code -1 (no name) indexes this last entry
    k = kind.to_numpy(dtype=object)
    gpu = kind.isin(GPU_KINDS).to_numpy()
    out = k.copy()
    out[gpu] = "computation"  # each assignment overrides the last: communication wins
    out[gpu & ((k == "memcpy") | (k == "memset"))] = "memory"
    out[gpu & comm[codes]] = "communication"
    return pd.Series(out, index=kind.index, dtype=kind.dtype)


def ops_with_steps(trace: Trace) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(events of KINDS with ``step``, ``gpu`` (a GPU op) and ``category`` columns, the steps)."""
    st = steps(trace)
    ev = trace.query(
        "SELECT id, ts, dur, name, kind, correlation, device, stream FROM traceaug_event "
        f"WHERE kind IN ({', '.join(repr(k) for k in KINDS)})")
    for col in ("id", "ts", "dur"):  # never NULL: int64 once, not at every use
        ev[col] = ev[col].to_numpy(np.int64)
    ev["step"] = _window(ev["ts"].to_numpy(), st)
    gpu = ev["kind"].isin(GPU_KINDS).to_numpy()
    ev["gpu"] = gpu
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
