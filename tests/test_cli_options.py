"""The CLI options README documents, each changing a real value (issue 23 item 14): kernels
``--type`` / ``--wide``, gaps ``--sort``, breakdown ``--kernel-wait-us``, launches
``--runtime-cutoff``, critical-path ``--max-gap-us`` / ``--top`` / ``--instance``. Each trace is
built here; each expected value is computed from its raw JSON, never by traceaug."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from conftest import TESTDATA
from rawjson import load_raw, ns

from traceaug.cli import main

BASE = 1_700_000_000_000_000  # epoch µs
HOST = {"pid": 100, "tid": 100}
LONG = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_16x3_nt_align4>(" + "x" * 60 + ")"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
COPY = "Memcpy HtoD (Pinned -> Device)"
# (launch start, launch duration, GPU op name, category, GPU start, GPU duration), µs from BASE,
# all on stream 7. Gaps: 20 and 5 µs (their ops launched before the op before them ended: kernel
# waits under 30 µs), 50 µs (launched early too: "other" under 30, a kernel wait under 60) and
# two of 100 µs (launched after the op before them ended: host waits). Calls of 10 to 80 µs.
OPS = [
    (0, 10, LONG, "kernel", 100, 200),
    (20, 40, NCCL, "kernel", 320, 100),       # gap 20
    (70, 80, LONG, "kernel", 470, 200),       # gap 50
    (760, 10, COPY, "gpu_memcpy", 770, 30),   # gap 100, launched at 760 > 670
    (810, 10, LONG, "kernel", 900, 200),      # gap 100, launched at 810 > 800
    (820, 10, NCCL, "kernel", 1105, 100),     # gap 5
]


def write(path: Path, ops: list = OPS) -> Path:
    """ProfilerStep#1 over everything; each op launched by its own call (correlation i + 1)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", **HOST, "ts": BASE,
           "dur": 2000}]
    for i, (lt, ld, name, cat, ts, dur) in enumerate(ops):
        call = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel"
        args = {"correlation": i + 1, "device": 0, "stream": 7}
        if cat == "gpu_memcpy":
            args["bytes"] = 1 << 20
        ev += [{"ph": "X", "cat": "cuda_runtime", "name": call, **HOST, "ts": BASE + lt, "dur": ld,
                "args": {"correlation": i + 1}},
               {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": BASE + ts,
                "dur": dur, "args": args}]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def cli(*args: str) -> str:
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


def raw_ops(path: Path) -> tuple[list[dict], dict[int, dict]]:
    """GPU ops in start order and runtime calls by correlation, as the file holds them."""
    events = [e for e in load_raw(path)["traceEvents"] if e.get("ph") == "X"]
    gpu = sorted((e for e in events if e["cat"] in ("kernel", "gpu_memcpy")), key=lambda e: e["ts"])
    calls = {e["args"]["correlation"]: e for e in events if e["cat"] == "cuda_runtime"}
    return gpu, calls


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write(tmp_path / "options.json")


def test_kernels_type(trace: Path) -> None:
    """``--type comp|comm|mem`` keeps the ops of that type: by HTA's rules on the raw names."""
    gpu, _ = raw_ops(trace)
    want = {"comp": {LONG}, "comm": {e["name"] for e in gpu if e["name"].startswith("nccl")},
            "mem": {e["name"] for e in gpu if e["cat"] == "gpu_memcpy"}}
    for kind, names in want.items():
        rows = orjson.loads(cli("kernels", str(trace), "--type", kind, "--format", "json"))["kernels"]
        assert {r["name"] for r in rows} == names, kind
        assert sum(r["total_ns"] for r in rows) == sum(ns(e["dur"]) for e in gpu if e["name"] in names)


def test_kernels_wide(trace: Path) -> None:
    """The terminal cuts a long name with "…" to fit the table in 160 columns; ``--wide`` prints it
    whole, the one option for it (``--full-names`` did the same and is gone: refused, not ignored)."""
    assert len(LONG) > 80
    cut = cli("kernels", str(trace))
    assert LONG not in cut and max(map(len, cut.splitlines())) <= 160
    shown = cut[cut.index("void cutlass"):cut.index("…")]
    assert LONG.startswith(shown) and len(shown) >= 11
    assert LONG in cli("kernels", str(trace), "--wide")
    res = CliRunner().invoke(main, ["kernels", str(trace), "--full-names"])
    assert res.exit_code == 2 and "No such option '--full-names'" in res.output


def test_gaps_sort(trace: Path) -> None:
    """``--sort`` orders the transitions by that statistic of their gaps, largest first."""
    gpu, _ = raw_ops(trace)
    gaps: dict[tuple[str, str], list[int]] = {}
    for a, b in zip(gpu, gpu[1:]):
        gaps.setdefault((a["name"], b["name"]), []).append(
            max(ns(b["ts"]) - ns(a["ts"]) - ns(a["dur"]), 0))
    for sort, key in (("max", max), ("min", min), ("total", sum), ("count", len)):
        rows = orjson.loads(cli("gaps", str(trace), "--sort", sort, "--format", "json"))[
            "kernel transitions on a stream (gap after A before B)"]
        got = [(r["from"], r["to"]) for r in rows]
        want = sorted(gaps, key=lambda k: (-key(gaps[k]), f"{k[0]}\x00{k[1]}"))
        assert got == want, sort
    rows = orjson.loads(cli("gaps", str(trace), "--sort", "max", "--format", "json"))[
        "kernel transitions on a stream (gap after A before B)"]
    assert rows[0]["max_ns"] == max(max(v) for v in gaps.values())


def _idle(trace: Path, *extra: str) -> dict[str, int]:
    rows = orjson.loads(cli("breakdown", str(trace), "--format", "json", *extra))[
        "idle breakdown per stream (HTA's rules)"]
    return {r["category"]: r["idle_ns"] for r in rows}


def test_breakdown_kernel_wait_us(trace: Path) -> None:
    """HTA's rule from the raw JSON: a gap whose op was launched before the op before it ended
    is a kernel wait when shorter than ``--kernel-wait-us``, else other; launched after: a host
    wait. 30 µs (default) takes the 20 µs gap; 60 µs takes the 50 µs one too."""
    gpu, calls = raw_ops(trace)
    pairs = [(ns(b["ts"]) - ns(a["ts"]) - ns(a["dur"]),
              ns(calls[b["args"]["correlation"]]["ts"]) > ns(a["ts"]) + ns(a["dur"]))
             for a, b in zip(gpu, gpu[1:])]
    assert sorted(g for g, _ in pairs) == [5_000, 20_000, 50_000, 100_000, 100_000]
    for cutoff in (30, 60):
        got = _idle(trace, *(["--kernel-wait-us", str(cutoff)] if cutoff != 30 else []))
        assert got.get("kernel_wait", 0) == sum(g for g, host in pairs
                                                if not host and g < cutoff * 1000), cutoff
        assert got.get("other", 0) == sum(g for g, host in pairs if not host and g >= cutoff * 1000)
        assert got.get("host_wait", 0) == sum(g for g, host in pairs if host)


def test_launches_runtime_cutoff(trace: Path) -> None:
    """Runtime calls longer than ``--runtime-cutoff`` µs are the outliers (raw durations)."""
    _, calls = raw_ops(trace)
    for cutoff in (50, 30, 5):
        data = orjson.loads(cli("launches", str(trace), "--runtime-cutoff", str(cutoff),
                                "--format", "json"))
        want = {c for c, e in calls.items() if ns(e["dur"]) > cutoff * 1000}
        assert {r["correlation"] for r in data["runtime outliers"]} == want, cutoff
        assert data["launch summary"][0]["runtime_outliers"] == len(want)


# --- critical path ---------------------------------------------------------------------------

def _path(src: Path, out: Path, *extra: str) -> dict:
    return orjson.loads(cli("critical-path", str(src), str(out), "--summary-only", "--format",
                            "json", *extra))


def test_critical_path_max_gap_us(tmp_path: Path) -> None:
    """A kernel-to-kernel gap on a stream is a dependency only when shorter than
    ``--max-gap-us`` (0: any): testdata's kernel_gap trace has one 50 µs gap (raw JSON)."""
    src = TESTDATA / "critical_path" / "kernel_gap.json"
    k1, k2 = sorted((e for e in load_raw(src)["traceEvents"] if e.get("cat") == "kernel"),
                    key=lambda e: e["ts"])
    gap = ns(k2["ts"]) - ns(k1["ts"]) - ns(k1["dur"])
    assert gap == 50_000
    for option, want in (((), gap), (("--max-gap-us", "60"), gap), (("--max-gap-us", "0"), gap),
                         (("--max-gap-us", "40"), 0)):
        s = _path(src, tmp_path / "out.json", *option)
        got = dict(zip(s["categories"]["category"], s["categories"]["ns"]))
        assert got["kernel_gap"] == want, option


def regions(path: Path) -> Path:
    """Two ``region`` annotations on one thread: CPU ops A, B, C in the first; D, then a launch
    and its kernel, in the second."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "region", **HOST, "ts": BASE, "dur": 700},
          {"ph": "X", "cat": "cpu_op", "name": "A", **HOST, "ts": BASE + 10, "dur": 300},
          {"ph": "X", "cat": "cpu_op", "name": "B", **HOST, "ts": BASE + 320, "dur": 200},
          {"ph": "X", "cat": "cpu_op", "name": "C", **HOST, "ts": BASE + 530, "dur": 100},
          {"ph": "X", "cat": "user_annotation", "name": "region", **HOST, "ts": BASE + 1000,
           "dur": 600},
          {"ph": "X", "cat": "cpu_op", "name": "D", **HOST, "ts": BASE + 1010, "dur": 400},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **HOST, "ts": BASE + 1420,
           "dur": 10, "args": {"correlation": 1}},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": BASE + 1450, "dur": 100,
           "args": {"correlation": 1, "device": 0, "stream": 7}}]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_critical_path_instance(tmp_path: Path) -> None:
    """``--annotation region --instance K``: the K-th ``region`` in time is the window; its
    CPU ops, and only those, are on the path, each with its raw duration."""
    src = regions(tmp_path / "regions.json")
    raw = [e for e in load_raw(src)["traceEvents"]]
    spans = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in raw if e["name"] == "region")
    for k, inside in ((0, {"A", "B", "C"}), (1, {"D"})):
        s = _path(src, tmp_path / "out.json", "--annotation", "region", "--instance", str(k))
        lo, hi = spans[k]
        assert s["end_ns"] - s["start_ns"] == hi - lo, k
        cpu = {e: t for e, t in zip(s["top"]["event"], s["top"]["ns"]) if e in "ABCD"}
        assert cpu == {e["name"]: ns(e["dur"]) for e in raw if e["name"] in inside}, k


def test_critical_path_top(tmp_path: Path) -> None:
    """``--top N``: the N events with the most time on the path, most first; on the whole
    trace the CPU ops D (400 µs) and A (300 µs) by their raw durations."""
    src = regions(tmp_path / "regions.json")
    durations = {e["name"]: ns(e["dur"]) for e in load_raw(src)["traceEvents"]
                 if e.get("cat") == "cpu_op"}
    for n in (1, 2):
        s = _path(src, tmp_path / "out.json", "--top", str(n))
        want = sorted(durations.items(), key=lambda kv: -kv[1])[:n]
        assert list(zip(s["top"]["event"], s["top"]["ns"])) == want, n
