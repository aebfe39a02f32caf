"""Serving phases in ``breakdown`` and ``diff`` (issue 36 item 2): traces built from the shared vLLM decode
step (copies relabelled prefill / mixed, a copy whose decode kernels run a known time longer), every figure
checked against a scan of the built file's raw JSON written here, so a decode change is shown as decode's."""

from __future__ import annotations

import copy
import gzip
import json
import re
from decimal import Decimal

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import shared_trace
from rawjson import load_raw, ns

from traceaug.cli import main

VLLM = "kineto/inference/vllm_decode_full/graph_execution.json.gz"
SGLANG = "kineto/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
NAMES = {"decode": "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)",
         "prefill": "execute_512_context_2(sq512sk512sqsq256sqsk256)_generation_0(sq0sk0sqsq0sqsk0)",
         "mixed": "execute_64_context_1(sq32sk32sqsq32sqsk32)_generation_32(sq32sk55086sqsq1sqsk1722)"}
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
STRETCH_US = Decimal(4)  # each decode kernel of B runs this much longer (the ones after it start later)
CORRELATION = 10**7  # each copy's correlation ids apart


def build(out, phases: list[str], stretch: dict[str, Decimal] | None = None):
    """The shared vLLM decode step copied once per phase in ``phases``, each later by more than the step's
    span, its annotation named for its phase; the kernels of a phase in ``stretch`` each that many µs
    longer (every GPU op after one starting that much later). Flow events left out (ops link by
    correlation); metadata once."""
    raw = load_raw(shared_trace(VLLM))
    events = [e for e in raw["traceEvents"] if e.get("ph") not in ("s", "f")]
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)
    gap = Decimal(int(span) + 5000)  # µs between copies' starts
    meta = [e for e in events if e.get("ph") == "M" or "ts" not in e]
    body = [e for e in events if e not in meta]
    out_events = list(meta)
    for k, phase in enumerate(phases):
        step = copy.deepcopy(body)
        later = (stretch or {}).get(phase, Decimal(0))
        kernels = 0
        for e in sorted((e for e in step if e.get("cat") in GPU), key=lambda e: e["ts"]):
            e["ts"] += kernels * later
            if e["cat"] == "kernel":
                e["dur"] += later
                kernels += 1
        for e in step:
            e["ts"] += k * gap
            if "correlation" in e.get("args", {}):
                e["args"]["correlation"] += k * CORRELATION
            if e.get("cat") == "user_annotation":
                e["name"] = NAMES[phase]
        out_events += step
    text = json.dumps({**raw, "traceEvents": out_events}, default=lambda d: f"@@{d}@@")
    out.write_bytes(gzip.compress(re.sub(r'"@@([-0-9.E]+)@@"', r"\1", text).encode()))
    return out


def scan(path) -> list[dict]:
    """Each serving step of the raw JSON, outermost ``execute_`` annotations in time order: its phase (by the
    annotation's request counts), CPU start and end, latency (to the later of its end and its GPU ops' end),
    GPU ops (those whose launch call, by correlation, starts inside it) and launch calls' time (ns)."""
    events = load_raw(path)["traceEvents"]
    steps = []
    for e in sorted((e for e in events if e.get("cat") == "user_annotation"
                     and e["name"].startswith("execute_")), key=lambda e: e["ts"]):
        m = re.match(r"execute_\d+_context_(\d+)\(.*\)_generation_(\d+)\(", e["name"])
        p, d = int(m.group(1)), int(m.group(2))
        steps.append({"phase": "mixed" if p and d else "prefill" if p else "decode", "ts": ns(e["ts"]),
                      "end": ns(e["ts"]) + ns(e["dur"]), "ops": [], "launch": 0})
    launch = {}
    for e in events:
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {}):
            launch.setdefault(e["args"]["correlation"], e)
    counted = set()
    for e in events:
        if e.get("cat") in GPU:
            call = launch[e["args"]["correlation"]]
            s = next(s for s in steps if s["ts"] <= ns(call["ts"]) < s["end"])
            s["ops"].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]))
            if id(call) not in counted:
                counted.add(id(call))
                s["launch"] += ns(call["dur"])
    for s in steps:
        s["latency"] = max(s["end"], max(end for _, end, _ in s["ops"])) - s["ts"]
    return steps


def union(spans: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for a, b in sorted(spans):
        if reach is None or a > reach:
            total, reach = total + b - a, b
        elif b > reach:
            total, reach = total + b - reach, b
    return total


def cli(*args: str, code: int = 0):
    done = CliRunner().invoke(main, list(args))
    assert done.exit_code == code, done.output
    return done


def stats(values) -> dict:
    v = np.array(values, np.float64)
    return {"mean": v.mean(), "p50": np.percentile(v, 50), "p90": np.percentile(v, 90)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("phases")
    order = ["decode", "prefill", "decode", "mixed", "decode", "prefill"]
    return {"a": build(tmp / "a.json.gz", order),
            "b": build(tmp / "b.json.gz", order, {"decode": STRETCH_US})}


def test_breakdown_per_phase_equals_the_raw_annotations(built):
    """Per phase: step count, latency distribution, GPU busy / idle in the steps' GPU windows (each from its
    first GPU op to the next step's), launch time, CPU time between steps, GPU time by kernel family."""
    path = built["a"]
    data = json.loads(cli("breakdown", str(path), "--format", "json").stdout)
    steps_key, family_key = (k for k in data if k.startswith("serving phases"))
    rows = {r["phase"]: r for r in data[steps_key]}
    want = scan(path)
    assert {p: r["steps"] for p, r in rows.items()} == {"decode": 3, "prefill": 2, "mixed": 1}
    first = [min(a for a, _, _ in s["ops"]) for s in want]
    windows = list(zip(first, [*first[1:], max(b for _, b, _ in want[-1]["ops"])]))
    for phase, row in rows.items():
        mine = [i for i, s in enumerate(want) if s["phase"] == phase]
        lat = [want[i]["latency"] for i in mine]
        assert row["latency_mean_ns"] == pytest.approx(np.mean(lat), abs=1e-6)
        for q in (50, 90, 99):
            assert row[f"latency_p{q}_ns"] == pytest.approx(np.percentile(lat, q), abs=1e-6)
        assert row["latency_max_ns"] == max(lat)
        busy = sum(union([(a, b) for a, b, _ in want[i]["ops"]]) for i in mine)
        assert row["gpu_busy_ns"] == busy
        assert row["gpu_idle_ns"] == sum(windows[i][1] - windows[i][0] for i in mine) - busy
        assert row["launch_ns"] == sum(want[i]["launch"] for i in mine)
        gaps = [want[i]["ts"] - want[i - 1]["end"] for i in mine if i > 0]
        assert row["cpu_between_steps_mean_ns"] == pytest.approx(np.mean(gaps), abs=1e-6)
        fam = [r for r in data[family_key] if r["phase"] == phase]
        assert sum(r["gpu_time_ns"] for r in fam) == sum(b - a for i in mine for a, b, _ in want[i]["ops"])
        assert sum(r["count"] for r in fam) == sum(len(want[i]["ops"]) for i in mine)
        assert sum(r["share_pct"] for r in fam) == pytest.approx(100)
    gemm = next(r for r in data[family_key] if r["phase"] == "mixed" and r["family"] == "gemm")
    assert gemm["gpu_time_ns"] >= sum(b - a for a, b, n in want[3]["ops"] if n.startswith("Cijk_"))
    text = cli("breakdown", str(path)).stdout  # the terminal: µs
    assert text.startswith("serving phases") and "latency_mean_us" in text and "_ns" not in text
    csv = cli("breakdown", str(path), "--format", "csv").stdout
    assert "# serving phases" in csv and "latency_p90_ns" in csv


def test_breakdown_on_the_sglang_step_and_one_step():
    """SGLang's step (its ``step[DECODE bs=32]`` inside vLLM's ``execute_``) is one decode step; ``--step``
    keeps that step's figures."""
    path = shared_trace(SGLANG)
    want = scan(path)
    data = json.loads(cli("breakdown", str(path), "--step", "0", "--format", "json").stdout)
    (row,) = data[next(k for k in data if k.startswith("serving phases: latency"))]
    assert (row["phase"], row["steps"], row["latency_max_ns"]) == ("decode", 1, want[0]["latency"])


def test_diff_shows_a_decode_regression_as_decode(built):
    """B's decode kernels each run 4 µs longer: each decode step's kernels grow by their count × 4 µs, the
    prefill and mixed steps do not change, and the step latencies equal the raw scans'."""
    out = json.loads(cli("diff", str(built["a"]), str(built["b"]), "--format", "json").stdout)
    (rank,) = out["ranks"]
    phases = {p["phase"]: p for p in rank["phases"]}
    assert set(phases) == {"decode", "prefill", "mixed"}
    scans = {s: scan(built[s]) for s in "ab"}
    for phase, row in phases.items():
        for s in "ab":
            lat = [x["latency"] for x in scans[s] if x["phase"] == phase]
            assert row[f"steps_{s}"] == len(lat)
            for k, v in stats(lat).items():
                assert row[f"latency_{k}_{s}_ns"] == pytest.approx(v, abs=1e-6)
    kernels = [n for _, _, n in scans["a"][0]["ops"]]
    assert phases["decode"]["latency_mean_delta_ns"] == pytest.approx(
        scans["b"][0]["latency"] - scans["a"][0]["latency"], abs=1e-6)
    assert phases["decode"]["status"] == "increased"
    assert phases["prefill"]["latency_mean_delta_ns"] == 0 and phases["prefill"]["status"] == "unchanged"
    stretch_ns = ns(STRETCH_US)
    per_name = {n: kernels.count(n) for n in set(kernels)}
    gpu = {r["key"]: r for r in phases["decode"]["ops"] if r["device"] == "gpu"}
    kernel = {e["name"] for e in load_raw(built["a"])["traceEvents"] if e.get("cat") == "kernel"}
    for name, count in per_name.items():  # per decode step: each kernel run 4 µs longer, copies as they were
        assert gpu[name]["delta_ns"] == pytest.approx(count * stretch_ns * (name in kernel), abs=1e-3), name
    for phase in ("prefill", "mixed"):
        assert all(r["delta_ns"] == 0 for r in phases[phase]["ops"] if r["device"] == "gpu")
    # over every step the same change is diluted: 3 of the 6 steps are decode steps
    whole = {r["key"]: r for r in rank["ops"] if r["device"] == "gpu"}
    name = max(per_name, key=per_name.get)
    assert whole[name]["delta_ns"] == pytest.approx(per_name[name] * stretch_ns * 3 / 6, abs=1e-3)


def test_the_gate_fails_on_decode_alone(built, tmp_path):
    """``--gate step``: the CPU step time did not change (the GPU ran longer), so the whole trace's gate
    passes; decode's step latency grew, and fails it, naming decode."""
    done = cli("diff", str(built["a"]), str(built["b"]), "--fail-on-regression", "1", "--gate", "step",
               code=3)
    lines = [x for x in done.stderr.splitlines() if "regression over" in x]
    assert len(lines) == 1 and "decode steps: step latency" in lines[0], done.stderr
    page = tmp_path / "diff.html"
    cli("diff", str(built["a"]), str(built["b"]), "--fail-on-regression", "1", "--html", str(page), code=3)
    text = page.read_text()
    assert "Serving phases: step latency" in text and "Top regressions in decode steps" in text
    assert "Step latency 19,114.059 → 20,814.059 µs (+8.9 %): fails the gate" in text
    same = cli("diff", str(built["a"]), str(built["a"]), "--fail-on-regression", "1", "--format", "json")
    assert all(p["gate"]["step_regressed"] is False for p in json.loads(same.stdout)["ranks"][0]["phases"])


def test_a_phase_only_one_side_has(built):
    """The shared single decode step against the built trace: prefill and mixed are only in B, said so."""
    one = shared_trace(VLLM)
    out = json.loads(cli("diff", str(one), str(built["a"]), "--format", "json").stdout)
    phases = {p["phase"]: p for p in out["ranks"][0]["phases"]}
    assert phases["prefill"]["status"] == phases["mixed"]["status"] == "only in B"
    assert "ops" not in phases["prefill"] and phases["prefill"]["latency_mean_a_ns"] is None
    assert phases["decode"]["steps_a"] == 1 and phases["decode"]["steps_b"] == 3
    assert out["findings"] == []  # no "mean ProfilerStep" claim: serving steps are other annotations
    text = cli("diff", str(one), str(built["a"])).stdout
    assert "(1 serving step vs 6 serving steps)" in text
    assert "prefill: only in B (2 steps)" in text and "mixed: only in B (1 step)," in text
    text = cli("diff", str(built["a"]), str(built["b"])).stdout
    assert "Top regressions in decode steps (per decode step)" in text and "in prefill steps" not in text
    csv = cli("diff", str(one), str(built["a"]), "--format", "csv").stdout.splitlines()
    assert csv[0].startswith("rank,phase,device,key") and any(",decode,gpu," in x for x in csv)
