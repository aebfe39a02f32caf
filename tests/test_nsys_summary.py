"""``traceaug summary``: the GPU Performance Analyzer's published figures for its two example
configs, a trace whose answer is known by construction (estimate and measured non-hidden time),
nsys exports as input, and one-line errors naming the file."""

from __future__ import annotations

import json
import shutil

import orjson
import pytest
from click.testing import CliRunner
from conftest import shared_trace

import traceaug
from traceaug.analysis import gpa_summary as gpa
from traceaug.cli import main
from traceaug.render.gpa_text import render_text


def _run(*args):
    r = CliRunner().invoke(main, ["summary", *map(str, args)])
    return r


def _json(*args) -> list[dict]:
    r = _run(*args, "--format", "json")
    assert r.exit_code == 0, r.output
    return orjson.loads(r.stdout)["rows"]


def _rows(table: dict) -> dict:
    return {n: (round(t / 1e6, 2), i) for n, t, i in zip(table["name"], table["per_iter_ns"],
                                                    table["per_iter_instances"])}


def test_llama2_70b_published_figures():
    cfg = shared_trace("nsys/gpa/llama2-70B_config.json")
    csv_run, rep = _json("--config", cfg)
    k = csv_run["kernel"]
    assert (round(k["per_iter_ns"] / 1e6, 3), k["per_iter_instances"]) == (7947.172, 7877)
    assert (round(k["total_ns"] / 1e6, 3), k["instances"]) == (39735.860, 39385)
    classes = _rows(csv_run["classes"])
    assert classes == {"others": (79.53, 1518), "gemm": (6830.11, 1363), "fmha": (555.79, 480),
                       "fusion": (481.73, 4516)}
    assert _rows(csv_run["nccl"]) == {"AllGather": (2343.77, 161), "ReduceScatter": (924.66, 79),
                                      "AllReduce": (7.23, 4)}
    assert _rows(csv_run["mem"]) == {"[CUDA memcpy D2D]": (30.66, 181), "[CUDA memset]": (8.57, 1527),
                                     "[CUDA memcpy H2D]": (0.01, 3)}
    # its NVTX CSV is not provided: said, and the rest still printed
    assert "nvtx" not in csv_run and any("nvtx_gpu_proj_trace.csv: no such file" in n
                                         for n in csv_run["notes"])
    assert "nsys export --type sqlite" in rep["skipped"] and rep["title"] == "Llama2-70B-From-NSYS-REP"
    text = _run("--config", cfg).stdout
    for figure in ("Kernel time per iteration: 7947.172 (ms)", "Kernel instances per iteration: 7877",
                   "NCCL time per iteration: 3275.659 (ms)", "skipped:"):
        assert figure in text


def test_gpt5b_fp8_published_figures():
    cfg = shared_trace("nsys/gpa/gpt5b_fp8_config.json")
    (res,) = _json("--config", cfg)
    k = res["kernel"]
    assert (round(k["per_iter_ns"] / 1e6, 3), k["per_iter_instances"]) == (307.620, 3355)
    classes = _rows(res["classes"])
    assert {c: classes[c] for c in ("fp8_gemm", "fusion", "other_gemm", "cast_transpose")} == {
        "fp8_gemm": (109.21, 360), "fusion": (125.56, 1899), "other_gemm": (27.49, 199),
        "cast_transpose": (24.26, 432)}
    n = res["nccl_total"]
    assert (round(n["per_iter_ns"] / 1e6, 3), n["per_iter_instances"]) == (117.652, 533)
    assert _rows(res["nccl"]) == {"AllGather": (63.38, 248), "ReduceScatter": (35.34, 172),
                                  "AllReduce": (18.40, 111), "SendRecv": (0.53, 2)}
    assert _rows(res["mem"])["[CUDA memcpy DtoD]"] == (42.11, 163)
    v = res["nvtx"]
    assert (v["count"], round(v["mean_ns"] / 1e6, 3)) == (5, 404.640)
    assert round(v["non_hidden_per_range_ns"] / 1e6, 3) == 97.020
    assert round(v["non_hidden_per_range_pct"], 2) == 23.98
    text = _run("--config", cfg).stdout
    assert "Estimated non-hidden NCCL, mem ops and bubble time per range: 97.020 (ms)" in text
    assert "(23.98 %)" not in text and "23.98 (%)" in text


def test_csvs_on_the_command_line_and_overrides(tmp_path):
    """The same CSVs given as INPUTs (any order) with --iters/--gpus/--iter-tag/--class-map."""
    ex = shared_trace("nsys/gpa/example")
    cfg = json.loads(shared_trace("nsys/gpa/gpt5b_fp8_config.json").read_text())
    cmap = tmp_path / "map.json"
    cmap.write_text(json.dumps(cfg["kernel_to_class_map"]))
    files = [ex / "demo_nvtx_gpu_proj_trace.csv", ex / "demo_cuda_gpu_mem_time_sum.csv",
             ex / "demo_cuda_gpu_kern_sum.csv"]
    (res,) = _json(*files, "--class-map", cmap, "--iters", 5, "--iter-tag", "Train_step")
    assert round(res["kernel"]["per_iter_ns"] / 1e6, 3) == 307.620
    assert round(res["nvtx"]["non_hidden_per_range_ns"] / 1e6, 3) == 97.020
    (half,) = _json(*files, "--class-map", cmap, "--iters", 5, "--gpus", 2, "--iter-tag", "Train_step")
    assert half["kernel"]["per_iter_ns"] == pytest.approx(res["kernel"]["per_iter_ns"] / 2)
    # without a class map: traceaug's default classes (tests/test_summary_inputs.py)
    (plain,) = _json(ex / "demo_cuda_gpu_kern_sum.csv", "--iters", 5)
    assert list(plain["classes"]["name"]) == ["others", *(c for c, _ in gpa.DEFAULT_CLASSES)]
    assert plain["kernel"]["total_ns"] == res["kernel"]["total_ns"]


def test_older_gpukernsum_layout(tmp_path):
    """The older report names columns differently (Calls, Total Time, no unit): read by name."""
    f = tmp_path / "old_gpukernsum.csv"
    f.write_text("Time(%),Total Time,Calls,Average,Minimum,Maximum,Name\n"
                 "60.0,3000,6,500.0,400,600,xmma_gemm_kernel\n"
                 "40.0,2000,4,500.0,400,600,ncclKernel_AllReduce_RING_LL_Sum_float\n")
    (res,) = _json(f, "--iters", 2, "--class-map", _map(tmp_path, {"gemm": "GEMM"}))
    assert _rows(res["classes"]) == {"others": (0.0, 0), "gemm": (0.0, 3)}
    assert res["classes"]["total_ns"][1] == 3000 and res["nccl"]["name"] == ["AllReduce"]


def _map(tmp_path, mapping):
    p = tmp_path / "m.json"
    p.write_text(json.dumps(mapping))
    return p


def _known_trace(path):
    """One iteration range [0, 1000) µs launching three kernels: compute at [100, 300) and
    [200, 400) µs (union 300 µs, sum 400 µs), NCCL at [400, 900) µs; a second range launches
    nothing. Projected window [100, 900): 800 µs; the Analyzer's estimate 800 - 400 = 400 µs;
    measured: 800 - 300 = 500 µs."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    for corr, (ts, dur, name) in enumerate([(100, 200, "gemm_a"), (200, 200, "gemm_b"),
                                            (400, 500, "ncclKernel_AllGather_RING")], start=1):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": 10 * corr, "dur": 5, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7 + (corr == 3),
                   "ts": ts, "dur": dur, "args": {"correlation": corr, "device": 0,
                                                  "stream": 7 + (corr == 3)}})
    path.write_bytes(orjson.dumps({"traceEvents": ev}))


def test_measured_non_hidden_known_answer(tmp_path):
    trace = tmp_path / "known.json"
    _known_trace(trace)
    (res,) = _json(trace, "--iter-tag", "step", "--class-map", _map(tmp_path, {"gemm": "gemm"}))
    assert res["iters"] == 1
    assert res["nvtx"]["count"] == 1 and res["nvtx"]["mean_ns"] == 800_000
    assert res["nvtx"]["non_hidden_per_range_ns"] == pytest.approx(400_000)
    m = res["measured"]
    assert m["per_range"]["start"] == [100_000] and m["per_range"]["end"] == [900_000]
    assert m["per_range"]["compute_ns"] == [300_000] and m["per_range"]["non_hidden_ns"] == [500_000]
    assert m["non_hidden_per_range_ns"] == 500_000 and m["non_hidden_pct"] == 62.5
    assert _rows(res["nccl"]) == {"AllGather": (0.5, 1)}
    text = _run(trace, "--iter-tag", "step").stdout
    assert "Measured non-hidden NCCL, mem ops and bubble time per range: 0.500 (ms)" in text
    assert "Estimated non-hidden NCCL, mem ops and bubble time per range: 0.400 (ms)" in text


def test_union_and_coverage():
    s, e = gpa.union(gpa.np.array([5, 0, 2, 20]), gpa.np.array([8, 3, 4, 25]))
    assert s.tolist() == [0, 5, 20] and e.tolist() == [4, 8, 25]
    got = gpa.covered_before(s, e, gpa.np.array([0, 2, 6, 10, 22, 30]))
    assert got.tolist() == [0, 2, 5, 7, 9, 12]


def test_nsys_export_input():
    """The saxpy export: 5 `saxpy` ranges, each launching one kernel: the projected window is
    that kernel, so nothing is left unhidden; kernel time equals the export's own sum."""
    src = shared_trace("nsys/a100_saxpy_mpi_rank0.sqlite")
    (res,) = _json(src, "--iter-tag", "saxpy")
    assert res["iters"] == 5 and res["nvtx"]["count"] == 5
    assert res["kernel"]["total_ns"] == 88_573_480  # SUM(end - start) of the 5 kernels, exact ns
    assert res["kernel"]["per_iter_instances"] == 1
    assert res["measured"]["non_hidden_total_ns"] == 0
    assert _rows(res["mem"]) == {"[CUDA memcpy HtoD]": (37.2, 2), "[CUDA memcpy DtoH]": (19.74, 1)}


@pytest.mark.parametrize("make, needle", [
    (lambda d: (d / "k.csv").write_text("Time (%),Total Time (ns),Instances,Name\n1,abc,3,k\n"),
     "k.csv: line 2: Total Time is 'abc', not a number"),
    (lambda d: (d / "k.csv").write_text("Time (%),Total Time (ns),Instances,Name\n1,5\n"),
     "k.csv: line 2: 2 fields"),
    (lambda d: (d / "k.csv").write_text("Time (%),Total Time (ns),Instances,Name\n1,5,2.5,k\n"),
     "k.csv: line 2: Instances is '2.5', not a count"),
    (lambda d: (d / "k.csv").write_text("a,b,c\n1,2,3\n"), "k.csv: not an nsys stats CSV"),
    (lambda d: (d / "k.csv").write_text(""), "k.csv: not an nsys stats CSV"),
])
def test_malformed_csv_one_line(tmp_path, make, needle):
    make(tmp_path)
    r = _run(tmp_path / "k.csv")
    assert r.exit_code == 1 and needle in r.output and r.output.count("\n") == 1
    assert r.output.startswith("traceaug: error: ")


def test_config_errors_name_the_file(tmp_path):
    src = shared_trace("nsys/gpa/gpt5b_fp8_config.json")
    ex = shared_trace("nsys/gpa/example")
    cfg = json.loads(src.read_text())
    (tmp_path / "example").mkdir()
    shutil.copy(ex / "demo_cuda_gpu_mem_time_sum.csv", tmp_path / "example")
    moved = tmp_path / "c.json"
    moved.write_text(json.dumps(cfg))  # paths relative to it: the kernel CSV is missing here
    r = _run("--config", moved)
    assert r.exit_code == 1 and r.output.count("\n") == 1
    assert f"{tmp_path / 'example' / 'demo_cuda_gpu_kern_sum.csv'}: no such file" in r.output
    bad_map = tmp_path / "bad.json"
    bad_map.write_text(json.dumps({**cfg, "kernel_to_class_map": ["gemm"]}))
    r = _run("--config", bad_map)
    assert r.exit_code == 1 and f"{bad_map}: kernel_to_class_map must be an object" in r.output
    r = _run("--config", src, "--class-map", _map(tmp_path, ["x"]))
    assert r.exit_code == 1 and "m.json: kernel_to_class_map must be an object" in r.output
    r = _run("--config", src, "--class-map", _map(tmp_path, {"gemm": "a", "xmma_gemm": "b"}))
    assert r.exit_code == 1 and "overlap" in r.output
    notjson = tmp_path / "n.json"
    notjson.write_text("{")
    r = _run("--config", notjson)
    assert r.exit_code == 1 and f"{notjson}: not a JSON config" in r.output
    r = _run(tmp_path / "run.nsys-rep")
    assert r.exit_code == 1 and "nsys export --type sqlite" in r.output


def test_render_text_matches_the_analyzer_layout():
    """Rows of the text report carry the same figures as the JSON (one renderer, one source)."""
    cfg = shared_trace("nsys/gpa/gpt5b_fp8_config.json")
    results = traceaug.summary(config=cfg)
    text = render_text(results)
    line = next(x for x in text.splitlines() if x.startswith("fp8_gemm"))
    assert line.split()[1:3] == ["109.21", "360"]


def test_kineto_trace_input_against_the_raw_json():
    """A real Kineto trace: ProfilerStep#* ranges are the iterations; kernel and NCCL totals equal
    sums over the raw JSON's kernel events (parsed here, outside the engine)."""
    import gzip

    path = shared_trace("kineto/a100_nccl_rank0_of2.json.gz")
    raw = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kernels = [e for e in raw if e.get("ph") == "X" and e.get("cat") == "kernel"]
    steps = {e["name"] for e in raw if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#")}
    nccl = [round(e["dur"] * 1000) for e in kernels if "nccl" in e["name"].lower()]
    compute = [round(e["dur"] * 1000) for e in kernels if "nccl" not in e["name"].lower()]
    (res,) = _json(path)
    assert res["iters"] == len(steps) == 3 and res["nvtx"]["count"] == 3
    assert res["kernel"]["instances"] == len(compute) and res["nccl_total"]["instances"] == len(nccl) > 0
    assert res["kernel"]["total_ns"] == sum(compute)
    assert res["nccl_total"]["total_ns"] == sum(nccl)
    m = res["measured"]
    assert m["count"] == 3 and all(0 <= c <= w for c, w in zip(m["per_range"]["compute_ns"],
                                                                m["per_range"]["window_ns"]))
