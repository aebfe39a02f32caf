"""Every command's ``--format json`` on the shared traces validates against docs/schemas/NAME.json (its
``schema_version`` the schema's), and README lists each schema's version. Generic over
``traceaug.commands.NAMES``: a new command with a JSON output fails here until it has a case and a schema
(``python docs/schemas/generate.py NAME`` writes one from these cases)."""

from __future__ import annotations

import json
import re

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
# Per command the runs its schema covers (a shared path is relative to ../shared/traces).
CASES = {
    "breakdown": [[A100], [JOB]],
    "collectives": [[JOB]],
    "counters": [[SMALL, "--summary-only"], [JOB, "--summary-only"]],
    "critical-path": [[SMALL, "--summary-only"], [JOB, "--job", "--summary-only"]],
    "diff": [[*H100], [*H100, "--fail-on-regression", "1", "--explain"]],
    "gaps": [[A100], [JOB]],
    "info": [[A100], [JOB]],
    "kernels": [[A100], [JOB]],
    "launches": [[SMALL], [JOB]],
    "patterns": [[SMALL, "--summary-only"], [JOB, "--summary-only"]],
    "query": [[SMALL, "select name, dur from slice limit 3"]],
    "report": [[A100], [JOB]],
    "stragglers": [[JOB]],
    "summary": [["--config", GPA]],
    "whatif": [[SMALL, "--scale", "comp=0.5"], [JOB, "--no-stragglers"]],
}


def json_commands() -> list[str]:
    """Every command with a ``--format json``."""
    return [n for n in commands.NAMES if any(
        isinstance(p, click.Option) and p.name == "fmt" and "json" in p.type.choices
        for p in commands.load(n).params)]


def output(name: str, args: list[str]) -> dict:
    """``traceaug NAME ARGS --format json``, each shared path made absolute."""
    from click.testing import CliRunner

    from traceaug.cli import main

    args = [str(SHARED / a) if a.startswith(("kineto/", "nsys/")) else a for a in args]
    done = CliRunner().invoke(main, [name, *args, "--format", "json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


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
