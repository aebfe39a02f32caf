"""ProfilerStep windows and which step each CPU op and GPU op belongs to.

A CPU event belongs to the ``ProfilerStep#N`` annotation whose window holds
its start; a GPU op belongs to the step of the runtime call that launched it
(matched by correlation), as HTA assigns iterations. Tables are numpy
``Columns`` (``analysis.tables``).
"""

from __future__ import annotations

import re

import numpy as np

from ..trace import Trace
from .tables import Columns, codes, first_match

KINDS = ("cpu_op", "runtime", "kernel", "memcpy", "memset")
GPU_KINDS = ("kernel", "memcpy", "memset")
_COMM = re.compile(r"^nccl|ncclKernel|^hip.*nccl|^rccl|ncclDevKernel", re.IGNORECASE)
_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")


def steps(trace: Trace) -> Columns:
    """ProfilerStep annotations: ``step`` number, ``ts``, ``dur`` (engine ns), sorted by ts;
    the first annotation of each number."""
    trace.include("traceaug.kineto")
    c = trace.columns("SELECT ts, dur, name FROM traceaug_step ORDER BY ts")
    keep, numbers = [], []
    for i, name in enumerate(c["name"].tolist()):
        m = _STEP.search(name) if isinstance(name, str) else None
        if m is not None and int(m.group(1)) not in numbers:
            keep.append(i)
            numbers.append(int(m.group(1)))
    return {"step": np.array(numbers, np.int64), "ts": c["ts"][keep].astype(np.int64),
            "dur": c["dur"][keep].astype(np.int64)}


def _window(ts: np.ndarray, st: Columns) -> np.ndarray:
    """Step number whose window [ts, ts + dur) holds each timestamp, else -1."""
    if not len(st["step"]) or not len(ts):
        return np.full(len(ts), -1, dtype=np.int64)
    starts = st["ts"]
    ends = starts + st["dur"]
    idx = np.searchsorted(starts, ts, side="right") - 1
    ok = (idx >= 0) & (ts < ends[np.clip(idx, 0, None)])
    return np.where(ok, st["step"][np.clip(idx, 0, None)], -1)


def is_gpu(kind: np.ndarray) -> np.ndarray:
    """Which rows are GPU ops (compared in C: kinds are a handful of strings)."""
    out = np.zeros(len(kind), dtype=bool)
    for k in GPU_KINDS:
        out |= kind == k
    return out


def category(kind: np.ndarray, name_code: np.ndarray, names: list) -> np.ndarray:
    """HTA's kernel types for GPU ops (communication, memory, computation); the kind otherwise.
    ``name_code`` numbers each row's name in ``names`` (each name is matched once)."""
    comm = np.array([isinstance(n, str) and _COMM.search(n) is not None for n in names], dtype=bool)
    gpu = is_gpu(kind)
    out = kind.astype(object)
    out[gpu] = "computation"  # each assignment overrides the last: communication wins
    out[gpu & ((kind == "memcpy") | (kind == "memset"))] = "memory"
    out[gpu & comm[name_code]] = "communication"
    return out


def ops_with_steps(trace: Trace) -> tuple[Columns, list, Columns]:
    """Events of KINDS with ``step``, ``gpu`` (a GPU op), ``category`` and ``name_code``
    columns; the distinct names ``name_code`` numbers; the steps."""
    st = steps(trace)
    ev = trace.columns(
        "SELECT id, ts, dur, name, kind, correlation FROM traceaug_event "
        f"WHERE kind IN ({', '.join(repr(k) for k in KINDS)}) ORDER BY id")
    for col in ("id", "ts", "dur"):  # never NULL
        ev[col] = ev[col].astype(np.int64)
    ev["kind"] = ev["kind"].astype(object)
    step = _window(ev["ts"], st)
    gpu = is_gpu(ev["kind"])
    runtime, at = np.flatnonzero(ev["kind"] == "runtime"), np.flatnonzero(gpu)
    launch = first_match(ev["correlation"][runtime], ev["correlation"][at])  # its first call
    step[at] = np.r_[step[runtime], -1][launch]  # -1 (no launch) picks the -1 appended
    ev["step"], ev["gpu"] = step, gpu
    ev["name_code"], names = codes(ev["name"])
    ev["category"] = category(ev["kind"], ev["name_code"], names)
    return ev, names, st


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
