"""Graph replays attributed (``analysis.graph_replay``): with the capture, every replayed kernel gets the op
that captured it and the per-op GPU time sums to the replay's kernel time to the ns (checked against the
raw JSON of the shared vLLM and SGLang traces); by node id on a built CUDA trace; a clear line where not."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from click.testing import CliRunner
from conftest import shared_trace
from kineto_gen import BASE_US, METADATA, trace, write
from rawjson import load_raw, ns

import traceaug
import traceaug.runtime as runtime
from traceaug.analysis import graph_replay
from traceaug.cli import main

CASES = (("kineto/inference/vllm_decode_full/graph_execution.json.gz",
          "kineto/inference/vllm_decode_full/capture_traces", 421),
         ("kineto/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
          "kineto/inference/sglang_decode/capture_traces", 544))


def raw_replay(path) -> list[tuple[str, int]]:
    """(name, dur ns) of the kernels the graph launch replayed, in start order, from the raw JSON."""
    evs = load_raw(path)["traceEvents"]
    corr = {e["args"]["correlation"] for e in evs if e.get("name", "").endswith("GraphLaunch")}
    ks = sorted((e for e in evs if e.get("cat") == "kernel" and e["args"].get("correlation") in corr),
                key=lambda e: ns(e["ts"]))
    return [(e["name"], ns(e["dur"])) for e in ks]


def raw_capture(directory) -> list[tuple[str, str]]:
    """(kernel, innermost CPU op's name) of each launch call between BeginCapture and EndCapture, from the
    raw JSON of the file execution_details.json names."""
    return [(k, op["name"]) for k, op in raw_capture_ops(directory)]


def raw_capture_ops(directory) -> list[tuple[str, dict]]:
    """``raw_capture`` with the innermost CPU op's whole event (its args: the recorded shapes)."""
    name = json.loads((directory / "execution_details.json").read_text())[0]["file"]
    evs = load_raw(directory / name)["traceEvents"]
    begin = next(e for e in evs if e.get("name", "").endswith("StreamBeginCapture"))
    end = next(e for e in evs if e.get("name", "").endswith("StreamEndCapture"))
    where = (begin["pid"], begin["tid"])
    calls = sorted((e for e in evs if e.get("cat") == "cuda_runtime" and "Launch" in e["name"]
                    and (e["pid"], e["tid"]) == where and begin["ts"] < e["ts"] < end["ts"]),
                   key=lambda e: e["ts"])
    ops = [e for e in evs if e.get("cat") == "cpu_op" and (e["pid"], e["tid"]) == where]
    out = []
    for c in calls:
        holding = [o for o in ops if o["ts"] <= c["ts"] and c["ts"] + c["dur"] <= o["ts"] + o["dur"]]
        inner = max(holding, key=lambda o: (o["ts"], -o["dur"]))
        out.append((c["args"]["kernel"], inner))
    return out


@pytest.mark.parametrize("rel, capture, count", CASES)
def test_every_replayed_kernel_attributed_to_the_ns(rel, capture, count):
    path, directory = shared_trace(rel), shared_trace(capture)
    replay, captured = raw_replay(path), raw_capture(directory)
    assert len(replay) == len(captured) == count
    assert [n for n, _ in replay] == [k for k, _ in captured]
    want: dict[str, int] = defaultdict(int)
    for (_, dur), (_, op) in zip(replay, captured):
        want[op] += dur
    with runtime.using(capture=str(directory)), traceaug.load(path, kind="gpu_steps") as t:
        r = graph_replay.attribute(t)
    assert (r.replayed, r.attributed, r.problems) == (count, count, [])
    times = graph_replay.op_times(r)
    assert dict(zip(times["op"].tolist(), times["total"].tolist())) == want
    assert int(times["total"].sum()) == sum(d for _, d in replay)  # the replay's kernel time, to the ns
    out = CliRunner().invoke(main, ["info", str(path), "--capture", str(directory)])
    assert f"{count} of {count} graph-replayed kernels attributed to their ops" in out.output
    assert "step 0: decode, batch 32" in out.output


NO_CAPTURE = ("0 of 421 graph-replayed kernels attributed to their ops (no capture: profile the graph "
              "capture too (vLLM / SGLang capture traces) and pass it with --capture; per-op time, launch "
              "delay and the critical path through the graph are unreliable without it)")


def test_without_or_with_the_wrong_capture_it_says_so():
    path = shared_trace(CASES[0][0])
    out = CliRunner().invoke(main, ["info", str(path)])
    assert out.exit_code == 0
    assert "0 of 421 graph-replayed kernels attributed to their ops (no capture: profile the graph " \
           "capture too" in out.output
    for command in ("breakdown", "launches", "gaps"):  # what the per-op figures cannot tell, said in each
        out = CliRunner().invoke(main, [command, str(path), "--format", "json"])
        assert json.loads(out.output)["reliability"] == [{"rank": 0, "notes": NO_CAPTURE}], command
    out = CliRunner().invoke(main, ["critical-path", str(path), "--summary-only", "--format", "json"])
    assert json.loads(out.output)["reliability"] == NO_CAPTURE
    for command in ("launches", "critical-path"):
        out = CliRunner().invoke(main, [command, str(path), "--format", "json", "--capture",
                                        str(shared_trace(CASES[0][1])), "--summary-only"][
                                            :None if command == "critical-path" else -1])
        assert "reliability" not in json.loads(out.output), command
    wrong = shared_trace(CASES[1][1])
    out = CliRunner().invoke(main, ["info", str(path), "--capture", str(wrong)])
    assert out.exit_code == 0
    assert "0 of 421 graph-replayed kernels attributed" in out.output
    assert "replaying 421 kernels matches no captured graph (bs_32_rank0.json.gz: 544 captured " \
           "dispatches, 421 replayed)" in out.output


def test_bad_capture_list_is_one_line(tmp_path):
    path = shared_trace(CASES[0][0])
    (tmp_path / "execution_details.json").write_text("{not json")
    out = CliRunner().invoke(main, ["info", str(path), "--capture", str(tmp_path)])
    assert out.exit_code == 1 and out.output.count("\n") == 1
    assert f"{tmp_path / 'execution_details.json'}: not a capture list" in out.output


def cuda_trace(tmp_path):
    """A CUDA graph captured in the trace (aten::mm then aten::relu, node ids 11 and 12) and replayed by one
    cudaGraphLaunch whose kernels ran in the other order (relu's first): node ids, not order, decide."""
    t = BASE_US
    main_thread = {"pid": 1000, "tid": 1000}
    evs = [*METADATA,
           {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", **main_thread, "ts": t,
            "dur": 5, "args": {"correlation": 1}}]
    for i, (op, kernel, node) in enumerate((("aten::mm", "gemm", 11), ("aten::relu", "relu", 12))):
        at = t + 10 + 100 * i
        evs += [{"ph": "X", "cat": "cpu_op", "name": op, **main_thread, "ts": at, "dur": 50},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **main_thread, "ts": at + 10,
                 "dur": 10, "args": {"correlation": 2 + i, "kernel": kernel, "graph node id": node}}]
    evs += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", **main_thread,
             "ts": t + 300, "dur": 5, "args": {"correlation": 4}},
            {"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=8]", **main_thread, "ts": t + 1000,
             "dur": 900},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", **main_thread, "ts": t + 1010,
             "dur": 20, "args": {"correlation": 9}}]
    for i, (kernel, node, dur) in enumerate((("relu", 12, 30), ("gemm", 11, 200))):
        evs.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": t + 1050 + 300 * i,
                    "dur": dur, "args": {"correlation": 9, "device": 0, "stream": 7, "graph node id": node}})
    return write(tmp_path / "cuda_graph.json", trace(evs))


def test_cuda_graph_node_ids_decide(tmp_path):
    path = cuda_trace(tmp_path)
    with traceaug.load(path, kind="gpu_steps") as t:
        r = graph_replay.attribute(t)
    assert (r.replayed, r.attributed) == (2, 2)
    assert r.ops["op"].tolist() == ["aten::relu", "aten::mm"]
    times = graph_replay.op_times(r)
    assert dict(zip(times["op"].tolist(), times["total"].tolist())) == {"aten::mm": 200_000,
                                                                      "aten::relu": 30_000}


def test_a_long_capture_is_read_in_linear_time(tmp_path):
    """16,000 dispatches captured on one thread: each in its op, read in well under a second (the capture
    window's end was searched again for every slice joined to it: 3.7 s on this trace)."""
    import time

    th, n = {"pid": 1000, "tid": 1000}, 16_000
    evs = [*METADATA, {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", **th,
                       "ts": BASE_US, "dur": 5}]
    for i in range(n):
        at = BASE_US + 10 + 20 * i
        evs += [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", **th, "ts": at, "dur": 15},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **th, "ts": at + 2, "dur": 10,
                 "args": {"correlation": 2 + i, "kernel": f"k{i % 5}"}}]
    evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", **th,
                "ts": BASE_US + 20 * n + 50, "dur": 5})
    path = write(tmp_path / "capture.json", trace(evs))
    with traceaug.load(path, kind="capture") as t:
        start = time.perf_counter()
        graphs = graph_replay.captured(t, path.name)
        took = time.perf_counter() - start
    assert len(graphs) == 1
    assert graphs[0].kernels == [f"k{i % 5}" for i in range(n)]
    assert graphs[0].ops == [f"op{i % 7}" for i in range(n)]
    assert took < 1.5, f"{took:.2f} s"


def test_a_captured_call_is_attributed_to_its_innermost_cpu_op(tmp_path):
    """Each captured launch's op is the innermost CPU op holding it: its parent when that is one, the op above
    an annotation between them, the inner of two nested ops; a launch in no op is named by its call."""
    th = {"pid": 1000, "tid": 1000}
    t = BASE_US

    def launch(at, kernel):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **th, "ts": at, "dur": 5,
                "args": {"correlation": at, "kernel": kernel}}

    evs = [*METADATA, {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", **th, "ts": t,
                       "dur": 5},
           {"ph": "X", "cat": "cpu_op", "name": "aten::mm", **th, "ts": t + 10, "dur": 20},
           launch(t + 12, "k1"),
           {"ph": "X", "cat": "cpu_op", "name": "aten::linear", **th, "ts": t + 40, "dur": 40},
           {"ph": "X", "cat": "user_annotation", "name": "## region ##", **th, "ts": t + 42, "dur": 30},
           launch(t + 45, "k2"),
           {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", **th, "ts": t + 50, "dur": 20},
           launch(t + 52, "k3"),
           launch(t + 100, "k4"),
           {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", **th, "ts": t + 200, "dur": 5}]
    path = write(tmp_path / "capture.json", trace(evs))
    with traceaug.load(path, kind="capture") as t:
        graphs = graph_replay.captured(t, path.name)
    assert graphs[0].kernels == ["k1", "k2", "k3", "k4"]
    assert graphs[0].ops == ["aten::mm", "aten::linear", "aten::addmm", "cudaLaunchKernel"]


def test_a_capture_read_ahead_is_its_commands_alone(tmp_path):
    """The command line reads ``--capture`` ahead in a thread; graphs no analysis took (a trace without graph
    replays) are dropped with the command, so a later read of that capture, edited since, sees the edit."""
    replay = cuda_trace(tmp_path)
    capture = tmp_path / "capture.json"
    capture.write_bytes(replay.read_bytes())
    plain = write(tmp_path / "plain.json", trace([*METADATA, {
        "ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": BASE_US, "dur": 5,
        "args": {"correlation": 1, "device": 0, "stream": 7}}]))
    out = CliRunner().invoke(main, ["kernels", str(plain), "--capture", str(capture), "--format", "json"])
    assert out.exit_code == 0, out.output
    swapped = capture.read_text().replace("aten::mm", "OLD").replace("aten::relu", "aten::mm")
    capture.write_text(swapped.replace("OLD", "aten::relu"))  # each node's op is now the other one
    with runtime.using(capture=str(capture)), traceaug.load(replay, kind="gpu_steps") as t:
        r = graph_replay.attribute(t)
    assert r.ops["op"].tolist() == ["aten::mm", "aten::relu"]  # (relu's node ran first: now aten::mm's)


@pytest.mark.parametrize("slow", [False, True])
def test_a_long_wait_for_a_capture_read_ahead_is_said(tmp_path, capsys, monkeypatch, slow):
    """The capture read ahead shows no progress line of its own (it would garble the trace's): a wait for it
    of over half a second is said on a terminal, a short one is not."""
    import time

    replay = cuda_trace(tmp_path)
    read = graph_replay.captured
    monkeypatch.setattr(graph_replay, "captured", lambda *a: time.sleep(0.8 * slow) or read(*a))
    with runtime.using(progress=True, capture=str(replay)):
        graph_replay.read_ahead(str(replay))
        with traceaug.load(replay, kind="gpu_steps") as t:
            r = graph_replay.attribute(t)
    assert (r.replayed, r.attributed) == (2, 2)
    assert (f"reading the capture {replay}\n" in capsys.readouterr().err) == slow
