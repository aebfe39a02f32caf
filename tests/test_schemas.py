"""Every command's ``--format json`` on the shared traces validates against docs/schemas/NAME.json (its
``schema_version`` the schema's), and README lists each schema's version. Generic over
``traceaug.commands.NAMES``: a new command with a JSON output fails here until it has a case and a schema
(``python docs/schemas/generate.py NAME`` writes one from these cases)."""

from __future__ import annotations

import functools
import json
import re
import shlex

import click
import pytest
from conftest import ROOT, SHARED, shared_trace

from traceaug import commands

SCHEMAS = ROOT / "docs" / "schemas"
A100 = "kineto/a100_rank0_of16_6streams.json.gz"
SMALL = "kineto/a100_simple_add_cuda_sync.json.gz"
JOB = "kineto/jobs/dlrm_v100_8ranks"
H100 = ("kineto/diff/h100_runs/a/trace.json.gz", "kineto/diff/h100_runs/b/trace.json.gz")
GPA = "nsys/gpa/gpt5b_fp8_config.json"
VLLM = "kineto/inference/vllm_decode_full/graph_execution.json.gz"  # a graph replay and its capture
VLLM_CAPTURE = "kineto/inference/vllm_decode_full/capture_traces"
SGLANG = "kineto/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
SGLANG_CAPTURE = "kineto/inference/sglang_decode/capture_traces/bs_32_rank0.json.gz"  # no serving step
# Per command the runs its schema covers (a shared path is relative to ../shared/traces).
CASES = {
    "breakdown": [[A100], [JOB], [VLLM, "--capture", VLLM_CAPTURE]],
    "collectives": [[JOB]],
    "counters": [[SMALL, "--summary-only"], [JOB, "--summary-only"]],
    "critical-path": [[SMALL, "--summary-only"], [JOB, "--job", "--summary-only"],
                      [VLLM, "--summary-only", "--capture", VLLM_CAPTURE]],
    "diff": [[*H100], [*H100, "--fail-on-regression", "1", "--explain"],
             [VLLM, SGLANG, "--fail-on-regression", "50000"], [VLLM, SGLANG_CAPTURE]],  # serving phases
    "gaps": [[A100], [JOB]],
    "info": [[A100], [JOB]],
    "kernels": [[A100], [JOB], [VLLM, "--capture", VLLM_CAPTURE]],
    "launches": [[SMALL], [JOB]],
    "patterns": [[SMALL, "--summary-only"], [JOB, "--summary-only"]],
    "query": [[SMALL, "select name, dur from slice limit 3"]],
    "report": [[A100], [JOB]],
    "stragglers": [[JOB]],
    "summary": [["--config", GPA]],
    "whatif": [[SMALL, "--scale", "comp=0.5"], [JOB, "--no-stragglers"]],
    "cache": [["info"]],
    "cupti": [["kineto/a100_cupti_counters.json.gz"]],
    "efficiency": [["kineto/h100_qwen05b_inference.json.gz", "--summary-only"], [JOB, "--summary-only"]],
    "serving": [[VLLM, "--summary-only"], [VLLM, "--summary-only", "--capture", VLLM_CAPTURE]],
}


def json_commands() -> list[str]:
    """Every command with a ``--format json``."""
    return [n for n in commands.NAMES if any(
        isinstance(p, click.Option) and p.name == "fmt" and "json" in p.type.choices
        for p in commands.load(n).params)]


def output(name: str, args: list[str]) -> dict:
    """``traceaug NAME ARGS --format json``, each shared path made absolute."""
    return json.loads(_output(name, tuple(args)))


@functools.lru_cache
def _output(name: str, args: tuple) -> str:
    args = [str(SHARED / a) if a.startswith(("kineto/", "nsys/")) else a for a in args]
    return run([name, *args, "--format", "json"])


def run(argv: list[str]) -> str:
    """``traceaug ARGV``'s stdout (in this process)."""
    from click.testing import CliRunner

    from traceaug.cli import main

    done = CliRunner().invoke(main, argv)
    assert done.exit_code == 0, done.output
    return done.stdout


def test_every_json_command_has_a_case_and_a_schema():
    names = json_commands()
    assert {"kernels", "report", "diff", "query"} <= set(names)
    assert sorted(CASES) == names, "a command with --format json needs runs in CASES"
    missing = [n for n in names if not (SCHEMAS / f"{n}.json").exists()]
    assert not missing, f"no schema for {missing}: python docs/schemas/generate.py {' '.join(missing)}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_validates_against_its_schema(name):
    import jsonschema

    shared_trace(JOB)
    schema = json.loads((SCHEMAS / f"{name}.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for args in CASES[name]:
        data = output(name, args)
        assert list(data)[0] == "schema_version"
        assert data["schema_version"] == commands.load(name).schema_version
        jsonschema.validate(data, schema, cls=jsonschema.Draft202012Validator)


def test_a_changed_output_fails_its_schema():
    import jsonschema

    schema = json.loads((SCHEMAS / "kernels.json").read_text())
    data = output("kernels", [SMALL])
    data["kernels"][0]["total_ms"] = data["kernels"][0].pop("total_ns") / 1e6  # a renamed column
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**data, "schema_version": 2}, schema)


def test_readme_lists_every_schema_version():
    section = (ROOT / "README.md").read_text().split("### JSON schemas\n")[1].split("\n#")[0]
    listed = dict(re.findall(r"^\| `(\S+)` \| (\d+) \|", section, re.M))
    assert listed == {n: str(commands.load(n).schema_version) for n in json_commands()}


# The findings each command emits on the shared traces, with a ``verify`` query each.
FINDINGS = {"report": "report.top_kernel", "diff": "diff.step_time", "stragglers": "straggler.late_start",
            "critical-path": "critical_path.blocked_call"}


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_each_findings_verify_query_returns_the_claimed_figure(name):
    shared_trace(JOB)
    found = [f for args in CASES[name] for f in output(name, args)["findings"]]
    assert FINDINGS[name] in {f["id"] for f in found}
    for f in found:
        assert f["confidence"] in ("high", "low") and isinstance(f["impact_ns"], (int, float))
        assert f["evidence"]["open"].startswith("traceaug ")
        check = f["verify"]
        argv = shlex.split(check["command"])
        assert argv[:2] == ["traceaug", "query"] and argv[-1] == check["sql"]
        (row,) = json.loads(run(argv[1:]))["rows"]
        assert abs(row[check["column"]] - check["expect"]) <= 0.5, (f["id"], row, check["expect"])


def test_findings_state_the_known_figures():
    late = next(f for f in output("stragglers", [JOB])["findings"] if f["id"] == "straggler.late_start")
    figures = (late["evidence"]["rank"], late["evidence"]["step"], late["verify"]["expect"])
    assert figures == (7, 10, 7_513_500)
    top = output("report", [A100])["findings"][0]
    assert (top["id"], top["impact_ns"]) == ("report.top_kernel", 190_345_000)  # the raw JSON's (test_mcp)


def test_json_versioned_when_the_gate_exits_3():
    """``diff --fail-on-regression`` exits 3 after printing: its JSON is still whole and versioned."""
    from click.testing import CliRunner

    from traceaug.cli import main

    b = SHARED / "kineto/diff/tiny_test/test.json.gz"
    done = CliRunner().invoke(main, ["diff", str(shared_trace(H100[0])), str(b), "--fail-on-regression", "1",
                                     "--format", "json"])
    assert done.exit_code == 3, done.output
    data = json.loads(done.stdout)
    assert list(data)[0] == "schema_version" and list(data)[-1] == "findings"
