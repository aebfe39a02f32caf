"""Counter series computed straight from a trace's raw JSON, independently of traceaug."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from pathlib import Path

from rawjson import load_raw, ns

LAUNCHES = {
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaGraphLaunch",
    "cuGraphLaunch", "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel", "hipLaunchCooperativeKernel", "hipMemcpyAsync", "hipMemsetAsync",
    "hipMemcpyWithStream", "hipGraphLaunch",
    # MTIA (HTA's MTIA traces): the launch HTA counts, and the queued copies
    "runFunction - job_prep_and_submit_for_execution", "enqueueCommand memcpyHtoDAsync",
    "enqueueCommand memcpyDtoHAsync", "enqueueCommand memcpyDtoDAsync",
}
GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "mtia_ccp_events"}
RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "mtia_runtime"}
FULL_QUEUE = 1024  # CUDA's default launch-queue depth


def _steps(changes: dict) -> dict:
    """(key) -> [(ts, value after every change at ts)], changes sorted by (ts, order)."""
    out = {}
    for key, items in changes.items():
        items.sort()
        value, points = 0, []
        for ts, _order, delta in items:
            value += delta
            if points and points[-1][0] == ts:
                points[-1] = (ts, value)
            else:
                points.append((ts, value))
        out[key] = points
    return out


def queue_series(path: Path) -> dict:
    """(device, stream) -> [(ts_ns, queue length)]."""
    events = [e for e in load_raw(path)["traceEvents"] if e.get("ph") == "X"]
    launch = {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("cat") in RUNTIME_CATS and e.get("name") in LAUNCHES and corr and corr > 0:
            launch.setdefault(corr, ns(e["ts"]))
    changes = defaultdict(list)
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") in GPU_CATS and args.get("correlation") in launch:
            key = (int(args.get("device", e["pid"])), int(args["stream"]))  # MTIA: no device arg
            at = launch[args["correlation"]]
            changes[key].append((at, 0, 1))
            changes[key].append((max(ns(e["ts"]), at), 1, -1))
    return _steps(changes)


def copy_kind(e: dict) -> str:
    if e["cat"] in ("gpu_memset", "Memset"):
        return "Memset"
    for kind in ("HtoD", "DtoH", "DtoD", "PtoP", "HtoH"):
        if e["name"].startswith("Memcpy " + kind):
            return kind
    return "Other"


def bandwidth_series(path: Path) -> dict:
    """(device, kind) -> [(ts_ns, GB/s)] (floats compared with a tolerance by callers)."""
    changes = defaultdict(list)
    for e in load_raw(path)["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") not in ("gpu_memcpy", "Memcpy", "gpu_memset", "Memset"):
            continue
        dur = ns(e["dur"])
        if dur == 0:
            continue
        args = e.get("args") or {}
        bw = args.get("memory bandwidth (GB/s)")
        bw = float(bw) if bw is not None else float(Decimal(args["bytes"]) / dur)
        key = (int(args["device"]), copy_kind(e))
        changes[key].append((ns(e["ts"]), 1, bw))
        changes[key].append((ns(e["ts"]) + dur, 0, -bw))
    return _steps(changes)


def span(path: Path) -> tuple[int, int]:
    """The trace's time span (ns): first start to last end of its complete events."""
    events = [e for e in load_raw(path)["traceEvents"] if e.get("ph") == "X"]
    return min(ns(e["ts"]) for e in events), max(ns(e["ts"]) + ns(e["dur"]) for e in events)


def queue_summary(path: Path) -> dict:
    """(device, stream) -> mean_queued (time-weighted over the span), max_queued, empty_pct
    (percent of the span) and full_ns (at a full queue, >= FULL_QUEUE), walking each stream's
    change points in order."""
    start, end = span(path)
    out = {}
    for key, points in queue_series(path).items():
        weighted, empty, full = 0, points[0][0] - start, 0  # empty before its first change
        for (ts, value), nxt in zip(points, [p[0] for p in points[1:]] + [end]):
            held = max(nxt - ts, 0)
            weighted += value * held
            empty += held if value == 0 else 0
            full += held if value >= FULL_QUEUE else 0
        out[key] = {"mean_queued": weighted / (end - start),
                    "max_queued": max(v for _, v in points),
                    "empty_pct": 100 * empty / (end - start), "full_ns": full}
    return out
