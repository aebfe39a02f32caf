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
    cpu_steps {n: (ts, end)}, windows {n: (ts, end)} (the GPU windows, tiling the steps' GPU
    time), source {n: where its window's start came from}."""
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
    spans, source = {}, {}
    for n in cpu_steps:
        mine = [o for o in ops if o["launch"] is not None and o["step"] == n]
        if n in notes:
            a, b = min(x for x, _ in notes[n]), max(y for _, y in notes[n])
            held = [o for o in mine if a <= o["ts"] and o["end"] <= b]
            if not mine or 2 * len(held) > len(mine):
                spans[n], source[n] = (a, b), "gpu_annotation"
                continue
            source[n] = "implausible annotation"
        if mine:
            spans[n] = (min(o["ts"] for o in mine), max(o["end"] for o in mine))
            source.setdefault(n, "launches")
    windows = tile(cpu_steps, spans)
    for o in ops:
        if o["launch"] is None:
            holding = [(a, n) for n, (a, b) in windows.items() if a <= o["ts"] < b]
            o["step"] = max(holding)[1] if holding else -1
    return {"ops": ops, "cpu_steps": cpu_steps, "windows": windows, "source": source}


def tile(cpu_steps: dict, spans: dict) -> dict:
    """Step -> GPU window: in CPU order, each step's window runs from its GPU start (its own
    span's start; a step with none: the next step's) to the next step's start, starts never
    going back; the last ends at the latest end of any span."""
    order = sorted(cpu_steps, key=lambda n: cpu_steps[n][0])
    if not spans:
        return {n: (cpu_steps[n][0], cpu_steps[n][0]) for n in order}
    last = max(b for _, b in spans.values())
    starts = []
    for i in range(len(order)):
        later = [spans[m][0] for m in order[i:] if m in spans]
        starts.append(later[0] if later else last)
    for i in range(1, len(starts)):
        starts[i] = max(starts[i], starts[i - 1])
    ends = starts[1:] + [max(last, starts[-1])]
    return {n: (a, b) for n, a, b in zip(order, starts, ends)}


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


COMBOS = {"comp_only": {"computation"}, "comm_only": {"communication"}, "mem_only": {"memory"},
          "comp_comm": {"computation", "communication"}, "comp_mem": {"computation", "memory"},
          "comm_mem": {"communication", "memory"},
          "comp_comm_mem": {"computation", "communication", "memory"}}


def breakdown_row(ops, lo: int, hi: int) -> dict:
    """One window's breakdown by a sweep over the ops' edges inside [lo, hi): ``busy``, each
    type's time, each exclusive combination's (``COMBOS``), ``idle``."""
    edges = []
    for o in ops:
        a, b = max(o["ts"], lo), min(o["end"], hi)
        if b > a:
            edges += [(a, 1, o["type"]), (b, -1, o["type"])]
    edges.sort(key=lambda x: x[0])
    running = {"computation": 0, "communication": 0, "memory": 0}
    by_set: dict = defaultdict(int)
    prev = None
    for t, delta, typ in edges:
        on = frozenset(k for k, v in running.items() if v > 0)
        if prev is not None and on:
            by_set[on] += t - prev
        running[typ] += delta
        prev = t
    row = {"busy": sum(by_set.values())}
    for typ in running:
        row[typ] = sum(v for k, v in by_set.items() if typ in k)
    for name, types in COMBOS.items():
        row[name] = by_set.get(frozenset(types), 0)
    row["window"], row["idle"] = hi - lo, hi - lo - row["busy"]
    return row
