"""The per-step analyses on a trace of many steps, each row against its answer known by
construction: steps that differ from each other (kernel length, a communication kernel on
every third step, a GPU-side annotation on every fourth), so a row given to the wrong step
shows. Also the breakdown of random overlapping windows against a plain sweep over the ops'
edges (tests/analyses_raw.py, no traceaug code)."""

from __future__ import annotations

import json
from pathlib import Path

import analyses_raw as rawa
import kineto_gen as kg
import numpy as np
import pytest
from click.testing import CliRunner

import traceaug
from traceaug.analysis import breakdown, kernels
from traceaug.analysis.gpu_steps import LOAD, GpuOps, gpu_ops, last_reaching
from traceaug.cli import main

US = 1000
STEPS = 300
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _extra(i: int) -> int:
    """Step ``i``'s gemm kernel is 200 + extra µs long."""
    return 10 * (i % 5)


def _events(i: int) -> list[dict]:
    """kineto_gen's step ``i`` (gemm [50, 250) then memcpy [400, 500) on stream 7, µs from the
    step's start), its kernel longer by ``_extra(i)``; every third step an NCCL kernel
    [150, 450) on stream 9; every fourth from step 1 a GPU-side ProfilerStep [30, 600)."""
    evs = kg.step(i)
    evs[3]["dur"] += _extra(i)
    t = kg.BASE_US + i * kg.STEP_US
    if i % 3 == 0:
        c = 100_000 + i
        evs += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000,
                 "tid": 1000, "ts": t + 40, "dur": 5, "args": {"correlation": c}},
                {"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 9, "ts": t + 150,
                 "dur": 300, "args": {"correlation": c, "device": 0, "stream": 9}}]
    if i % 4 == 1:
        evs.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{i}",
                    "pid": 0, "tid": 99, "ts": t + 30, "dur": 570})
    return evs


def _start(i: int) -> int:
    """Where step ``i``'s GPU window starts, µs from its CPU start: its GPU-side annotation's
    start, else its first op's."""
    return 30 if i % 4 == 1 else 50


def _answer(i: int) -> dict:
    """Step ``i``'s breakdown row (µs), worked out from the schedule in ``_events``: its window
    runs to the next step's start (1000 µs on), the last one's to its own GPU end."""
    e = _extra(i)
    start = _start(i)
    if i < STEPS - 1:
        window = 1000 + _start(i + 1) - start
    else:
        window = (600 if i % 4 == 1 else 500) - start
    if i % 3 == 0:  # gemm [50, 250+e), nccl [150, 450), memcpy [400, 500): one busy span
        row = {"busy": 450, "communication": 300, "comp_only": 100, "comm_only": 150 - e,
               "mem_only": 50, "comp_comm": 100 + e, "comm_mem": 50}
    else:
        row = {"busy": 300 + e, "communication": 0, "comp_only": 200 + e, "comm_only": 0,
               "mem_only": 100, "comp_comm": 0, "comm_mem": 0}
    row.update(window_start=i * 1000 + start, window=window, idle=window - row["busy"],
               computation=200 + e, memory=100, comp_mem=0, comp_comm_mem=0, cpu_step=900,
               source="gpu_annotation" if i % 4 == 1 else "launches")
    return row


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory) -> Path:
    evs = [*kg.METADATA, *(e for i in range(STEPS) for e in _events(i))]
    return kg.write(tmp_path_factory.mktemp("steps") / "steps.json", kg.trace(evs))


@pytest.fixture(scope="module")
def g(trace_path: Path) -> GpuOps:
    with traceaug.load(trace_path, progress=False, **LOAD) as t:
        return gpu_ops(t)


def test_every_step_row_is_its_known_answer(g: GpuOps) -> None:
    t = breakdown.temporal(g)
    assert t["step"].tolist() == [*range(STEPS), None]
    origin = int(t["window_start"][0]) - 50 * US  # step 0's window starts 50 µs in
    for i in range(STEPS):
        want = _answer(i)
        got = {k: (int(t[k][i]) - origin) // US if k == "window_start" else
               t[k][i] if k == "source" else int(t[k][i]) // US for k in want}
        assert got == want, i
        assert t["idle_pct"][i] == pytest.approx(100 * want["idle"] / want["window"])
        assert t["comm_overlap_pct"][i] == pytest.approx(100 * (100 + _extra(i)) / 300
                                                         if i % 3 == 0 else 0.0)
    # over every step: step 0's window start (50) to the last one's end; the windows tile it
    last = _answer(STEPS - 1)
    window = last["window_start"] + last["window"] - 50
    assert window == sum(_answer(i)["window"] for i in range(STEPS))
    busy = sum(_answer(i)["busy"] for i in range(STEPS))
    assert [int(t[k][-1]) // US for k in ("window", "busy", "idle", "cpu_step", "communication")] == \
        [window, busy, window - busy, 900 * STEPS, 300 * len(range(0, STEPS, 3))]


def test_one_step_and_each_ops_step(g: GpuOps, trace_path: Path) -> None:
    # every op belongs to the step that launched it: kernel, memcpy, and nccl every third
    want = sorted([i for i in range(STEPS) for _ in range(2 + (i % 3 == 0))])
    assert sorted(g.ops["step"].tolist()) == want
    for i in (0, 1, 3, 137, STEPS - 1):
        row = breakdown.temporal(g, i)
        assert row["step"].tolist() == [i]
        assert int(row["busy"][0]) // US == _answer(i)["busy"]
        k = kernels.kernel_table(g, i)
        assert dict(zip(k["name"].tolist(), k["total"].tolist()))["gemm_kernel"] == \
            (200 + _extra(i)) * US
    out = CliRunner().invoke(main, ["breakdown", str(trace_path), "--step", "201", "--format",
                                    "json"])
    assert out.exit_code == 0, out.output
    found = json.loads(out.output)
    (row,) = found[breakdown.PER_STEP]
    assert found[breakdown.ALL_STEPS] == []  # one step asked for: no row over all of them
    want = _answer(201)
    assert (row["step"], row["source"], row["window_ns"], row["busy_ns"], row["comp_only_ns"]) == \
        (201, want["source"], want["window"] * US, want["busy"] * US, want["comp_only"] * US)


def test_unknown_step_among_many_is_a_short_line(trace_path: Path) -> None:
    out = CliRunner().invoke(main, ["kernels", str(trace_path), "--step", "5000"])
    assert out.exit_code == 1
    assert out.output == (f"traceaug: error: {trace_path}: no ProfilerStep#5000 "
                          f"(steps: {STEPS} from 0 to {STEPS - 1})\n")


def test_windows_breakdown_equals_a_plain_sweep_on_random_ops() -> None:
    """``window_rows`` against analyses_raw's sweep, which shares no code with traceaug."""
    rng = np.random.default_rng(11)
    types = np.array(breakdown.TYPES, dtype=object)
    for _ in range(60):
        n = int(rng.integers(0, 40))
        ts = np.sort(rng.integers(0, 1000, n))
        ops = {"ts": ts, "end": ts + rng.integers(0, 120, n),
               "category": types[rng.integers(0, 3, n)]}
        plain = [{"ts": int(a), "end": int(b), "type": str(c)}
                 for a, b, c in zip(ops["ts"], ops["end"], ops["category"])]
        lo = rng.integers(-50, 1000, 25)
        hi = lo + rng.integers(-20, 300, 25)
        g = GpuOps(None, None, ops, {})
        got = breakdown.window_rows(g, lo, hi)
        for w, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
            want = rawa.breakdown_row(plain, a, b)
            assert {k: int(got[k][w]) for k in want} == want


def test_last_reaching_equals_a_scan() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 7, 8, 9, 33):
        end = rng.integers(0, 100, n)
        i = rng.integers(-1, n, 200)
        t = rng.integers(-5, 105, 200)
        want = [max((k for k in range(q + 1) if end[k] > x), default=-1) for q, x in zip(i, t)]
        assert last_reaching(end, i, t).tolist() == want


def test_covered_by_mask_is_covered_in_per_mask() -> None:
    from traceaug.analysis.intervals import combination_segments, covered_by_mask, covered_in

    rng = np.random.default_rng(3)
    for _ in range(30):
        spans = {}
        for name in "abc":
            n = int(rng.integers(0, 8))
            ts = rng.integers(0, 200, n)
            spans[name] = (ts, ts + rng.integers(0, 50, n))
        seg_lo, seg_hi, mask = combination_segments(spans)
        lo = rng.integers(-20, 260, 12)
        hi = lo + rng.integers(-10, 120, 12)
        got = covered_by_mask(seg_lo, seg_hi, mask, lo, hi, 8)
        for m in range(8):
            assert got[:, m].tolist() == covered_in(seg_lo[mask == m], seg_hi[mask == m], lo, hi).tolist()
