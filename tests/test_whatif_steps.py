"""``whatif`` and ``diff --explain`` on 100,000 tiny steps (issue 39.8: ~2.2 ms a step, past 120 s): the
answers of a few steps checked against the schedule the generator laid out, so the run must finish (one
load serves both; the explain split of a change is ``test_whatif``'s)."""

from __future__ import annotations

import json
from pathlib import Path

import jobgen
import kineto_gen
import pytest
from click.testing import CliRunner

import traceaug
from traceaug.analysis import replay
from traceaug.analysis.explain import explain
from traceaug.cli import main
from traceaug.render.whatif_text import render

STEPS = 100_000
P_US, LAUNCH_US, START_US = 400, 5, 25  # step length; its launch's start; its kernel's start


def kernel_us(i: int, extra: int = 0) -> int:
    return 100 + 10 * (i % 7) + extra


def write_steps(path: Path, extra: int = 0, steps: int = STEPS) -> Path:
    """``steps`` steps, step i: ProfilerStep#i of 400 µs, cudaLaunchKernel at 5 (10 µs), its kernel at 25
    on stream 7 (``kernel_us(i, extra)``), steps 1000 µs apart."""
    head = json.dumps({**kineto_gen.HEADER, "traceEvents": []})[:-2]
    rows = [json.dumps(e) for e in kineto_gen.METADATA]
    for i in range(steps):
        t = kineto_gen.BASE_US + i * kineto_gen.STEP_US
        rows.append(f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{i}", "pid": 1000, '
                    f'"tid": 1000, "ts": {t}, "dur": {P_US}}}')
        rows.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000, '
                    f'"tid": 1000, "ts": {t + LAUNCH_US}, "dur": 10, "args": {{"correlation": {i + 1}}}}}')
        rows.append(f'{{"ph": "X", "cat": "kernel", "name": "gemm_{i % 7}", "pid": 0, "tid": 7, '
                    f'"ts": {t + START_US}, "dur": {kernel_us(i, extra)}, '
                    f'"args": {{"correlation": {i + 1}, "device": 0, "stream": 7}}}}')
    path.write_text(head + ",\n".join(rows) + "]}")
    return path


def test_whatif_and_explain_on_100k_steps(tmp_path: Path) -> None:
    """Per step, by hand (µs): halving the kernels ends the step K/2 earlier (it ends the path; the
    rest of the step after it stays); dependency-only, the launch and the kernel both start at the
    step's start: K (with the CPU's untraced time: 5 + K); unexplained, the launch's 5 from the start
    and the step's tail after the kernel. Each step's path: the launch delay (20), the kernel, idle."""
    path = write_steps(tmp_path / "t.json")
    with traceaug.load(path, kind="sync", progress=False) as t:
        found = replay.tables(replay.whatif(t, scales=[replay.parse_scale("comp=0.5")]))
        split = explain(t, t)
    steps, changes = found
    assert len(steps["step"]) == STEPS and (steps["baseline_ns"] == P_US * 1000).all()
    for i in (0, 1, 5, 4_321, STEPS // 2 + 3, STEPS - 1):
        k = kernel_us(i)
        assert steps["step"][i] == i and steps["measured_ns"][i] == P_US * 1000
        assert steps["dependency_ns"][i] == k * 1000
        assert steps["with_cpu_gaps_ns"][i] == (LAUNCH_US + k) * 1000  # the CPU's 5 before its launch
        assert steps["unexplained_pct"][i] == pytest.approx(100 * (LAUNCH_US + P_US - START_US - k) / P_US)
        assert changes["predicted_ns"][i] == (P_US - k / 2) * 1000
    errs = [abs(kernel_us(i) - P_US) / P_US * 100 for i in range(STEPS)]
    summary = replay.error_summary(steps)
    dep = list(summary["replay"]).index("dependency-only")
    assert summary["mean_abs_error_pct"][dep] == pytest.approx(sum(errs) / STEPS)
    assert summary["max_abs_error_pct"][dep] == pytest.approx(max(errs))
    rows = render(steps, changes, summary, "csv").splitlines()
    assert len(rows) == STEPS + 1 and rows[1].startswith("0,400000,400000,0.0,")
    cats = dict(zip(split["categories"]["category"], split["categories"]["a_ns"]))
    mean_k = sum(kernel_us(i) for i in range(STEPS)) / STEPS
    assert cats["gpu_compute"] == pytest.approx(mean_k * 1000)
    assert cats["launch_delay"] == pytest.approx(20_000) and cats["cpu"] == 0
    assert cats["idle"] == pytest.approx((P_US - 20 - mean_k) * 1000)


def test_a_glob_that_matches_nothing_names_close_ones(tmp_path: Path) -> None:
    """A typo in ``--scale`` used to predict no change: now an error naming the close names."""
    path = kineto_gen.write(tmp_path / "t.json", kineto_gen.trace(kineto_gen.events(2)))
    r = CliRunner().invoke(main, ["whatif", str(path), "--scale", "gemm_kernal=0.5"])
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "no event is named 'gemm_kernal'" in r.output and "close: gemm_kernel" in r.output
    ok = traceaug.whatif(path, scale=["gemm_k*=0.5"], progress=False)
    assert ok.changes["change"].tolist() == ["gemm_k*=0.5"] * 2


def test_a_glob_that_matches_nothing_in_a_job_names_close_ones(tmp_path: Path) -> None:
    d = jobgen.write(tmp_path / "job", jobgen.job(2, 1, 100, steps=1))
    r = CliRunner().invoke(main, ["whatif", str(d), "--scale", "ncclDevKernel_AllReduc=0.5"])
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "no event is named 'ncclDevKernel_AllReduc'" in r.output
    assert "close: ncclDevKernel_AllReduce" in r.output
