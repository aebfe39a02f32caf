"""Every step's critical-path graph in one build: each event given to its step and clipped to it, its threads
and devices made the step's own, so one numpy pass serves 100,000 steps as it serves one (issue 39.8)."""

from __future__ import annotations

import dataclasses

import numpy as np

from . import critical_path as cp
from .tables import Columns, sorted_codes, take


def graph(ev: Columns, wins: list[cp.Window]) -> tuple[cp.Graph, np.ndarray]:
    """(the graph of every window of ``wins`` at once, ``cp.build``'s rules within each; each graph event's
    window, an index into ``wins``): no edge joins two windows."""
    starts = np.array([w.start for w in wins], np.int64)
    ends = np.array([w.end for w in wins], np.int64)
    k = _windows(ev, starts, ends)
    rows = np.flatnonzero(k >= 0)
    k = k[rows]
    s = take(ev, rows)
    ts, dur = s["ts"].astype(np.int64), s["dur"].astype(np.int64)
    s["ts"] = np.clip(ts, starts[k], ends[k])
    s["dur"] = np.where(dur >= 0, np.clip(ts + dur, starts[k], ends[k]) - s["ts"], dur)
    n = max(len(wins), 1)
    s["track_id"] = sorted_codes(s["track_id"]) * n + k  # each window's threads its own
    device = (s["grp"] == cp.GPU_OP) | (s["grp"] == cp.SYNC_EVENT)
    dev = sorted_codes(np.where(s["device"] >= 0, s["device"], s["pid"])) * n + k
    s["device"] = np.where(device, dev, -1)  # and its devices (so its streams)
    whole = cp.Window(int(starts.min(initial=0)), int(ends.max(initial=0)), "every step")
    g = cp.build(s, whole)
    win = k[g.ev["row"]]
    g.ev["row"] = rows[g.ev["row"]]  # rows of ``ev`` (devices and tracks stay the windows' own)
    own = win[g.src // 2] == win[g.dst // 2]  # (a sync's last op of a stream can lie in another window)
    g = dataclasses.replace(g, src=g.src[own], dst=g.dst[own], weight=g.weight[own], kind=g.kind[own],
                            event=g.event[own])
    return g, win


def _windows(ev: Columns, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each row's window (-1: none), as ``cp.build`` takes them: a CPU event (a sync event: its call's)
    by its start, the later window where two touch; a GPU op by its launch's (its start without one)."""
    ts = ev["ts"].astype(np.int64)
    k = np.searchsorted(starts, ts, "right") - 1
    k = np.where((k >= 0) & (ts <= ends[np.maximum(k, 0)]), k, -1) if len(starts) else np.full(len(ts), -1)
    is_cpu = ev["grp"] <= cp.RUNTIME
    for grp in (cp.GPU_OP, cp.SYNC_EVENT):
        rows = np.flatnonzero(ev["grp"] == grp)
        call = cp._calls_by_corr(ev, is_cpu, ev["correlation"][rows])
        by_call = np.where(ev["dur"][np.maximum(call, 0)] > 0, k[np.maximum(call, 0)], -1)
        k[rows] = np.where(call >= 0, by_call, k[rows]) if grp == cp.GPU_OP else np.where(
            (call >= 0) & (by_call >= 0), by_call, k[rows])
    gpu = ev["grp"] == cp.GPU_OP
    late = gpu & (k >= 0) & ((ts > ends[np.maximum(k, 0)]) | (ev["dur"] < 0))
    k[late] = -1
    return k
