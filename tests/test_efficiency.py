"""``traceaug efficiency`` (issue 35): FLOPs and bytes per op family checked against formulas written here
(multiply-add = 2 FLOPs), over shapes read from the shared traces' raw JSON; the command's totals on the H100
Qwen trace equal those formulas applied to each launching op found by walking the raw JSON; peaks, unknown
devices, ``--peaks`` and the trace it writes."""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict

import orjson
import pytest
from click.testing import CliRunner
from conftest import shared_trace

import traceaug
from traceaug.analysis.flops import Inputs, model
from traceaug.cli import main

QWEN = "kineto/h100_qwen05b_inference.json.gz"
WITH_SHAPES = (QWEN, "kineto/h100_bert_small_inference.json.gz", "kineto/a100_rank0_of16_6streams.json.gz",
               "kineto/b200_rank0_of8_allgather.json.gz", "kineto/diff/h100_runs/a/trace.json.gz")
SIZE = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "long": 8, "int": 4,
        "bool": 1}


def raw(rel: str) -> dict:
    return orjson.loads(gzip.decompress(shared_trace(rel).read_bytes()))


def inputs_of(args: dict) -> Inputs:
    dims = tuple(d if d else None for d in args["Input Dims"])
    return Inputs(dims, tuple(args["Input type"]), tuple(args.get("Concrete Inputs", ())))


# ----- the formulas, written out here -------------------------------------------------------------
def expected(name: str, args: dict) -> tuple[str, int, int] | None:
    """(family, FLOPs, bytes) of the ops the shared traces hold, from the docs' formulas."""
    d, t = args["Input Dims"], args["Input type"]
    n = math.prod
    if name in ("aten::mm", "aten::addmm", "aten::bmm"):
        a, b = (d[1], d[2]) if name == "aten::addmm" else (d[0], d[1])
        es = SIZE[t[1] if name == "aten::addmm" else t[0]]
        batch = a[0] if name == "aten::bmm" else 1
        m, k, nn = a[-2], a[-1], b[-1]
        bias = name == "aten::addmm"
        flops = batch * 2 * m * nn * k + (m * nn if bias else 0)
        moved = batch * (m * k + k * nn + m * nn) * es + (n(d[0]) * es if bias else 0)
        return "gemm", flops, moved
    if name == "aten::_flash_attention_forward":  # q, k, v as [B, S, H, D]; causal halves
        (b, s, h, dh), (_, skv, hkv, _) = d[0], d[1]
        causal = args["Concrete Inputs"][8] == "True"
        flops = 4 * b * h * s * skv * dh // (2 if causal else 1)
        return "attention", flops, (b * s * h * dh * 2 + b * skv * hkv * dh * 2) * SIZE[t[0]]
    if name in ("aten::mul", "aten::add", "aten::sub", "aten::div_", "aten::add_"):
        tensors = [i for i, ty in enumerate(t) if ty in SIZE]
        shape = [max(x) for x in zip(*[[1] * (4 - len(d[i])) + d[i] for i in tensors])]
        out = n(shape)
        return "elementwise", out, sum(n(d[i]) * SIZE[t[i]] for i in tensors) + out * SIZE[t[tensors[0]]]
    if name in ("aten::pow", "aten::silu", "aten::neg", "aten::rsqrt", "aten::gelu", "aten::clamp_min",
                "aten::cos", "aten::sin"):
        return "elementwise", n(d[0]), 2 * n(d[0]) * SIZE[t[0]]
    if name == "aten::eq":  # against a Scalar (no tensor): the tensor read, a bool written
        return "elementwise", n(d[0]), n(d[0]) * SIZE[t[0]] + n(d[0])
    if name in ("aten::mean", "aten::sum"):
        if "Concrete Inputs" not in args:
            return None  # which dims were reduced is not recorded
        dims = json.loads(args["Concrete Inputs"][1])
        out = n(d[0]) // n(d[0][i] for i in dims)
        return "reduction", n(d[0]), (n(d[0]) + out) * SIZE[t[0]]
    if name == "aten::all":
        return "reduction", n(d[0]), (n(d[0]) + 1) * SIZE[t[0]]
    if name == "aten::copy_":
        return "copy", 0, n(d[1]) * SIZE[t[1]] + n(d[0]) * SIZE[t[0]]
    if name == "aten::index_select":  # indices read, each row read and written
        row = n(d[0]) // d[0][int(args["Concrete Inputs"][1])]
        return "embedding", 0, n(d[2]) * SIZE[t[2]] + 2 * n(d[2]) * row * SIZE[t[0]]
    if name == "aten::native_layer_norm":  # 5 per element; in, out, weight, bias
        return "norm", 5 * n(d[0]), 2 * n(d[0]) * SIZE[t[0]] + (n(d[2]) + n(d[3])) * SIZE[t[2]]
    if name == "aten::_softmax":
        return "softmax", 3 * n(d[0]), 2 * n(d[0]) * SIZE[t[0]]
    return None


def launching_ops(rel: str) -> list[dict]:
    """Every CPU op that is the innermost one around a launch of GPU work (a raw walk of the JSON)."""
    events = [e for e in raw(rel)["traceEvents"] if e.get("ph") == "X"]
    gpu = {e["args"].get("correlation") for e in events
           if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    threads = defaultdict(list)
    for e in events:
        if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver"):
            threads[(e["pid"], e["tid"])].append(e)
    found = {}
    for evs in threads.values():
        stack: list[dict] = []
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if e["cat"] == "cpu_op":
                stack.append(e)
            elif stack and e["args"].get("correlation") in gpu:
                found[id(stack[-1])] = stack[-1]
    return list(found.values())


@pytest.mark.parametrize("rel", WITH_SHAPES)
def test_every_family_equals_the_formulas(rel: str) -> None:
    """Each op of the trace with a formula here: the model gives the same family, FLOPs and bytes."""
    checked = defaultdict(int)
    for e in raw(rel)["traceEvents"]:
        if e.get("cat") != "cpu_op" or "Input Dims" not in e.get("args", {}):
            continue
        want = expected(e["name"], e["args"])
        if want is None:
            continue
        got = model(e["name"], inputs_of(e["args"]))
        assert got is not None and (got.family, got.flops, got.bytes) == want, (e["name"], e["args"])
        checked[want[0]] += 1
    assert checked["gemm"], checked
    if rel == QWEN:
        assert set(checked) >= {"gemm", "attention", "elementwise", "reduction", "copy", "embedding"}


def test_hand_shapes_for_the_families_the_traces_lack() -> None:
    """Convolution forward and backward, attention backward, RMS norm, fill, linear: shapes by hand."""
    conv = model("aten::convolution", Inputs(
        ((8, 3, 32, 32), (16, 3, 3, 3), (16,)) + (None,) * 6,
        ("float",) * 3 + ("ScalarList",) * 3 + ("Scalar",) * 3,
        ("", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1")))
    out = 8 * 16 * 32 * 32  # padding 1, stride 1: same size
    assert (conv.family, conv.flops, conv.bytes) == ("conv", 2 * out * 3 * 9 + out,
                                                     (8 * 3 * 1024 + 16 * 27 + out + 16) * 4)
    bwd = model("aten::convolution_backward", Inputs(
        ((8, 16, 32, 32), (8, 3, 32, 32), (16, 3, 3, 3)) + (None,) * 8, ("c10::BFloat16",) * 3 + ("",) * 8,
        ("", "", "", "[16]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, True]")))
    assert bwd.flops == 2 * (2 * out * 27) + out
    assert bwd.bytes == 2 * (2 * (out + 16 * 27 + 8 * 3 * 1024) + out + 16)
    q = (2, 8, 128, 64)  # [B, H, S, D]
    att = model("aten::_scaled_dot_product_flash_attention_backward", Inputs(
        (q, q, q, q) + (None,) * 11, ("c10::BFloat16",) * 4 + ("",) * 11, ("",) * 11 + ("True",)))
    assert att.flops == 2 * 4 * 2 * 8 * 128 * 128 * 64 // 2  # twice the forward, causal halves
    assert att.bytes == 2 * 8 * 128 * 64 * 7 * 2
    rms = model("aten::_fused_rms_norm", Inputs(((4, 10, 512), None, (512,), None),
                                               ("c10::BFloat16", "ScalarList", "c10::BFloat16", "Scalar"),
                                               ("", "[512]", "", "1e-6")))
    assert (rms.flops, rms.bytes) == (4 * 20480, 2 * 20480 * 2 + 512 * 2)
    fill = model("aten::fill_", Inputs(((1000,), None), ("float", "Scalar"), ("", "0")))
    assert (fill.family, fill.flops, fill.bytes) == ("copy", 0, 4000)
    lin = model("aten::linear", Inputs(((4, 7, 64), (32, 64), (32,)), ("float",) * 3, ("",) * 3))
    assert lin.flops == 2 * 28 * 32 * 64 + 28 * 32 and lin.kind == "fp32_matrix"
    half = ("c10::Half", "c10::Half")
    where = model("aten::where", Inputs(((8, 16), (8, 16), ()), ("bool", *half), ("",) * 3))
    assert (where.flops, where.bytes, where.kind) == (128, 128 + 256 + 2 + 256, "fp16_vector")
    assert model("aten::cat", Inputs((((1, 2), (1, 2)), None), ("TensorList", "Scalar"), ("", "0"))) is None


@pytest.fixture(scope="module")
def qwen():
    return traceaug.efficiency(shared_trace(QWEN), progress=False)


def test_qwen_totals_equal_the_formulas_on_the_launching_ops(qwen) -> None:
    """Per family, FLOPs and bytes equal the formulas over the ops that launched GPU work (raw walk), and the
    groups' GPU time adds up to every kernel, copy and set of the trace."""
    want = defaultdict(lambda: [0, 0, 0])
    for e in launching_ops(QWEN):
        found = expected(e["name"], e["args"]) if "Input Dims" in e["args"] else None
        if found:
            fam, flops, moved = found
            want[fam][0] += 1
            want[fam][1] += flops
            want[fam][2] += moved
    fams = qwen.families.set_index("family")
    for fam, (count, flops, moved) in want.items():
        got = fams.loc[fam]
        assert (got["count"], got["flops"], got["bytes"]) == (count, flops, moved), fam
    gpu = sum(round(e["dur"] * 1000) for e in raw(QWEN)["traceEvents"]
              if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert qwen.groups["total_ns"].sum() == gpu


def test_gemm_flops_equal_a_scan_of_input_dims(qwen) -> None:
    """Every aten::mm / addmm / bmm of the raw JSON: 2·M·N·K (+ M·N for addmm's bias), summed."""
    total = 0
    for e in raw(QWEN)["traceEvents"]:
        if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm", "aten::bmm"):
            d = e["args"]["Input Dims"]
            a, b = (d[1], d[2]) if e["name"] == "aten::addmm" else (d[0], d[1])
            batch = a[0] if len(a) == 3 else 1
            total += batch * 2 * a[-2] * a[-1] * b[-1] + (a[-2] * b[-1] if e["name"] == "aten::addmm" else 0)
    assert qwen.families.set_index("family").loc["gemm", "flops"] == total


def test_qwen_roofline_and_mfu(qwen) -> None:
    """H100 SXM peaks (bf16 989.5 TFLOP/s, 3.35 TB/s): a GEMM group's roofline time and bound, and MFU =
    the step's FLOPs at the peak of their kind over the step's time."""
    g = qwen.groups[(qwen.groups["name"] == "aten::mm")
                    & (qwen.groups["shapes"] == "[[8944, 1024], [1024, 2816]]")]
    row = g.iloc[0]
    flops, moved = 2 * 8944 * 1024 * 2816, (8944 * 1024 + 1024 * 2816 + 8944 * 2816) * 2
    best = max(flops / 989.5e3, moved / 3350)  # ns
    assert row["bound"] == "compute" and row["roofline_ns"] == pytest.approx(best * row["count"])
    assert row["roofline_pct"] == pytest.approx(best * row["count"] / row["total_ns"] * 100)
    assert row["tflops"] == pytest.approx(flops * row["count"] / row["total_ns"] / 1e3)
    step = qwen.steps.iloc[0]
    assert 0 < step["mfu_pct"] < 100 and "gemm" in step["families"]


@pytest.mark.parametrize("rel", ("kineto/vllm_decode_cudagraph.json.gz", "kineto/mi250_rocm62.json.gz",
                                 *WITH_SHAPES[1:]))
def test_every_shared_trace_with_shapes_runs(rel: str) -> None:
    res = traceaug.efficiency(shared_trace(rel), progress=False)
    assert len(res.groups) and len(res.families)
    gpu = sum(round(e["dur"] * 1000) for e in raw(rel)["traceEvents"]
              if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X")
    assert res.groups["total_ns"].sum() == pytest.approx(gpu, abs=len(res.groups))  # nothing lost
    if "vllm" in rel:  # no name: an MI300X by its 304 CUs, 192 GiB, cc 9.4, and said so
        assert any("MI300X identified by properties" in n for n in res.notes)
        assert "roofline_pct" in res.families.columns


# Tensor figures as the datasheets print them, with 2:4 sparsity (TFLOP/s, TOP/s; read 2026-11-29 on the
# pages each row's "checked" names): the table's dense figure is half of each.
SPARSE = {"H100 SXM5 80GB": {"tf32_matrix": 989, "bf16_matrix": 1979, "fp16_matrix": 1979, "fp8_matrix": 3958,
                             "int8_matrix": 3958},
          "H100 PCIe 80GB": {"tf32_matrix": 756, "bf16_matrix": 1513, "fp16_matrix": 1513, "fp8_matrix": 3026,
                             "int8_matrix": 3026},
          "B200 (HGX B200, per GPU)": {"tf32_matrix": 2200, "bf16_matrix": 4500, "fp16_matrix": 4500,
                                       "fp8_matrix": 9000, "int8_matrix": 9000},
          "L4": {"tf32_matrix": 120, "bf16_matrix": 242, "fp16_matrix": 242, "fp8_matrix": 485,
                 "int8_matrix": 485},
          **dict.fromkeys(("H200 SXM 141GB", "GH200 96GB HBM3", "GH200 144GB HBM3e"),
                          {"tf32_matrix": 989, "bf16_matrix": 1979, "fp16_matrix": 1979, "fp8_matrix": 3958,
                           "int8_matrix": 3958})}


def test_peak_table_rows_cite_a_datasheet() -> None:
    """Every row cites its datasheet and says where its figures were checked; the keys it could not confirm
    are its own; dense tensor figures are the sheet's sparse ones halved."""
    from importlib import resources

    rows = json.loads(resources.files("traceaug").joinpath("data/peaks.json").read_text())["devices"]
    for r in rows:
        assert r["source"].startswith("https://") and r["names"] and r["memory_gbps"] > 0, r["device"]
        figures = {k for k, v in r.items() if isinstance(v, (int, float)) and k != "per_device"}
        unconfirmed = set(r.get("unconfirmed", ()))
        assert isinstance(r["checked"], str) and unconfirmed <= figures, r["device"]
        assert "https://" in r["checked"] or unconfirmed == figures, r["device"]  # no page: none confirmed
    by_device = {r["device"]: r for r in rows}
    for device, sparse in SPARSE.items():
        assert "sparse/2" in by_device[device]["checked"]
        assert {k: by_device[device][k] for k in sparse} == {k: v / 2 for k, v in sparse.items()}, device
    named = {n for r in rows for n in r["names"]}
    for needed in ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB",
                   "NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200",
                   "NVIDIA GH200 480GB", "NVIDIA B200", "NVIDIA L4", "NVIDIA L40S", "Tesla V100-SXM2-32GB",
                   "AMD Instinct MI250X", "AMD Instinct MI300X", "AMD Instinct MI325X",
                   "AMD Instinct MI355X"):
        assert needed in named


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_unknown_device_has_no_percent_until_peaks_are_given(tmp_path) -> None:
    """A100-PG509-200 is in no table: no % columns and one line saying how; ``--peaks`` adds it."""
    src = str(shared_trace("kineto/diff/h100_runs/a/trace.json.gz"))
    peaks = tmp_path / "peaks.json"
    peaks.write_text(json.dumps({"devices": [{"names": ["NVIDIA H100 80GB HBM3"], "memory_gbps": 1000,
                                              "fp32_vector": 10, "tf32_matrix": 100}]}))
    given = cli("efficiency", src, "--peaks", str(peaks), "--format", "json")
    assert given.exit_code == 0, given.output
    data = orjson.loads(given.stdout)
    assert data["devices"]["0"]["source"] == str(peaks)
    shipped = orjson.loads(cli("efficiency", src, "--format", "json").stdout)
    pct = {r["family"]: r["roofline_pct"] for r in data["families"]}
    base = {r["family"]: r["roofline_pct"] for r in shipped["families"]}
    assert pct["elementwise"] == pytest.approx(base["elementwise"] * 3350 / 1000, rel=1e-6)  # memory bound
    unknown = tmp_path / "unknown.json"
    text = json.loads(gzip.decompress(shared_trace("kineto/diff/h100_runs/a/trace.json.gz").read_bytes()))
    for p in text["deviceProperties"]:
        p["name"] = "Some Future GPU"
    unknown.write_text(json.dumps(text))
    res = cli("efficiency", str(unknown))
    assert res.exit_code == 0, res.output
    notes = [line for line in res.stdout.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "--peaks FILE" in notes[0] and "'Some Future GPU'" in notes[0]
    assert "roofline_pct" not in res.stdout and "mfu_pct" not in res.stdout
    assert " compute " not in res.stdout and " memory " not in res.stdout  # no bound
    assert "tflops" in res.stdout  # the figures stay
    bad = tmp_path / "bad.json"
    bad.write_text('{"devices": [{"names": ["x"]}]}')
    res = cli("efficiency", src, "--peaks", str(bad))
    assert res.exit_code != 0 and "bad.json: not a peak table" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_out_has_the_lane_and_counters(tmp_path) -> None:
    """OUT: one lane slice per modelled op instance on ``Efficiency stream N`` threads with its figures in
    args, achieved TFLOP/s and TB/s counters; every input event kept."""
    src = shared_trace(QWEN)
    out = tmp_path / "q.json.gz"
    res = cli("efficiency", str(src), str(out))
    assert res.exit_code == 0, res.output
    before = raw(QWEN)["traceEvents"]
    after = orjson.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    lane = [e for e in after if e.get("cat") == "efficiency"]
    counters = [e for e in after if e.get("ph") == "C" and e["name"] in ("Achieved TFLOP/s", "Achieved TB/s")]
    modelled = traceaug.efficiency(src, progress=False).groups
    n = int(modelled.loc[modelled["flops"].notna(), "count"].sum())
    assert len(lane) == n and counters
    assert all(str(e["tid"]).startswith("Efficiency stream ") and "flops" in e["args"] for e in lane)
    assert any(e["args"].get("bound") == "compute" for e in lane)
    assert len(after) >= len(before) + n + len(counters)
    with traceaug.load(out, kind="full") as t:
        dropped = t.query("SELECT value FROM stats WHERE name = 'slice_drop_overlapping_complete_event'")
        assert dropped.empty or int(dropped["value"].sum()) == 0


def test_a_trace_without_gpu_ops_says_so() -> None:
    res = cli("efficiency", str(shared_trace("kineto/cpu_only_gloo.json.gz")))
    assert res.exit_code == 0, res.output
    assert [line for line in res.stdout.splitlines() if line.startswith("note:")] == [
        "note: no GPU op in this trace: nothing ran on a GPU to measure"]
