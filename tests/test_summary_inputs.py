"""``traceaug summary`` on hostile CSVs, configs and traces: one line naming the file, exit 1,
never a traceback or a wrapped sum; and a class map's cost linear in its entries."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import kineto_gen
import numpy as np
import pytest
from click.testing import CliRunner

from traceaug.analysis import gpa_summary as gpa
from traceaug.cli import main

HEAD = b"Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
BIG = b"9223372036854775000"  # below 2^63: two of them sum past it


def _summary(*args) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["summary", *map(str, args)])
    return r.exit_code, r.output


def _one_line_error(code: int, output: str, named: Path, needle: str) -> None:
    assert code == 1, output
    assert output.count("\n") == 1 and output.startswith(f"traceaug: error: {named}: "), output
    assert needle in output and "Traceback" not in output, output


@pytest.mark.parametrize(("rows", "needle"), [
    (b"50,1000,2,5,5,4,6,0,gemm_\xff\xfe\n", "not UTF-8 text (byte 0xff)"),
    (b"50,9223372036854775808,2,5,5,4,6,0,gemm\n", "Total Time is '9223372036854775808', more than"),
    (b"50,1e30,2,5,5,4,6,0,gemm\n", "Total Time is '1e30', more than a 64-bit integer"),
    (b"50,1e999999999,2,5,5,4,6,0,gemm\n", "Total Time is '1e999999999', more than"),
    (b"50,1e999999,2,5,5,4,6,0,gemm\n", "Total Time is '1e999999', more than"),  # no int of 1e6 digits
    (b"50,1000,18446744073709551615,5,5,4,6,0,gemm\n", "Instances is '18446744073709551615'"),
    (b"50," + BIG + b",2,5,5,4,6,0,gemm_a\n50," + BIG + b",2,5,5,4,6,0,gemm_b\n",
     "the Total Time column sums to 18,446,744,073,709,550,000, more than a 64-bit integer holds"),
])
def test_bad_csv_one_line(tmp_path: Path, rows: bytes, needle: str) -> None:
    csv = tmp_path / "k.csv"
    csv.write_bytes(HEAD + rows)
    _one_line_error(*_summary(csv), csv, needle)
    # the same file named by a config
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"inputs": [{"format": "csv", "nsys_csv_file_path": {"kernel_sum": "k.csv"}}]}))
    _one_line_error(*_summary("--config", cfg), csv, needle)


def test_two_huge_rows_never_print_a_negative_time(tmp_path: Path) -> None:
    csv = tmp_path / "k.csv"
    csv.write_bytes(HEAD + b"50," + BIG + b",2,5,5,4,6,0,a\n50," + BIG + b",2,5,5,4,6,0,b\n")
    code, out = _summary(csv, "--format", "json")
    assert code == 1 and '"per_iter_ns": -' not in out and "sums to" in out


@pytest.mark.parametrize(("args", "needle"), [
    ({"num_of_iters": 2**64 - 1}, "analysis_args.num_of_iters must be a whole number from 1 to "
                                  "2,147,483,647, not 18446744073709551615"),
    ({"num_of_gpus": 2**63}, "analysis_args.num_of_gpus must be a whole number from 1 to"),
])
def test_config_numbers_out_of_range(tmp_path: Path, args: dict, needle: str) -> None:
    (tmp_path / "k.csv").write_bytes(HEAD + b"50,1000,2,5,5,4,6,0,gemm\n")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"inputs": [{"format": "csv", "analysis_args": args,
                                           "nsys_csv_file_path": {"kernel_sum": "k.csv"}}]}))
    _one_line_error(*_summary("--config", cfg), cfg, needle)


def test_cli_iters_times_gpus_past_int64(tmp_path: Path) -> None:
    csv = tmp_path / "k.csv"
    csv.write_bytes(HEAD + b"50,1000,2,5,5,4,6,0,gemm\n")
    code, out = _summary(csv, "--iters", 2**63 - 1, "--gpus", 3)
    assert code == 1 and out.count("\n") == 1 and "more than 2^62" in out, out


@pytest.mark.parametrize("key", ["kernel_sum", "path"])
def test_config_path_with_a_nul_byte(tmp_path: Path, key: str) -> None:
    entry = ({"format": "csv", "nsys_csv_file_path": {"kernel_sum": "k\x00.csv"}} if key == "kernel_sum"
             else {"format": "trace", "path": "t\x00.json"})
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"inputs": [entry]}))
    _one_line_error(*_summary("--config", cfg), cfg, "holds a NUL byte")


def _projected_ms(events: list[dict]) -> tuple[float, float]:
    """From the raw JSON: (total NVTX range time, measured non-hidden time), in ms, of the
    ProfilerStep ranges, each projected onto the GPU ops whose launch (the first runtime call
    with the op's correlation id, an integer) began inside it; the non-hidden time is each
    window minus the compute kernels inside it (they never overlap here)."""
    calls: dict[int, float] = {}
    for e in events:
        c = e.get("args", {}).get("correlation")
        if e.get("cat") == "cuda_runtime" and type(c) is int:
            calls.setdefault(c, e["ts"])
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]
    total = hidden = 0.0
    for r in (e for e in events if e["name"].startswith("ProfilerStep#")):
        mine = [g for g in gpu if r["ts"] <= calls.get(g["args"]["correlation"], -1) < r["ts"] + r["dur"]]
        lo, hi = (min(g["ts"] for g in mine), max(g["ts"] + g["dur"] for g in mine)) if mine else (
            r["ts"], r["ts"] + r["dur"])
        total += hi - lo
        hidden += sum(g["dur"] for g in mine if g["cat"] == "kernel" and lo <= g["ts"] < hi)
    return total / 1e3, (total - hidden) / 1e3


def test_trace_with_a_string_correlation(tmp_path: Path) -> None:
    """A launch whose correlation id is "abc" (or 1e308) links nothing: summary reads the trace
    as every other command does (it used to refuse it alone), its kernel launched by no call."""
    for value in ("abc", 1e308):
        events = kineto_gen.events(3)
        launch = next(e for e in events if e["name"] == "cudaLaunchKernel")
        launch["args"]["correlation"] = value
        trace = kineto_gen.write(tmp_path / "t.json", kineto_gen.trace(events))
        r = CliRunner().invoke(main, ["summary", "--format", "json", str(trace)])
        assert r.exit_code == 0, r.output
        (got,) = json.loads(r.stdout)["rows"]
        total_ms, non_hidden_ms = _projected_ms(events)
        assert (total_ms, non_hidden_ms) == (1.0, 0.6)  # step 0: its copy alone (100 µs)
        assert got["nvtx"]["total_ns"] / 1e6 == pytest.approx(total_ms)
        assert got["measured"]["non_hidden_total_ns"] / 1e6 == pytest.approx(non_hidden_ms)
        for command in ("kernels", "gaps", "breakdown", "launches", "counters"):  # one verdict
            out = [str(tmp_path / "o.json")] if command == "counters" else []
            r = CliRunner().invoke(main, [command, str(trace), *out])
            assert r.exit_code == 0, (command, r.output)


def test_ranges_of_no_time(tmp_path: Path) -> None:
    """Every event 0 µs long: the ranges' shares are 0 %, as every share of no time is
    (a ZeroDivisionError traceback before)."""
    events = [{**e, "dur": 0} if "dur" in e else e for e in kineto_gen.events(3)]
    trace = kineto_gen.write(tmp_path / "t.json", kineto_gen.trace(events))
    r = CliRunner().invoke(main, ["summary", "--format", "json", str(trace)])
    assert r.exit_code == 0, r.output
    nvtx = json.loads(r.stdout)["rows"][0]["nvtx"]
    assert (nvtx["count"], nvtx["total_ns"]) == (3, 0)
    assert nvtx["non_hidden_per_range_pct"] == nvtx["non_hidden_total_pct"] == 0.0


# ----- a class map's cost ------------------------------------------------------------------

def _lines_run(fn, *args) -> int:
    """Python lines executed in traceaug's code while ``fn(*args)`` runs (deterministic work,
    not time)."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def call(frame, event, arg):
        return local if "/traceaug/" in frame.f_code.co_filename else None

    before = sys.gettrace()  # a coverage tool's, if any: put back after
    sys.settrace(call)
    try:
        fn(*args)
    finally:
        sys.settrace(before)
    return count


def _map(n: int) -> dict[str, str]:
    return {f"Kern{i:05d}x": f"c{i % 7}" for i in range(n)}


def _names(n: int) -> np.ndarray:
    return np.array([f"void kern{i:05d}x<float>" for i in range(0, n, 7)] + ["gemm"], dtype=object)


def test_class_map_work_grows_linearly() -> None:
    """Checking and applying a map of 2n entries takes about twice the work of n entries (all
    pairs of keys compared: four times)."""
    def work(n: int) -> int:
        return _lines_run(lambda: gpa.classify(_names(n), gpa.class_map(_map(n), "m.json")))

    small, large = work(400), work(800)
    assert large < 2.3 * small, (small, large)


def test_class_map_answers_as_the_analyzer() -> None:
    """Each name's class is that of the first key in map order that its lower-cased name
    contains (checked by brute force here); NCCL and unmatched names as the Analyzer says."""
    mapping = {"Gemm": "GEMM", "fmha": "attn", "_bwd": "Back", "xmma": "gemm"}
    names = np.array(["xmma_gemm_bwd", "fmha_bwd", "ncclKernel_gemm", "relu", "sm80_GEMM",
                      "flash_fmha", ""], dtype=object)
    lower = {k.lower(): v.lower() for k, v in mapping.items()}
    expect = []
    for n in names.tolist():
        hits = [v for k, v in lower.items() if k in n.lower()]
        expect.append("nccl" if "nccl" in n.lower() else hits[0] if hits else "others")
    assert gpa.classify(names, gpa.class_map(mapping, "m")).tolist() == expect
    with pytest.raises(gpa.TraceaugError, match="keys 'gemm' and 'xmma_gemm' overlap"):
        gpa.class_map({"gemm": "a", "b": "c", "xmma_gemm": "d"}, "m")
    with pytest.raises(gpa.TraceaugError, match="keys 'xmma_gemm' and 'gemm' overlap"):
        gpa.class_map({"xmma_gemm": "a", "b": "c", "gemm": "d"}, "m")


# ----- the default class map ---------------------------------------------------------------

KNOWN = {  # real kernel names (the shared traces and CSVs) and the class a reader expects
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1": "gemm",
    "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x128_64x3_nn_align8>(T1::Params)":
        "gemm",
    "void splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, false>": "gemm",
    "cudnn_generated_fmha_knob_26_64x64x128_1x4x1_kernel0_0": "attention",
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false>, true>": "attention",
    "void transformer_engine::layer_norm::ln_fwd_tuned_kernel<float>": "norm",
    "void transformer_engine::scaled_masked_softmax_warp_forward<__nv_bfloat16>": "norm",
    "void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda": "elementwise",
    "loop_add_multiply_fusion_2": "elementwise",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps>>":
        "reduction",
    "input_add_reduce_fusion_5": "reduction",
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>":
        "memory",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>": "memory",
    "loop_dynamic_update_slice_fusion_2_peeled_double_buffer": "memory",
    "ncclDevKernel_AllGather_RING_LL(ncclDevComm *, unsigned long, ncclWork *)": "nccl",
    "rccl_AllReduce_kernel": "communication",
    "fusion_132": "others",
}


def test_summary_without_a_map_uses_default_classes(tmp_path: Path) -> None:
    """No class map: kernels land in gemm / attention / norm / elementwise / reduction /
    communication / memory (each 1 µs × 2 here), not 100 % ``others``, and the note says so."""
    csv = tmp_path / "k.csv"
    rows = "".join(f'1,1000,2,500,500,500,500,0,"{n}"\n' for n in KNOWN)
    csv.write_bytes(HEAD + rows.encode())
    r = CliRunner().invoke(main, ["summary", str(csv), "--format", "json"])
    assert r.exit_code == 0, r.output
    (res,) = json.loads(r.stdout)["rows"]
    got = dict(zip(res["classes"]["name"], res["classes"]["instances"]))
    want: dict[str, int] = {}
    for cls in KNOWN.values():
        if cls != "nccl":
            want[cls] = want.get(cls, 0) + 2
    assert {c: n for c, n in got.items() if n} == want
    assert res["nccl"]["instances"] == [2]
    assert any("default map" in n for n in res["notes"])


def test_summary_of_a_trace_without_a_map_says_so() -> None:
    """A trace input gets the default map's note as a CSV input does (it printed none)."""
    trace = Path(__file__).resolve().parent.parent / "testdata" / "small_training.json.gz"
    r = CliRunner().invoke(main, ["summary", str(trace), "--format", "json"])
    assert r.exit_code == 0, r.output
    (res,) = json.loads(r.stdout)["rows"]
    assert any("default map" in n for n in res["notes"]), res["notes"]
