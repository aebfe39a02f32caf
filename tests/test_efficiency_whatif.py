"""``whatif --roofline PCT`` (issue 35 item 4): every modelled op's GPU ops scaled to bring it to PCT % of its
roofline, checked against the roofline of an ``aten::mm`` written here (2·M·N·K at the H100's 989.5
TFLOP/s) and its kernels found in the raw JSON; and the step predicted no slower than measured."""

from __future__ import annotations

import gzip
from collections import defaultdict

import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from conftest import shared_trace

import traceaug
from traceaug.analysis.efficiency import at_roofline
from traceaug.cli import main

QWEN = "kineto/h100_qwen05b_inference.json.gz"
PCT = 50.0


def test_factors_bring_an_mm_to_its_roofline() -> None:
    events = [e for e in orjson.loads(gzip.decompress(shared_trace(QWEN).read_bytes()))["traceEvents"]
              if e.get("ph") == "X"]
    gpu = defaultdict(int)  # correlation -> GPU ns
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu[e["args"]["correlation"]] += round(e["dur"] * 1000)
    mms = [e for e in events if e.get("name") == "aten::mm"
           and e["args"]["Input Dims"] == [[8944, 1024], [1024, 2816]]]
    calls = [e for e in events if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in gpu]
    best = 2 * 8944 * 1024 * 2816 / 989.5e3  # ns at the bf16 peak (compute-bound)
    with traceaug.load(shared_trace(QWEN), kind="sync_shapes", progress=False) as trace:
        corr = np.array(sorted(gpu), dtype=np.int64)
        factor = dict(zip(corr.tolist(), at_roofline(trace, PCT, corr, np.ones(len(corr), bool)).tolist(),
                          strict=True))
    checked = 0
    for op in mms:
        inside = [c["args"]["correlation"] for c in calls if c["tid"] == op["tid"]
                  and op["ts"] <= c["ts"] <= op["ts"] + op["dur"]]
        ns = sum(gpu[c] for c in inside)
        want = min(1.0, best / (PCT / 100) / ns)
        assert inside and all(factor[c] == pytest.approx(want) for c in inside)
        checked += 1
    assert checked == 48
    assert max(factor.values()) == 1.0 and min(factor.values()) < 1.0


def test_whatif_roofline_row() -> None:
    res = CliRunner().invoke(main, ["whatif", str(shared_trace(QWEN)), "--roofline", "100",
                                    "--format", "json"])
    assert res.exit_code == 0, res.output
    (row,) = [r for r in orjson.loads(res.stdout)["rows"] if r["change"] == "roofline=100%"]
    assert row["predicted_ns"] <= row["baseline_ns"] and row["step"] == 6
    bad = CliRunner().invoke(main, ["whatif", str(shared_trace(QWEN)), "--roofline", "0"])
    assert bad.exit_code == 2


def test_critical_path_lane_marks_gemms_with_their_roofline(tmp_path) -> None:
    """``critical-path --roofline``: the lane's GPU segments carry the % of roofline of the op that launched
    them: each GEMM kernel's is one of the aten::mm / addmm instances' max(2·M·N·K(+M·N) / 989.5 TFLOP/s,
    bytes / 3.35 TB/s) over that instance's GPU time (its kernels and memsets in the raw JSON), × 100."""
    events = [e for e in orjson.loads(gzip.decompress(shared_trace(QWEN).read_bytes()))["traceEvents"]
              if e.get("ph") == "X"]
    gpu = defaultdict(int)
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu[e["args"]["correlation"]] += round(e["dur"] * 1000)
    calls = [e for e in events if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in gpu]
    want = set()
    for op in (e for e in events if e.get("name") in ("aten::mm", "aten::addmm")):
        d = op["args"]["Input Dims"]
        bias = op["name"] == "aten::addmm"
        (m, k), (_, n) = (d[1], d[2]) if bias else (d[0], d[1])
        flops = 2 * m * n * k + (m * n if bias else 0)
        moved = (m * k + k * n + m * n + (n if bias else 0)) * 2
        ns = sum(gpu[c["args"]["correlation"]] for c in calls
                 if c["tid"] == op["tid"] and op["ts"] <= c["ts"] <= op["ts"] + op["dur"])
        want.add(round(max(flops / 989.5e3, moved / 3350) / ns * 100, 2))
    out = tmp_path / "cp.json.gz"
    res = CliRunner().invoke(main, ["critical-path", str(shared_trace(QWEN)), str(out), "--roofline"])
    assert res.exit_code == 0, res.output
    lane = [e for e in orjson.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
            if e.get("cat") == "critical_path" and e.get("ph") == "b"]
    gemms = [e["args"] for e in lane if "gemm" in e["name"] and e["args"]["category"] == "gpu_compute"]
    marked = [a for a in gemms if "roofline_pct" in a]  # the rest: kernels whose launch the trace lacks
    assert len(marked) > len(gemms) / 2
    assert all(a["roofline_pct"] in want and a["bound"] == "compute" for a in marked)
    assert not any("roofline_pct" in e["args"] for e in lane if e["args"]["category"] == "cpu")


def test_opportunities_ranked_by_replayed_step_time() -> None:
    """``efficiency --replay``: each op group's replayed saving is at least 0 and at most the GPU time its ops
    would save (a longest path shrinks by no more than an edge does), and no single group saves more than
    every modelled op at its roofline at once (``whatif --roofline 100``)."""
    rel = "kineto/diff/h100_runs/a/trace.json.gz"
    eff = traceaug.efficiency(shared_trace(rel), replay=True, top=10, progress=False)
    opp = eff.opportunities
    assert len(opp) == 10 and (opp["saved_ns"] >= 0).all()
    assert (opp["saved_ns"] <= opp["gpu_saved_ns"] + 1).all() and opp["saved_ns"].max() > 0
    assert list(opp["saved_ns"]) == sorted(opp["saved_ns"], reverse=True)
    steps, changes, _ = traceaug.whatif(shared_trace(rel), roofline=100.0, progress=False)
    saved_all = int(steps["baseline_ns"].sum() - changes.loc[changes["change"] == "roofline=100%",
                                                              "predicted_ns"].sum())
    assert saved_all >= opp["saved_ns"].max()
