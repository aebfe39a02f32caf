"""Runtime calls that block the CPU, and the GPU op each waits for where no ``cuda_sync`` event says so:
HTA weighs a blocking call 0 and links it to the GPU only through ``cuda_sync`` events (issue 23.1)."""

from __future__ import annotations

import re

import numpy as np

NONE, COPY, ASYNC_COPY, SYNC = range(4)
_COPY = re.compile(r"^(cuda|hip|cu)Mem(cpy|set)")
# (cuda|hip)DeviceSynchronize are the graph's device syncs (every stream); the driver's context
# sync is inferred as a stream sync is.
_SYNC = re.compile(r"^(cuda|hip)(Stream|Event)Synchronize$|^cu(Stream|Event|Ctx)Synchronize$")
PAGEABLE = "Pageable"  # Kineto names a copy to / from pageable memory "... Pageable ..."


def kind(name) -> int:
    """What a runtime call's name says of its blocking: NONE, COPY (a synchronous copy or
    set), ASYNC_COPY (blocks only on pageable memory), SYNC (stream / event / context sync)."""
    if not isinstance(name, str):
        return NONE
    if _COPY.match(name):
        return ASYNC_COPY if "Async" in name else COPY
    return SYNC if _SYNC.match(name) else NONE


def copy_waits(g: dict, node_ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(GPU op end nodes, call end nodes, calls): each blocking copy or set of graph ``g``
    (``critical_path.build``'s events) waits for the GPU ops it launched."""
    gpu = np.flatnonzero(g["gpu"] & (g["launch"] >= 0))
    call = g["launch"][gpu]
    kinds = np.array([kind(n) for n in g["name"][call].tolist()], np.int64)
    pageable = np.array([isinstance(n, str) and PAGEABLE in n for n in g["name"][gpu].tolist()], bool)
    hit = (kinds == COPY) | ((kinds == ASYNC_COPY) & pageable)
    gpu, call = gpu[hit], call[hit]
    ok = node_ts[2 * gpu + 1] <= node_ts[2 * call + 1]  # the call returned after its op
    return 2 * gpu[ok] + 1, 2 * call[ok] + 1, len(np.unique(call[ok]))


def sync_waits(g: dict, node_ts: np.ndarray, covered: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, int]:
    """(GPU op end nodes, call end nodes, calls): each stream or event sync of ``g`` no ``cuda_sync`` event
    covers (``covered``, per event) waits for the GPU op launched before it that ended last while it ran."""
    cpu = np.flatnonzero(~g["gpu"] & ~covered)
    names = g["name"][cpu].tolist()
    sync = {n: kind(n) == SYNC for n in set(names)}  # each name judged once (a step repeats a few hundred)
    calls = cpu[np.fromiter((sync[n] for n in names), bool, len(names))]
    gpu = np.flatnonzero(g["gpu"])
    if not len(calls) or not len(gpu):
        return np.empty(0, np.int64), np.empty(0, np.int64), 0
    end = node_ts[2 * gpu + 1]
    o = np.argsort(end, kind="stable")
    gpu, end = gpu[o], end[o]
    launch = g["launch"][gpu]
    launched = np.where(launch >= 0, node_ts[2 * np.maximum(launch, 0)], node_ts[2 * gpu])
    src, dst = [], []
    for c in calls.tolist():
        s, t = int(node_ts[2 * c]), int(node_ts[2 * c + 1])
        lo, hi = np.searchsorted(end, s, "right"), np.searchsorted(end, t, "right")
        before = np.flatnonzero(launched[lo:hi] <= s)
        if len(before):
            src.append(2 * int(gpu[lo + before[-1]]) + 1)
            dst.append(2 * c + 1)
    return np.array(src, np.int64), np.array(dst, np.int64), len(dst)
