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
}
GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver"}


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
            key = (int(args["device"]), int(args["stream"]))
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
