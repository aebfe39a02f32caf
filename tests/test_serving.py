"""Serving steps (``analysis.serving``): vLLM's and SGLang's step annotations and ``--step-pattern`` are the
steps every ``--step`` command takes; counts checked against the raw JSON of the shared serving traces."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from click.testing import CliRunner
from conftest import shared_trace
from kineto_gen import BASE_US, METADATA, trace, write
from rawjson import load_raw

import traceaug
import traceaug.runtime as runtime
from traceaug.analysis import serving
from traceaug.cli import main

SERVING = ("kineto/inference/vllm_decode_full/graph_execution.json.gz",
           "kineto/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
           "kineto/vllm_decode_cudagraph.json.gz")


def raw_steps(path) -> list[tuple[str, int]]:
    """(phase, batch) of each outermost serving annotation, read from the raw JSON: an annotation inside
    another on its thread is part of that step."""
    evs = sorted((e for e in load_raw(path)["traceEvents"] if e.get("cat") == "user_annotation"
                  and (e["name"].startswith("execute_") or e["name"].startswith("step["))),
                 key=lambda e: (e["ts"], -e["dur"]))
    out, ends = [], {}
    for e in evs:
        where = (e["pid"], e["tid"])
        if where in ends and e["ts"] + e["dur"] <= ends[where]:
            continue
        ends[where] = e["ts"] + e["dur"]
        m = re.match(r"execute_(\d+)_context_(\d+).*_generation_(\d+)", e["name"])
        if m:
            p, d = int(m.group(2)), int(m.group(3))
            out.append(("mixed" if p and d else "prefill" if p else "decode", int(m.group(1))))
        else:
            m = re.match(r"step\[(\w+) bs=(\d+)", e["name"])
            out.append(({"EXTEND": "prefill"}.get(m.group(1), m.group(1).lower()), int(m.group(2))))
    return out


@pytest.mark.parametrize("rel", SERVING)
def test_steps_equal_the_annotations(rel):
    path = shared_trace(rel)
    want = raw_steps(path)
    with traceaug.load(path, kind="gpu_steps") as t:
        got = serving.steps(t)
    assert list(zip(got["phase"].tolist(), got["batch"].tolist())) == want
    assert Counter(got["phase"].tolist()) == Counter(p for p, _ in want)
    assert got["step"].tolist() == list(range(len(want)))


def test_vllm_counts_from_the_annotation():
    got = serving.parse("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)")
    assert got == {"phase": "decode", "batch": 32, "tokens": 32, "context": 55086}
    got = serving.parse("execute_3_context_1(sq500sk500sqsq250000sqsk250000)"
                        "_generation_2(sq2sk900sqsq2sqsk900)")
    assert got == {"phase": "mixed", "batch": 3, "tokens": 502, "context": 1400}
    # the leading number is the step's tokens, not its requests (6144 prefill + 3 decode tokens, 5 requests)
    got = serving.parse("execute_6147_context_2(sq6144sk7144sqsq20971520sqsk23019520)"
                        "_generation_3(sq3sk6144sqsq3sqsk6144)")
    assert got == {"phase": "mixed", "batch": 5, "tokens": 6147, "context": 13288}
    assert serving.parse("execute_context_2(14721)_generation_0(0)") == \
        {"phase": "prefill", "batch": 2, "tokens": 14721, "context": None}  # vLLM's native form
    assert serving.parse("step[EXTEND bs=4]")["phase"] == "prefill"
    assert serving.parse("step[DECODE bs=64 g_sq=128 g_sqsq=256 g_sqsk=262144 g_sk=131072]") == \
        {"phase": "decode", "batch": 64, "tokens": 128, "context": 131072}
    assert serving.parse("step[EXTEND bs=2 toks=14721 c_sq=14721 c_sqsq=108745533 c_sqsk=108745533 "
                         "c_sk=14721]") == {"phase": "prefill", "batch": 2, "tokens": 14721, "context": 14721}
    assert serving.parse("decode[bs=117/128 tok=117 d=117]") == \
        {"phase": "decode", "batch": 117, "tokens": 117, "context": None}  # ATOM, a graph padded to 128
    assert serving.parse("ProfilerStep#3") is None


ANNOTATIONS = ["execute_800_context_4(sq800sk800sqsq160000sqsk160000)_generation_0(sq0sk0sqsq0sqsk0)",
               "execute_context_0(0)_generation_4(4)",
               "execute_104_context_1(sq100sk100sqsq10000sqsk10000)_generation_4(sq4sk808sqsq4sqsk808)",
               "step[DECODE bs=5]", "my step decode bs=7"]


def serving_trace(tmp_path):
    """One annotation per step (``ANNOTATIONS``), each launching one kernel of 100 + i µs."""
    evs = list(METADATA)
    for i, name in enumerate(ANNOTATIONS):
        t, c = BASE_US + i * 1000, i + 1
        evs += [{"ph": "X", "cat": "user_annotation", "name": name, "pid": 1000, "tid": 1000, "ts": t,
                 "dur": 900},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000, "tid": 1000,
                 "ts": t + 20, "dur": 10, "args": {"correlation": c}},
                {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": t + 50,
                 "dur": 100 + i, "args": {"correlation": c, "device": 0, "stream": 7}}]
    return write(tmp_path / "serving.json", trace(evs))


def test_every_step_command_takes_serving_steps(tmp_path):
    path = serving_trace(tmp_path)
    with traceaug.load(path) as t:
        got = serving.steps(t)
    assert got["phase"].tolist() == ["prefill", "decode", "mixed", "decode"]
    assert got["tokens"].tolist() == [800, 4, 104, -1]
    for n in range(4):
        out = CliRunner().invoke(main, ["kernels", str(path), "--step", str(n), "--format", "json"])
        rows = json.loads(out.output)["kernels"]
        assert [(r["name"], r["total_ns"]) for r in rows] == [(f"k{n}", (100 + n) * 1000)], out.output
    frames = traceaug.breakdown(str(path), step=2)
    assert frames["temporal breakdown per step (GPU windows)"]["busy_ns"].tolist() == [102_000]
    out = CliRunner().invoke(main, ["kernels", str(path), "--step", "4"])
    assert out.exit_code == 1 and "no serving step 4 (steps: 0, 1, 2, 3)" in out.output
    # a user pattern: its annotation alone is the step, its groups the fields
    pattern = r"^my step (?P<phase>\w+) bs=(?P<batch>\d+)"
    out = CliRunner().invoke(main, ["kernels", str(path), "--step-pattern", pattern, "--step", "0",
                                    "--format", "json"])
    assert [r["name"] for r in json.loads(out.output)["kernels"]] == ["k4"], out.output
    with runtime.using(step_pattern=pattern), traceaug.load(path) as t:
        got = serving.steps(t)
    assert (got["phase"].tolist(), got["batch"].tolist()) == (["decode"], [7])
    out = CliRunner().invoke(main, ["kernels", str(path), "--step-pattern", "(", "--step", "0"])
    assert out.exit_code == 2 and "not a regular expression" in out.output
