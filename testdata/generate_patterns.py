"""Generate ``patterns_planted.json``: a Kineto trace with kernel sequences planted at known places.

Why: ``traceaug patterns`` must find planted repeats exactly (count and positions), among
kernels that never repeat (every noise kernel has its own name), including a pattern
nested in another (A inside B), overlapping plants (``x y x y x`` holds two overlapping
``x y x``, of which one counts) and a block repeated six times inside one op (L).
The answers come from the plan below, never from reading the output back.

Stream 7 (device 0), in order; each item is one top-level CPU op (name: its kernels):
noise, A, B = b1 b2 A b3, x y x y x, L^6 ("stack"), x y x, ... (see ``PLAN``); stream 20
gets A twice from op "side". Every kernel is launched by ``cudaLaunchKernel`` (correlation
id) inside its op; kernels run one after another, 10 µs each.

Outputs (next to this file, or under DIR): ``patterns_planted.json`` and
``patterns_planted.answers.json`` (per scope and pattern: kernel names, count and the GPU
start, in epoch ns as the file writes it, of every counted occurrence).
Run ``python testdata/generate_patterns.py [DIR]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CPU_PID, CPU_TID, DEVICE = 4000, 4001, 0
# Timestamps are written as Kineto writes them: epoch µs with three decimals (ns), here
# 1712198313370000.123 µs + the schedule's whole µs, so a reader must keep the nanoseconds.
BASE_NS = 1_712_198_313_370_000_123

A = ["a1", "a2", "a3", "a4"]
B = ["b1", "b2", *A, "b3"]
L = ["l1", "l2", "l3"]
XYX = ["x", "y", "x"]
XYXYX = ["x", "y", "x", "y", "x"]
N = "noise"  # every noise kernel gets its own name: it never repeats
# (op name, kernels, stream): one top-level CPU op each.
PLAN = [(N, [N], 7), (N, [N], 7), ("layer", A, 7), (N, [N], 7), ("block", B, 7), (N, [N], 7),
        ("layer", A, 7), ("mix", XYXYX, 7), (N, [N], 7), ("layer", A, 7), (N, [N], 7),
        ("block", B, 7), (N, [N], 7), ("stack", L * 6, 7), (N, [N], 7), ("mix", XYX, 7),
        (N, [N], 7), ("layer", A, 7), ("side", A, 20), (N, [N], 7), ("block", B, 7),
        ("mix", XYX, 7), ("side", A, 20), (N, [N], 7), ("layer", A, 7), (N, [N], 7)]


def build() -> tuple[dict, dict]:
    """The trace and its answers, from ``PLAN``."""
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": CPU_PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": CPU_TID, "args": {"name": "main"}},
        {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    t_cpu, corr, noise = 1000, 1, 0
    gpu_free = {7: 0, 20: 0}
    kernel_ts: dict[int, list[int]] = {7: [], 20: []}  # per stream, GPU start (µs) of each kernel
    op_spans = []  # (op name, first kernel's ts, kernels)
    for op, kernels, stream in PLAN:
        start = t_cpu
        first = None
        t_cpu += 2
        for k in kernels:
            if k == N:
                k, noise = f"noise_{noise}", noise + 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": CPU_PID, "tid": CPU_TID, "ts": t_cpu, "dur": 4,
                           "args": {"correlation": corr}})
            ts = max(t_cpu + 10, gpu_free[stream])
            gpu_free[stream] = ts + 10
            events.append({"ph": "X", "cat": "kernel", "name": k, "pid": DEVICE, "tid": stream,
                           "ts": ts, "dur": 10, "args": {"correlation": corr, "device": DEVICE,
                                                         "stream": stream}})
            kernel_ts[stream].append(ts)
            first = ts if first is None else first
            corr += 1
            t_cpu += 6
        events.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": CPU_PID, "tid": CPU_TID,
                       "ts": start, "dur": t_cpu - start})
        op_spans.append((op, first, kernels))
        t_cpu += 3
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": CPU_PID,
                   "tid": CPU_TID, "ts": 999, "dur": t_cpu - 999 + 1})
    trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "planted"}],
             "traceEvents": events}
    return trace, answers(op_spans)


def _starts(kernels: list[str], pattern: list[str], first: int) -> list[int]:
    """GPU starts (µs) of the greedy non-overlapping occurrences of ``pattern`` in one op's
    kernels (each 10 µs after the previous one within an op: ``first`` + 10 i)."""
    out, i = [], 0
    while i + len(pattern) <= len(kernels):
        if kernels[i:i + len(pattern)] == pattern:
            out.append(first + 10 * i)
            i += len(pattern)
        else:
            i += 1
    return out


def answers(op_spans: list) -> dict:
    """Per scope, pattern (kernel names joined by spaces) -> count and GPU starts in ns."""
    def entry(starts: list[int]) -> dict:
        return {"count": len(starts), "gpu_ts_ns": sorted(BASE_NS + s * 1000 for s in starts)}

    whole: dict[str, list[int]] = {}
    for op, first, kernels in op_spans:
        if len(kernels) >= 3:
            whole.setdefault(f"{op}: {' '.join(kernels)}", []).append(first)
    mined = {" ".join(p): [s for _, first, k in op_spans for s in _starts(k, p, first)]
             for p in (A, B, L, XYX)}
    operator = {k: v for k, v in mined.items() if k != " ".join(B)}  # B: the whole "block" one
    return {"whole": {k: entry(v) for k, v in whole.items()},
            "operator": {k: entry(v) for k, v in operator.items()},
            # each op's kernels are contiguous on its stream, so stream repeats = the same starts
            "stream": {k: entry(v) for k, v in mined.items()}}


def _event_text(event: dict) -> str:
    """One event as compact JSON, its ``ts`` (schedule µs) as exact epoch-µs text."""
    if "ts" not in event:
        return json.dumps(event, separators=(",", ":"))
    q, r = divmod(BASE_NS + event["ts"] * 1000, 1000)
    rest = json.dumps({k: v for k, v in event.items() if k != "ts"}, separators=(",", ":"))
    return f'{rest[:-1]},"ts":{q}.{r:03d}}}'


def main(out_dir: Path = HERE) -> None:
    trace, answer = build()
    head = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"}, separators=(",", ":"))
    text = head[:-1] + ',"traceEvents":[' + ",".join(map(_event_text, trace["traceEvents"])) + "]}"
    (out_dir / "patterns_planted.json").write_text(text + "\n")
    (out_dir / "patterns_planted.answers.json").write_text(json.dumps(answer, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
