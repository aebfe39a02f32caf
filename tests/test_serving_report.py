"""``report`` on a serving trace opens with the serving verdict: per phase the step latency distribution, GPU
busy / idle, launch time, the CPU time between steps and where the GPU time goes, checked on a built trace
whose answers are known and on the shared vLLM trace (raw JSON), with and without its graph's capture."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
from click.testing import CliRunner
from conftest import shared_trace
from kineto_gen import BASE_US, METADATA, trace, write
from rawjson import load_raw, ns
from test_serving_replay import CASES, raw_capture, raw_replay

from traceaug.cli import main

PREFILL = "execute_2_context_2(sq300sk300sqsq45000sqsk45000)_generation_0(sq0sk0sqsq0sqsk0)"
DECODE = "execute_2_context_0(sq0sk0sqsq0sqsk0)_generation_2(sq2sk302sqsq2sqsk302)"
# per step: annotation, its duration and its one kernel's (µs); steps 1 ms apart, the kernel 50 µs in
STEPS = [(PREFILL, 900, 600), (PREFILL, 900, 700), (DECODE, 300, 100), (DECODE, 300, 120),
         (DECODE, 300, 140), (DECODE, 300, 160), (DECODE, 300, 900)]


def report_json(*args: str) -> dict:
    out = CliRunner().invoke(main, ["report", *args, "--format", "json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_phase_figures_on_a_built_trace(tmp_path):
    evs = list(METADATA)
    for i, (name, dur, kernel) in enumerate(STEPS):
        t = BASE_US + 1000 * i
        evs += [{"ph": "X", "cat": "user_annotation", "name": name, "pid": 1000, "tid": 1000, "ts": t,
                 "dur": dur},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000, "tid": 1000,
                 "ts": t + 20, "dur": 10, "args": {"correlation": i + 1}},
                {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": t + 50,
                 "dur": kernel, "args": {"correlation": i + 1, "device": 0, "stream": 7}}]
    path = write(tmp_path / "steps.json", trace(evs))
    got = report_json(str(path))
    assert list(got)[:2] == ["schema_version", "serving verdict"]
    assert got["serving verdict"][0]["text"] == "Serving trace: 2 prefill steps, 5 decode steps."
    rows = {r["phase"]: r for r in got["serving: steps per phase"]}
    for phase, steps in (("prefill", STEPS[:2]), ("decode", STEPS[2:])):
        first = STEPS.index(steps[0])
        latency = [1000 * max(d, 50 + k) for _, d, k in steps]  # the CPU's end or the kernel's, ns
        # a window runs from its first op to the next step's first op; the last one to its op's end
        window = [1000 * (1000 if first + i < len(STEPS) - 1 else k) for i, (_, _, k) in enumerate(steps)]
        busy = [1000 * k for _, _, k in steps]
        gaps = [1000 * (1000 - STEPS[j - 1][1]) for j in range(first, first + len(steps)) if j]
        r = rows[phase]
        assert (r["steps"], r["mean_batch"]) == (len(steps), 2.0)
        assert r["latency_mean_ns"] == np.mean(latency) and r["latency_max_ns"] == max(latency)
        assert [r[f"latency_p{q}_ns"] for q in (50, 90, 99)] == \
            np.percentile(latency, [50, 90, 99]).tolist()
        assert (r["gpu_busy_ns"], r["gpu_idle_ns"]) == (sum(busy), sum(window) - sum(busy))
        assert r["launch_ns"] == 10_000 * len(steps)
        assert r["cpu_between_steps_mean_ns"] == np.mean(gaps)
    where = got["serving: where each phase's GPU time goes (per op)"]
    assert [(r["phase"], r["op"], r["share_pct"]) for r in where] == [
        ("decode", "(launched directly, not by a graph)", 100.0),
        ("prefill", "(launched directly, not by a graph)", 100.0)]


def raw_busy(path) -> int:
    """The union of every GPU op's interval (ns), from the raw JSON."""
    spans = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in load_raw(path)["traceEvents"]
                   if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    busy, end = 0, None
    for a, b in spans:
        if end is None or a > end:
            busy, end = busy + b - a, b
        elif b > end:
            busy, end = busy + b - end, b
    return busy


def test_a_replay_without_its_capture_is_busy_and_marked():
    path = shared_trace(CASES[0][0])
    got = report_json(str(path))
    texts = [r["text"] for r in got["serving verdict"]]
    assert any(t.startswith("0 of 421 graph-replayed kernels attributed to their ops (no capture: profile "
                            "the graph capture too") for t in texts)
    assert any(t.startswith("Reliability: the per-op split of graph-replayed kernels is unknown")
               for t in texts)
    row = got["serving: steps per phase"][0]
    assert row["gpu_busy_ns"] == raw_busy(path)  # the replay's kernels are busy time, never idle
    assert row["gpu_idle_pct"] < 1


def test_decode_time_goes_to_the_capturing_ops():
    rel, capture, _ = CASES[0]
    path, directory = shared_trace(rel), shared_trace(capture)
    want: dict[str, int] = defaultdict(int)
    for (_, dur), (_, op) in zip(raw_replay(path), raw_capture(directory)):
        want[op] += dur
    all_gpu = sum(ns(e["dur"]) for e in load_raw(path)["traceEvents"]
                  if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    got = report_json(str(path), "--capture", str(directory))
    where = {r["op"]: r for r in got["serving: where each phase's GPU time goes (per op)"]}
    for op, total in want.items():
        assert where[op]["gpu_time_ns"] == total
        assert where[op]["share_pct"] == 100 * total / all_gpu
    top = max(want, key=want.get)
    assert f"Decode GPU time goes to {top} {100 * want[top] / all_gpu:.1f} %" in \
        got["serving verdict"][2]["text"]
    assert got["serving verdict"][3]["text"] == "421 of 421 graph-replayed kernels attributed to their ops."


def test_warm_up_steps_before_the_steady_state(tmp_path):
    """A graph captured under ``capture_4_FULL``, two eager decode steps, then three that replay it: the
    steady state starts at the first replay, and the warm-up steps are a row of their own."""
    main_thread = {"pid": 1000, "tid": 1000}
    evs = [*METADATA,
           {"ph": "X", "cat": "user_annotation", "name": "capture_4_FULL", **main_thread, "ts": BASE_US,
            "dur": 400},
           {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", **main_thread,
            "ts": BASE_US + 10, "dur": 5, "args": {"correlation": 1}},
           {"ph": "X", "cat": "cpu_op", "name": "aten::mm", **main_thread, "ts": BASE_US + 20, "dur": 50},
           {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **main_thread, "ts": BASE_US + 30,
            "dur": 10, "args": {"correlation": 2, "kernel": "gemm"}},
           {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", **main_thread,
            "ts": BASE_US + 300, "dur": 5, "args": {"correlation": 3}}]
    for i in range(5):
        t, c = BASE_US + 1000 * (i + 1), 10 + i
        call = "cudaGraphLaunch" if i >= 2 else "cudaLaunchKernel"
        evs += [{"ph": "X", "cat": "user_annotation", "name": DECODE, **main_thread, "ts": t, "dur": 300},
                {"ph": "X", "cat": "cuda_runtime", "name": call, **main_thread, "ts": t + 20, "dur": 10,
                 "args": {"correlation": c}},
                {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 50, "dur": 100,
                 "args": {"correlation": c, "device": 0, "stream": 7}}]
    path = write(tmp_path / "warm.json", trace(evs))
    got = report_json(str(path))
    texts = [r["text"] for r in got["serving verdict"]]
    assert texts[:2] == ["Serving trace: 3 decode steps, 2 warm-up steps.",
                         "Steady state: after 2 warm-up steps (before the graph capture ended or the first "
                         "graph replay), which the phase figures leave out."]
    assert [(r["phase"], r["steps"]) for r in got["serving: steps per phase"]] == [("decode", 3),
                                                                                  ("warm-up", 2)]
    where = got["serving: where each phase's GPU time goes (per op)"]
    assert [(r["phase"], r["op"], r["count"]) for r in where] == [
        ("decode", "aten::mm", 3), ("warm-up", "(launched directly, not by a graph)", 2)]
    assert "3 of 3 graph-replayed kernels attributed to their ops." in texts
