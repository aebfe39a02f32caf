"""The analyses against HTA's newest release (``traceinsight`` 0.6.1, ``import hta``; 0.5.0 gave
the same figures here) run on the A100 6-stream trace. HTA drops the last ProfilerStep and every
GPU op no CPU event launched (872 here): its figures are compared with ours over the same ops
(launched before the last step's CPU start). Our command's own figures differ from HTA's only by
those choices (documented below)."""

from __future__ import annotations

import dataclasses
import logging
import os

import pytest
from conftest import require_hta, shared_trace

import traceaug
from traceaug.analysis import breakdown, kernels, launches
from traceaug.analysis.gpu_steps import LOAD, gpu_ops, gpu_windows
from traceaug.analysis.steps import steps
from traceaug.analysis.tables import take

A100 = "kineto/a100_rank0_of16_6streams.json.gz"
US = 1000


@pytest.fixture(scope="module")
def hta(tmp_path_factory):
    path = shared_trace(A100)
    require_hta()
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    d = tmp_path_factory.mktemp("hta")
    os.symlink(path, d / "rank-0.json.gz")
    a = TraceAnalysis(trace_dir=str(d))
    types, per_kernel = a.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0,
                                                   num_kernels=10**6, include_memory_kernels=True)
    return {"kernels": per_kernel, "types": types,
            "temporal": a.get_temporal_breakdown(visualize=False),
            "idle": a.get_idle_time_breakdown(visualize=False)[0],
            "overlap": a.get_comm_comp_overlap(visualize=False),
            "launch": a.get_cuda_kernel_launch_stats(visualize=False)[0]}


@pytest.fixture(scope="module")
def ours():
    """Our analyses on the whole trace, and on HTA's part of it: its ops, and the windows of
    the steps before the last one tiled as if the trace ended there."""
    with traceaug.load(shared_trace(A100), progress=False, **LOAD) as t:
        g = gpu_ops(t)
        last = int(g.steps["cpu_ts"].max())
        keep = g.ops["launched"] & (g.ops["launch_ts"] < last)  # HTA's ops
        cpu = steps(t)
        cpu = take(cpu, cpu["ts"] < last)
        ops = take(g.ops, keep)
        windows = gpu_windows(t, cpu, ops["ts"], ops["end"], ops["step"])
    return g, dataclasses.replace(g, ops=ops, steps=windows)


def test_kernel_count_and_total_per_kernel(hta, ours) -> None:
    _, h = ours
    k = kernels.kernel_table(h)
    got = {n: (c, tot // US) for n, c, tot in zip(k["name"], k["count"].tolist(), k["total"].tolist())}
    df = hta["kernels"]
    want = {n: (round(s / m), int(s)) for n, s, m in zip(df["name"], df["sum (us)"], df["mean (us)"])}
    assert got == want


def test_temporal_breakdown_and_overlap(hta, ours) -> None:
    _, h = ours
    row = {c: v[-1] for c, v in breakdown.temporal(h).items()}  # all steps but the last
    t = hta["temporal"].iloc[0]
    assert row["idle"] == t["idle_time(us)"] * US == 705_853 * US
    assert row["computation"] == t["compute_time(us)"] * US
    assert row["window"] == t["kernel_time(us)"] * US
    assert round(row["comm_overlap_pct"], 2) == hta["overlap"]["comp_comm_overlap_pctg"].iloc[0] == 1.37
    types = dict(zip(hta["types"]["kernel_type"], hta["types"]["sum"]))
    assert types == {"COMPUTATION": row["comp_only"] // US, "COMMUNICATION": row["comm_only"] // US,
                     "MEMORY": row["mem_only"] // US,
                     "COMPUTATION overlapping MEMORY": row["comp_mem"] // US,
                     "COMPUTATION overlapping COMMUNICATION": row["comp_comm"] // US,
                     "COMMUNICATION overlapping MEMORY": row["comm_mem"] // US}


def test_idle_breakdown_per_stream(hta, ours) -> None:
    _, h = ours
    t = breakdown.idle_by_stream(h)
    got = {(s, c): i for s, c, i in zip(t["stream"].tolist(), t["category"], t["idle"].tolist())}
    df = hta["idle"]
    want = {(int(s), c): int(i) * US for s, c, i in zip(df["stream"], df["idle_category"], df["idle_time"])
            if i > 0}
    assert got == want


def test_launch_stats(hta, ours) -> None:
    _, h = ours
    t = launches.launch_table(h)
    mine = [i for i, n in enumerate(t["launch_name"]) if n in launches.HTA_LAUNCHES]
    df = hta["launch"]
    assert len(mine) == len(df) == 5224
    got = sorted(zip(t["correlation"][mine].tolist(), (t["cpu_duration"][mine] // US).tolist(),
                     (t["gpu_duration"][mine] // US).tolist(), (t["launch_delay"][mine] // US).tolist()))
    want = sorted(zip(df["correlation"].astype(int), df["cpu_duration"].astype(int),
                      df["gpu_duration"].astype(int), df["launch_delay"].astype(int)))
    assert got == want


def test_where_our_command_differs_from_hta(hta, ours) -> None:
    """The command keeps the last step and the 872 unlaunched ops (HTA drops both), and counts
    cuLaunchKernel / cudaGraphLaunch launches HTA leaves out: its kernel counts are larger by
    exactly those ops."""
    g, h = ours
    assert int((~g.ops["launched"]).sum()) == 872
    full = kernels.kernel_table(g)
    assert int(full["count"].sum()) == len(g.ops["ts"]) == 7747
    assert int(kernels.kernel_table(h)["count"].sum()) == int(
        sum(round(s / m) for s, m in zip(hta["kernels"]["sum (us)"], hta["kernels"]["mean (us)"])))
    assert len(launches.launch_table(g)["launch_delay"]) > len(hta["launch"])

