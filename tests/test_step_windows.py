"""The steps' GPU windows tile the GPU timeline: per-step busy, idle and every breakdown column
sum to the all-steps row (issue 23.2), on real traces against tests/analyses_raw.py, which
reads the raw JSON and shares no code with traceaug; GPU-side step annotations that hold few of
their step's ops are set aside (23.3); a step number beyond int64 is one line (24.11)."""

from __future__ import annotations

import json
from pathlib import Path

import analyses_raw as rawa
import kineto_gen as kg
import numpy as np
import pytest
from click.testing import CliRunner
from conftest import shared_trace

import traceaug
from traceaug.analysis import breakdown
from traceaug.analysis.gpu_steps import LOAD, gpu_ops, partition
from traceaug.cli import main

V100 = "kineto/diff/a100_vs_v100/test/rank-1.json.gz"
A100 = "kineto/a100_rank0_of16_6streams.json.gz"
A100_RANK3 = "kineto/diff/a100_vs_v100/control/rank-3.json.gz"
SUMMED = ("window", "cpu_step", "busy", "idle", "computation", "communication", "memory",
          *rawa.COMBOS)


def _temporal(rel: str):
    path = shared_trace(rel)
    with traceaug.load(path, progress=False, **LOAD) as t:
        g = gpu_ops(t)
    return g, breakdown.temporal(g), rawa.raw(path)


def _base(g, r) -> int:
    """Engine ns + this = the raw file's ns (the first CPU step aligns both)."""
    first = min(r["cpu_steps"], key=lambda n: r["cpu_steps"][n][0])
    return r["cpu_steps"][first][0] - int(g.steps["cpu_ts"][g.steps["step"].tolist().index(first)])


@pytest.mark.parametrize(("rel", "all_busy_ns"), [(V100, 717_437_000), (A100, 438_418_000)])
def test_step_rows_tile_and_sum_to_the_all_steps_row(rel: str, all_busy_ns: int) -> None:
    """Before: overlapping windows, per-step busy summed to 909 / 697 ms."""
    g, t, r = _temporal(rel)
    base = _base(g, r)
    steps = t["step"].tolist()[:-1]
    assert steps == sorted(r["windows"], key=lambda n: r["cpu_steps"][n][0])
    for i, n in enumerate(steps):
        lo, hi = r["windows"][n]
        assert (int(t["window_start"][i]) + base, int(t["window"][i])) == (lo, hi - lo), n
        want = rawa.breakdown_row(r["ops"], lo, hi)
        assert {k: int(t[k][i]) for k in want} == want, n
    assert all(t["window_start"][i] + t["window"][i] == t["window_start"][i + 1]
               for i in range(len(steps) - 1))
    for col in SUMMED:
        assert int(t[col][:-1].sum()) == int(t[col][-1]), col
    lo, hi = r["windows"][steps[0]][0], r["windows"][steps[-1]][1]
    assert int(t["busy"][-1]) == rawa.breakdown_row(r["ops"], lo, hi)["busy"] == all_busy_ns


def test_diff_headline_busy_is_the_steps_busy_per_step() -> None:
    """Before: B's GPU busy was 151.5 ms in a 124.1 ms step (each step's overlap counted twice)."""
    a, b = shared_trace(A100_RANK3), shared_trace(V100)
    out = CliRunner().invoke(main, ["diff", str(a.parent), str(b.parent), "--format", "json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)["ranks"][0]["summary"]
    for side, path in (("a", a), ("b", b)):
        r = rawa.raw(path)
        windows = list(r["windows"].values())
        lo, hi = min(w[0] for w in windows), max(w[1] for w in windows)
        whole = rawa.breakdown_row(r["ops"], lo, hi)
        n = len(windows)
        head = summary[side]
        assert head["gpu_busy_ns"] == pytest.approx(whole["busy"] / n)
        assert head["gpu_idle_ns"] == pytest.approx(whole["idle"] / n)
        for typ in ("computation", "communication", "memory"):
            assert head[f"{typ}_ns"] == pytest.approx(whole[typ] / n)
    assert summary["b"]["gpu_busy_ns"] == pytest.approx(717_437_000 / 6)


def test_partition_equals_the_plain_tiling_on_random_spans() -> None:
    """Steps with no GPU span, spans starting before the previous step's, one step, none."""
    rng = np.random.default_rng(23)
    none = np.iinfo(np.int64).max
    for _ in range(300):
        n = int(rng.integers(0, 9))
        cpu_ts = np.sort(rng.integers(0, 1000, n))
        lo = rng.integers(0, 1200, n)
        hi = lo + rng.integers(0, 400, n)
        empty = rng.random(n) < 0.3
        lo, hi = np.where(empty, none, lo), np.where(empty, np.iinfo(np.int64).min, hi)
        start, stop = partition(lo, hi, cpu_ts)
        cpu_steps = {k: (int(cpu_ts[k]), int(cpu_ts[k]) + 1) for k in range(n)}
        spans = {k: (int(lo[k]), int(hi[k])) for k in range(n) if not empty[k]}
        want = rawa.tile(cpu_steps, spans)
        assert [(int(a), int(b)) for a, b in zip(start, stop)] == [want[k] for k in range(n)]


def _annotated_trace(tmp_path: Path) -> Path:
    """kineto_gen's 3 steps (gemm [50, 250), memcpy [400, 500) µs into each); GPU-side
    ProfilerStep annotations: #0 and #2 [50, 66) (hold neither op), #1 [30, 600) (both)."""
    evs = kg.events(3)
    for i, (a, b) in enumerate(((50, 66), (30, 600), (50, 66))):
        t = kg.BASE_US + i * kg.STEP_US
        evs.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{i}",
                    "pid": 0, "tid": 99, "ts": t + a, "dur": b - a})
    return kg.write(tmp_path / "annotated.json", kg.trace(evs))


def test_implausible_annotation_falls_back_to_the_launches(tmp_path: Path) -> None:
    path = _annotated_trace(tmp_path)
    out = CliRunner().invoke(main, ["breakdown", str(path), "--format", "json"])
    assert out.exit_code == 0, out.output
    found = json.loads(out.output)
    got = [(row["step"], row["source"], row["window_ns"] // 1000, row["busy_ns"] // 1000)
           for row in found[breakdown.PER_STEP]]
    # step 0: [50, 1030) from its launches to step 1's annotation; 1: to step 2's first op
    # (2050); 2: to its last op's end (2500); busy 300 µs each
    assert got == [(0, "launches", 980, 300), (1, "gpu_annotation", 1020, 300),
                   (2, "launches", 450, 300)]
    assert [(row["source"], row["window_ns"] // 1000, row["busy_ns"] // 1000)
            for row in found[breakdown.ALL_STEPS]] == [("steps", 2450, 900)]
    info = CliRunner().invoke(main, ["info", str(path), "--format", "json"])
    assert info.exit_code == 0, info.output
    assert json.loads(info.output)["warnings"] == [
        "GPU-side ProfilerStep annotations #0, #2 hold less than half of their step's GPU "
        "ops: those steps' GPU windows come from the ops they launched"]


HUGE = "99999999999999999999999"


@pytest.mark.parametrize("command", ["kernels", "gaps", "breakdown", "launches", "report",
                                     "diff"])
def test_step_number_beyond_int64_is_one_line(tmp_path: Path, command: str) -> None:
    evs = kg.events(3)
    step1 = next(e for e in evs if e.get("name") == "ProfilerStep#1")
    step1["name"] = f"ProfilerStep#{HUGE}"
    path = kg.write(tmp_path / "huge.json", kg.trace(evs))
    before = path.read_bytes()
    html = tmp_path / "r.html"
    args = {"report": [str(path), "--html", str(html)], "diff": [str(path), str(path)]}
    out = CliRunner().invoke(main, [command, *args.get(command, [str(path)])])
    assert out.exit_code == 1, out.output
    assert out.output == (f"traceaug: error: {path}: ProfilerStep#{HUGE}: step number out of "
                          "range (at most 9223372036854775807)\n")
    assert not html.exists() and path.read_bytes() == before
