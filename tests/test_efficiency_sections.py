"""``report``'s and ``diff``'s efficiency sections (issue 35 item 3): the figures ``traceaug efficiency``
gives on the same trace (each side's, for diff), a GEMM's FLOPs against its raw ``Input Dims``, the documented
paths of an unknown device and of a trace without shapes, and one read of each trace for every section."""

from __future__ import annotations

import gzip
import json

import orjson
import pytest
from click.testing import CliRunner
from conftest import shared_trace

from traceaug.cli import main

QWEN = "kineto/h100_qwen05b_inference.json.gz"
A100 = "kineto/a100_rank0_of16_6streams.json.gz"
BERT = "kineto/h100_bert_small_inference.json.gz"
PAIR = ("kineto/diff/h100_runs/a/trace.json.gz", "kineto/diff/h100_runs/b/trace.json.gz")
OPS = "Efficiency: top ops by GPU time (% of roofline, bound)"
STEPS = "Efficiency: MFU per step"
CHANGED = "Efficiency of the changed ops, A vs B (achieved TFLOP/s and TB/s, % of roofline, bound)"
DIFF_STEPS = "Efficiency: MFU per step, A vs B"
KEY = ("device", "name", "shapes", "dtypes")
FIGURES = ("count", "total_ns", "flops", "tflops", "tbps", "roofline_pct", "bound")


def cli(*args: str) -> dict:
    done = CliRunner().invoke(main, [*args, "--format", "json"])
    assert done.exit_code == 0, done.output
    return orjson.loads(done.stdout)


def efficiency(path) -> dict:
    """``traceaug efficiency --format json``'s groups by (device, name, shapes, dtypes), and its steps."""
    data = cli("efficiency", str(path))
    return {"groups": {tuple(r[k] for k in KEY): r for r in data["groups"]},
            "order": [tuple(r[k] for k in KEY) for r in data["groups"]], "steps": data["steps"],
            "notes": data["notes"]}


@pytest.mark.parametrize("rel", (QWEN, A100))
def test_report_figures_are_efficiency_s(rel: str) -> None:
    """The report's top ops are ``efficiency``'s first groups with its figures; its MFU per step is
    ``efficiency``'s; on Qwen one aten::mm's FLOPs are 2·M·N·K from the raw ``Input Dims``."""
    path = shared_trace(rel)
    report, want = cli("report", str(path)), efficiency(path)
    ops = report[OPS]
    assert len(ops) == 10 and [tuple(r[k] for k in KEY) for r in ops] == want["order"][:10]
    for r in ops:
        found = want["groups"][tuple(r[k] for k in KEY)]
        assert {k: r[k] for k in FIGURES} == {k: found[k] for k in FIGURES}
    assert any(r["roofline_pct"] is not None and r["bound"] in ("compute", "memory") for r in ops)
    assert report[STEPS] == [{k: s[k] for k in report[STEPS][0]} for s in want["steps"]]
    assert all(s["mfu_pct"] > 0 and "gemm" in s["families"] for s in report[STEPS])
    if rel != QWEN:
        return
    mm = next(r for r in ops if r["name"] == "aten::mm")
    dims = json.loads(mm["shapes"])
    raw = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    event = next(e for e in raw if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"
                 and e["args"]["Input Dims"] == dims)
    (m, k), (k2, n) = event["args"]["Input Dims"][:2]
    assert k == k2 and mm["flops"] == 2 * m * n * k


def test_report_without_shapes_or_peaks(tmp_path) -> None:
    """A trace without shapes: the section is one line saying so; an unknown device: the figures without
    % columns and bound, and the note ``efficiency`` prints."""
    simple = cli("report", str(shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")))
    assert OPS not in simple and len(simple["Efficiency"]) == 1
    assert "record shapes" in simple["Efficiency"][0]["notes"]
    text = json.loads(gzip.decompress(shared_trace(PAIR[0]).read_bytes()))
    for p in text["deviceProperties"]:
        p["name"] = "Some Future GPU"
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps(text))
    report, want = cli("report", str(unknown)), efficiency(unknown)
    assert [r["notes"] for r in report["Efficiency"]] == want["notes"] and "--peaks FILE" in want["notes"][0]
    assert "roofline_pct" not in report[OPS][0] and "bound" not in report[OPS][0]
    assert "mfu_pct" not in report[STEPS][0] and report[OPS][0]["tflops"] > 0


def test_diff_shows_each_side_s_efficiency(tmp_path) -> None:
    """``diff`` of the h100_runs pair: each changed op's figures in A and in B are ``efficiency``'s on A and
    on B, and MFU per step of each side is ``efficiency``'s; the terminal and the pages show the sections."""
    a, b = (shared_trace(p) for p in PAIR)
    for command, args in (("diff", [str(a), str(b)]), ("report", [str(a)])):
        page = tmp_path / f"{command}.html"
        done = CliRunner().invoke(main, [command, *args, "--html", str(page)])
        assert done.exit_code == 0, done.output
        assert (CHANGED if command == "diff" else OPS) in page.read_text()
        if command == "diff":
            assert CHANGED in done.output and DIFF_STEPS in done.output
    data = cli("diff", str(a), str(b))
    changed = {r["key"] for r in data["ranks"][0]["ops"]
               if r["status"] != "unchanged" and r["device"] == "cpu"}
    rows = data["efficiency"][CHANGED]
    assert rows and {r["name"] for r in rows} <= changed
    sides = efficiency(a), efficiency(b)
    for r in rows:
        for side, want in zip("ab", sides, strict=True):
            found = want["groups"][tuple(r[k] for k in KEY)]
            assert (r[f"count_{side}"], r[f"total_{side}_ns"], r[f"tflops_{side}"], r[f"tbps_{side}"],
                    r[f"roofline_{side}_pct"], r[f"bound_{side}"]) == \
                (found["count"], found["total_ns"], found["tflops"], found["tbps"], found["roofline_pct"],
                 found["bound"])
    assert any(r["tflops_a"] != r["tflops_b"] for r in rows)
    shown = ("step", "step_ns", "flops", "mfu_pct", "families")
    for side, want in zip("ab", sides, strict=True):
        assert [{k: s[k] for k in shown} for s in data["efficiency"][DIFF_STEPS] if s["side"] == side] == \
            [{k: s[k] for k in shown} for s in want["steps"]]


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list:
    """The files every engine load (a ``Trace`` made) reads, in this process."""
    from traceaug.trace import Trace

    opened: list = []
    real = Trace.__init__

    def counting(self, path, *a, **k):
        opened.append(str(path))
        real(self, path, *a, **k)

    monkeypatch.setattr(Trace, "__init__", counting)
    return opened


def test_report_and_diff_read_each_trace_once(loads: list) -> None:
    """Qwen and bert have [memory] events and shapes: ``report`` and ``diff`` give the efficiency and memory
    sections from one read of each trace (they read a trace with [memory] events a second time before)."""
    qwen, bert = str(shared_trace(QWEN)), str(shared_trace(BERT))
    report = cli("report", qwen)
    assert loads == [qwen]
    assert OPS in report and "Memory: peak per step and device" in report
    loads.clear()
    data = cli("diff", qwen, bert)
    assert sorted(loads) == sorted([qwen, bert])
    assert CHANGED in data["efficiency"] and "Memory: peak, A vs B" in data["memory"]
