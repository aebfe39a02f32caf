"""GPU step windows, busy time, kernel tables, gaps and launch delays computed straight from a
trace's raw JSON (exact ns from the text), independently of traceaug, by plain loops."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from rawjson import load_raw, ns

GPU_CATS = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
            "gpu_memset": "memset", "Memset": "memset", "mtia_ccp_events": "kernel"}
RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "mtia_runtime"}
COMM = re.compile(r"^nccl|ncclKernel|ncclDevKernel|rccl", re.IGNORECASE)


def raw(path: Path) -> dict:
    """ops (ts, end, name, kind, type, stream, corr, launch ts, launch end or None, step),
    cpu_steps {n: (ts, end)}, windows {n: (ts, end)}."""
    events = [e for e in load_raw(path)["traceEvents"] if e.get("ph") == "X"]
    launch: dict = {}
    for e in sorted((e for e in events if e.get("cat") in RUNTIME_CATS), key=lambda e: ns(e["ts"])):
        c = e.get("args", {}).get("correlation")
        if c is not None and c not in launch:
            launch[c] = (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
    cpu_steps, notes = {}, defaultdict(list)
    for e in events:
        m = re.match(r"ProfilerStep#(\d+)", e.get("name", ""))
        if m and e.get("cat") in ("user_annotation", "cpu_op", "Operator"):
            cpu_steps.setdefault(int(m.group(1)), (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
        elif m and e.get("cat") == "gpu_user_annotation":
            notes[int(m.group(1))].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    ops = []
    for e in events:
        if e.get("cat") in GPU_CATS:
            kind = GPU_CATS[e["cat"]]
            typ = ("communication" if COMM.search(e["name"]) else
                   "memory" if kind != "kernel" else "computation")
            lt = launch.get(e.get("args", {}).get("correlation"))
            step = -1
            if lt is not None:
                step = next((n for n, (a, b) in cpu_steps.items() if a <= lt[0] < b), -1)
            ops.append({"ts": ns(e["ts"]), "end": ns(e["ts"]) + ns(e["dur"]), "name": e["name"],
                        "kind": kind, "type": typ, "stream": e["args"].get("stream"),
                        "corr": e["args"].get("correlation"), "launch": lt, "step": step})
    windows = {}
    for n in cpu_steps:
        if n in notes:
            windows[n] = (min(a for a, _ in notes[n]), max(b for _, b in notes[n]))
        else:
            mine = [o for o in ops if o["launch"] is not None and o["step"] == n]
            windows[n] = (min(o["ts"] for o in mine), max(o["end"] for o in mine))
    for o in ops:
        if o["launch"] is None:
            holding = [(a, n) for n, (a, b) in windows.items() if a <= o["ts"] < b]
            o["step"] = max(holding)[1] if holding else -1
    return {"ops": ops, "cpu_steps": cpu_steps, "windows": windows}


def union(intervals) -> int:
    """Length of the union of (start, end) intervals."""
    total, cur_lo, cur_hi = 0, None, None
    for lo, hi in sorted(intervals):
        if cur_hi is None or lo > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    return total + (cur_hi - cur_lo if cur_hi is not None else 0)


def busy(ops, lo: int, hi: int, typ: str | None = None) -> int:
    """Union of the ops (of one type) clipped to [lo, hi)."""
    return union((max(o["ts"], lo), min(o["end"], hi)) for o in ops
                 if (typ is None or o["type"] == typ) and min(o["end"], hi) > max(o["ts"], lo))


def kernel_totals(ops) -> dict:
    """name -> (count, total ns)."""
    out: dict = defaultdict(lambda: [0, 0])
    for o in ops:
        out[o["name"]][0] += 1
        out[o["name"]][1] += o["end"] - o["ts"]
    return {k: tuple(v) for k, v in out.items()}


def stream_gaps(ops) -> dict:
    """stream -> list of positive gaps (next start − the latest end so far), start order."""
    by: dict = defaultdict(list)
    for o in sorted(ops, key=lambda o: (o["ts"], o["end"])):
        by[o["stream"]].append(o)
    out = {}
    for s, lst in by.items():
        gaps, reach = [], lst[0]["end"]
        for o in lst[1:]:
            if o["ts"] > reach:
                gaps.append(o["ts"] - reach)
            reach = max(reach, o["end"])
        out[s] = gaps
    return out
