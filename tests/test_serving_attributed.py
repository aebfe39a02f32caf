"""Graph-replayed kernels attributed to their captured ops feed every per-op figure (issue 36 item 3):
``kernels`` and ``breakdown`` give each captured op its replayed kernels' GPU time, to the ns of the raw
JSON (the capture's dispatch order mapped onto the replay's kernels, ``test_serving_replay``'s raw
readers); the built CUDA trace's node ids decide the same way; ``critical-path`` names the captured op of
a replayed kernel on the path, and ``efficiency`` models a replayed GEMM from its captured call's shapes."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from click.testing import CliRunner
from conftest import shared_trace
from rawjson import load_raw, ns
from test_serving_replay import CASES, cuda_trace, raw_capture, raw_capture_ops, raw_replay

from traceaug.cli import main

PER_OP = "graph-replayed kernels per op"


def run(*args: str) -> dict:
    out = CliRunner().invoke(main, [*args, "--format", "json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def per_op(section: list[dict]) -> dict[str, int]:
    return {r["op"]: r["total_ns"] for r in section}


@pytest.mark.parametrize("rel, capture, count", CASES)
def test_per_op_gpu_time_in_kernels_and_breakdown(rel, capture, count):
    path, directory = shared_trace(rel), shared_trace(capture)
    replay, captured = raw_replay(path), raw_capture(directory)
    assert [n for n, _ in replay] == [k for k, _ in captured]  # order decides on ROCm
    want: dict[str, int] = defaultdict(int)
    for (_, dur), (_, op) in zip(replay, captured):
        want[op] += dur
    for command in ("kernels", "breakdown"):
        got = run(command, str(path), "--capture", str(directory))
        assert per_op(got[PER_OP]) == want, command
        assert sum(r["total_ns"] for r in got[PER_OP]) == sum(d for _, d in replay)  # to the ns
        assert sum(r["count"] for r in got[PER_OP]) == count
        assert "reliability" not in got, command
    assert per_op(run("breakdown", str(path), "--capture", str(directory), "--step", "0")[PER_OP]) == want
    bare = run("breakdown", str(path))  # without the capture: no per-op figure, the mark instead
    assert PER_OP not in bare and "reliability" in bare


def test_cuda_node_ids_through_kernels_and_breakdown(tmp_path):
    path = cuda_trace(tmp_path)  # its capture inside: breakdown reads it; kernels when pointed at it
    want = {"aten::mm": 200_000, "aten::relu": 30_000}
    assert per_op(run("breakdown", str(path))[PER_OP]) == want
    assert per_op(run("kernels", str(path), "--capture", str(path))[PER_OP]) == want


def test_critical_path_names_the_captured_op():
    rel, capture, _ = CASES[0]
    path, directory = shared_trace(rel), shared_trace(capture)
    ops_of: dict[str, set] = defaultdict(set)  # each replayed kernel name: the ops that captured it
    for (name, _), (_, op) in zip(raw_replay(path), raw_capture(directory)):
        ops_of[name].add(op)
    top = run("critical-path", str(path), "--summary-only", "--capture", str(directory))["top"]
    named = [(e, o) for e, o in zip(top["event"], top["op"]) if e in ops_of]
    assert len(named) >= 5  # the path runs through the replay
    for event, op in named:
        assert op in ops_of[event] and "GraphLaunch" not in op, event
    assert top["op"][0] == "vllm::moe_forward"  # the longest: the MoE GEMM, captured in vllm::moe_forward
    bare = run("critical-path", str(path), "--summary-only")  # no capture: no op, the mark instead
    assert set(bare["top"]["op"]) == {None} and "reliability" in bare


def test_efficiency_models_replayed_gemms_from_their_captured_shapes():
    rel, capture, _ = CASES[0]
    path, directory = shared_trace(rel), shared_trace(capture)
    want: dict[str, list] = {}  # per aten::addmm input shapes: [FLOPs of a call, calls, GPU ns]
    calls = set()
    for (_, dur), (_, op) in zip(raw_replay(path), raw_capture_ops(directory)):
        if op["name"] != "aten::addmm":
            continue
        bias, (m, k), (_, n) = op["args"]["Input Dims"][:3]
        row = want.setdefault(str(op["args"]["Input Dims"][:3]), [2 * m * k * n + m * n, 0, 0])
        row[1] += (op["ts"], op["tid"]) not in calls  # each captured call once (it holds several kernels)
        row[2] += dur
        calls.add((op["ts"], op["tid"]))
    assert len(want) == 3
    groups = run("efficiency", str(path), "--capture", str(directory))["groups"]
    got = {r["shapes"][:r["shapes"].index("], [],")] + "]]": [r["flops"], r["count"], r["total_ns"]]
           for r in groups if r["name"] == "aten::addmm"}
    assert {k.replace(" ", ""): v for k, v in got.items()} == {k.replace(" ", ""): v for k, v in want.items()}
    bare = run("efficiency", str(path))["groups"]  # no capture: the replay is one row with no op, no model
    assert [r["family"] for r in bare if r["name"] == "(no CPU op)"] == ["no model"]
    assert not [r for r in bare if r["name"] == "aten::addmm"]


def raw_direct(path) -> dict[str, int]:
    """GPU time per innermost CPU op holding the launch of each GPU op no graph launch replayed, from the raw
    JSON."""
    evs = load_raw(path)["traceEvents"]
    graph = {e["args"]["correlation"] for e in evs if e.get("name", "").endswith("GraphLaunch")}
    calls = {e["args"]["correlation"]: e for e in evs if e.get("cat") == "cuda_runtime"
             and "correlation" in e.get("args", {})}
    ops = [e for e in evs if e.get("cat") == "cpu_op"]
    out: dict[str, int] = defaultdict(int)
    for k in evs:
        if k.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset") or k["args"]["correlation"] in graph:
            continue
        c = calls[k["args"]["correlation"]]
        holding = [o for o in ops if (o["pid"], o["tid"]) == (c["pid"], c["tid"]) and o["ts"] <= c["ts"]
                   and c["ts"] + c["dur"] <= o["ts"] + o["dur"]]
        out[max(holding, key=lambda o: (o["ts"], -o["dur"]))["name"]] += ns(k["dur"])
    return out


def test_diff_by_op_counts_a_replayed_kernel_for_its_captured_op(tmp_path):
    rel, capture, _ = CASES[0]
    path, directory = shared_trace(rel), shared_trace(capture)
    want = raw_direct(path)
    for (_, dur), (_, op) in zip(raw_replay(path), raw_capture(directory)):
        want[op] += dur
    rows = run("diff", str(path), str(path), "--by", "op", "--device", "gpu", "--capture",
               str(directory))["ranks"][0]["ops"]
    assert {r["key"]: r["total_a_ns"] for r in rows} == want
    # both sides attributed from their own capture: B's replayed GEMM 100 µs longer shows on aten::mm
    a = cuda_trace(tmp_path)
    raw = json.loads(a.read_text())
    for e in raw["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"] == "gemm":
            e["dur"] = 300
    b = tmp_path / "b.json"
    b.write_text(json.dumps(raw))
    rows = run("diff", str(a), str(b), "--by", "op", "--device", "gpu")["ranks"][0]["ops"]
    assert {r["key"]: (r["total_a_ns"], r["total_b_ns"]) for r in rows} == {
        "aten::mm": (200_000, 300_000), "aten::relu": (30_000, 30_000)}


def test_the_cache_never_answers_a_capture_run_from_a_run_without_it(tmp_path):
    rel, capture, count = CASES[0]
    path, store = str(shared_trace(rel)), str(tmp_path / "cache")
    for command in ("kernels", "breakdown"):
        plain = run(command, path, "--cache", store)  # fills the cache
        assert PER_OP not in plain
        made = sorted(p.name for p in (tmp_path / "cache").rglob("*.entry"))
        assert made
        captured = run(command, path, "--cache", store, "--capture", str(shared_trace(capture)))
        assert sum(r["count"] for r in captured[PER_OP]) == count
        assert sorted(p.name for p in (tmp_path / "cache").rglob("*.entry")) == made  # it left none
        assert run(command, path, "--cache", store) == plain


def test_critical_path_roofline_reaches_the_replayed_gemms(tmp_path):
    rel, capture, _ = CASES[0]
    path, directory = shared_trace(rel), shared_trace(capture)
    gemms = {name for (name, _), (_, op) in zip(raw_replay(path), raw_capture(directory))
             if op == "aten::addmm"}  # the kernels the captured addmm calls replay
    out = tmp_path / "cp.json.gz"
    CliRunner().invoke(main, ["critical-path", str(path), str(out), "--roofline", "--capture",
                              str(directory)], catch_exceptions=False)
    lane = [e for e in json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
            if e.get("cat") == "critical_path" and e.get("ph") == "b" and e["name"] in gemms
            and e["args"]["category"] == "gpu_compute"]  # the kernel's own time (not the gap before it)
    assert len(lane) == 72  # 3 addmm per layer, 24 layers: every replayed GEMM on the path
    assert all(e["args"].get("bound") == "memory" and e["args"]["roofline_pct"] > 0 for e in lane)
