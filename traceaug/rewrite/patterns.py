"""``traceaug patterns``: each scope's top-k kernel patterns as ``Pattern P<n>`` slices on added CPU and
per-stream GPU threads, with flows, and a "Kernel-name dictionary"; overlaps go to further lanes ``(2)``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..analysis.patterns import SCOPES, Patterns, compute
from ..analysis.tables import Columns
from .events import flow_events, flow_ids, slice_events, thread_name_events
from .pipeline import Rewriter

if TYPE_CHECKING:
    from ..trace import Trace

CATEGORY = "traceaug_patterns"  # never a Kineto category: a reload counts no overlay as work
FLOW_NAME = "kernel pattern"
TID_BASE = 0x5A7A0000  # added threads' tids start here (skipping any tid in use)


def lanes(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each interval's lane: the first lane whose last interval ended by its start (so no two
    intervals on a lane overlap at all), taking intervals in start order."""
    order = np.lexsort((-end, ts))
    lane_end: list[int] = []
    lane = np.empty(len(ts), np.int64)
    for i in order.tolist():
        for k, e in enumerate(lane_end):
            if e <= ts[i]:
                lane_end[k] = int(end[i])
                lane[i] = k
                break
        else:
            lane[i] = len(lane_end)
            lane_end.append(int(end[i]))
    return lane


def top_patterns(found: Patterns, top_k: int) -> np.ndarray:
    """Pattern ids overlaid: the first ``top_k`` of each scope (rows are in reporting order)."""
    p = found.patterns
    keep = [p["pattern"][p["scope"] == s][:top_k] for s in SCOPES]
    return np.concatenate(keep) if keep else np.zeros(0, np.int64)


class _Threads:
    """New threads' tids, clear of every (pid, tid) the trace has, with their names."""

    def __init__(self, used: set[tuple[int, int]]) -> None:
        self.used = used
        self.named: dict[tuple[int, str], int] = {}

    def tid(self, pid: int, name: str) -> int:
        key = (pid, name)
        if key not in self.named:
            t = TID_BASE
            while (pid, t) in self.used:
                t += 1
            self.used.add((pid, t))
            self.named[key] = t
        return self.named[key]

    def events(self) -> list[bytes]:
        items = list(self.named.items())
        return thread_name_events([p for (p, _), _ in items], [t for _, t in items],
                                   [n for (_, n), _ in items])


def _used_threads(trace: Trace) -> set[tuple[int, int]]:
    c = trace.columns("SELECT p.pid AS pid, t.tid AS tid FROM thread t "
                      "JOIN process p USING (upid) WHERE p.pid IS NOT NULL")
    used = set(zip(c["pid"].tolist(), c["tid"].tolist()))
    if trace.plan is not None:
        used |= {k for k in trace.plan.thread_names if all(isinstance(v, int) for v in k)}
    return used


def _lane_name(base: str, lane: int) -> str:
    return base if lane == 0 else f"{base} ({lane + 1})"


def _place(threads: _Threads, pid: np.ndarray, base: list[str], ts: np.ndarray,
           end: np.ndarray) -> np.ndarray:
    """The tid of each slice: its base thread's lane where it overlaps nothing."""
    tid = np.empty(len(ts), np.int64)
    group: dict[tuple[int, str], list[int]] = {}
    for i, key in enumerate(zip(pid.tolist(), base)):
        group.setdefault(key, []).append(i)
    for (p, b), rows in group.items():
        r = np.array(rows, np.int64)
        lane = lanes(ts[r], end[r])
        lane_tid = np.zeros(int(lane.max(initial=-1)) + 1, np.int64)
        for k in dict.fromkeys(lane.tolist()):  # each lane's thread, in order of first use
            lane_tid[k] = threads.tid(p, _lane_name(b, k))
        tid[r] = lane_tid[lane]
    return tid


def overlay_events(trace: Trace, found: Patterns, top_k: int) -> tuple[list[bytes], Columns]:
    """The events to splice in, and the overlaid occurrences (with the threads they went to)."""
    p, o = found.patterns, found.occurrences
    chosen = top_patterns(found, top_k)
    occ = {k: v[np.isin(o["pattern"], chosen)] for k, v in o.items()}
    n = len(occ["pattern"])
    threads = _Threads(_used_threads(trace))
    row_of = {int(i): r for r, i in enumerate(p["pattern"].tolist())}
    count = {int(i): int(c) for i, c in zip(p["pattern"].tolist(), p["count"].tolist())}
    kernels = {int(i): k for i, k in zip(p["pattern"].tolist(), p["kernel_ids"].tolist())}
    names = [f"Pattern P{i}" for i in occ["pattern"].tolist()]
    args = [{"pattern": f"P{i}", "scope": s, "kernels": kernels[i], "count": count[i],
             "occurrence_gpu_ns": int(g)}
            for i, s, g in zip(occ["pattern"].tolist(), occ["scope"].tolist(), occ["gpu_ns"].tolist())]
    gpu_end = np.maximum(occ["gpu_end"], occ["gpu_ts"] + 1)
    gpu_tid = _place(threads, occ["gpu_pid"], [f"Kernel patterns stream {s}" for s in occ["stream"].tolist()],
                     occ["gpu_ts"], gpu_end)
    events = slice_events(occ["gpu_pid"], gpu_tid, occ["gpu_ts"], gpu_end - occ["gpu_ts"], names,
                           CATEGORY, args, base_ns=trace.base_ns)
    on_cpu = np.flatnonzero(occ["cpu_ts"] >= 0)
    cpu_ts = occ["cpu_ts"][on_cpu]
    cpu_end = np.maximum(occ["cpu_end"][on_cpu], cpu_ts + 2)
    cpu_pid = occ["cpu_pid"][on_cpu]
    cpu_tid = _place(threads, cpu_pid, ["Kernel patterns"] * len(on_cpu), cpu_ts, cpu_end)
    cpu_args = [{**args[i], "operator": occ["operator"][i]} for i in on_cpu.tolist()]
    events += slice_events(cpu_pid, cpu_tid, cpu_ts, cpu_end - cpu_ts,
                            [names[i] for i in on_cpu.tolist()], CATEGORY, cpu_args, base_ns=trace.base_ns)
    gpu_mid = occ["gpu_ts"] + (gpu_end - occ["gpu_ts"]) // 2
    events += flow_events(cpu_pid, cpu_tid, cpu_ts + (cpu_end - cpu_ts) // 2, occ["gpu_pid"][on_cpu],
                           gpu_tid[on_cpu], gpu_mid[on_cpu], flow_ids(trace, len(on_cpu)),
                           CATEGORY, FLOW_NAME, base_ns=trace.base_ns)
    events += _dictionary(trace, found, chosen, row_of, threads,
                          int(cpu_pid.min()) if len(cpu_pid) else None)
    events = threads.events() + events
    placed = {**occ, "gpu_tid": gpu_tid, "cpu_tid": np.full(n, -1, np.int64)}
    placed["cpu_tid"][on_cpu] = cpu_tid
    return events, placed


def _dictionary(trace: Trace, found: Patterns, chosen: np.ndarray, row_of: dict, threads: _Threads,
                pid: int | None) -> list[bytes]:
    """Two slices on the "Kernel-name dictionary" thread, across the trace: ``K<i>`` -> kernel
    name for every kernel in an overlaid pattern, and ``P<n>`` -> its kernel ids."""
    p = found.patterns
    if not len(chosen):
        return []
    seqs = {f"P{i}": p["kernel_ids"][row_of[int(i)]] for i in chosen.tolist()}
    used = sorted({int(k[1:]) for s in seqs.values() for k in s.split()})
    kernel_args = {f"K{k}": found.kernel_names[k - 1] for k in used}
    if pid is None:
        pid = int(found.occurrences["gpu_pid"][0])
    span = trace.span() or (0, 2)
    start, end = span[0], max(span[1], span[0] + 2)
    mid = start + (end - start) // 2
    tid = threads.tid(pid, "Kernel-name dictionary")
    return slice_events([pid, pid], [tid, tid], [start, mid], [mid - start, end - mid],
                         ["Kernel names", "Pattern kernels"], CATEGORY, [kernel_args, seqs],
                         base_ns=trace.base_ns)


def prepare(trace: Trace, operator: str | None = None, min_len: int = 3, top_k: int = 5
            ) -> tuple[dict, list[bytes]]:
    """The patterns (``analysis.patterns.compute``) and the overlay events to splice in: all
    the engine is needed for."""
    found = compute(trace, operator, min_len)
    events, placed = overlay_events(trace, found, top_k)
    return {"patterns": found.patterns, "occurrences": found.occurrences, "overlaid": placed,
            "kernel_names": found.kernel_names, "instances": found.instances}, events


def rewrite(trace: Trace, options: dict) -> tuple[dict, list[bytes]]:
    """Patterns, occurrences and overlay events (options: operator, min_len, top_k)."""
    result, events = prepare(trace, options.get("operator"), options.get("min_len", 3),
                             options.get("top_k", 5))
    return {**result, **options}, events


REWRITER = Rewriter("patterns", "patterns", rewrite)
