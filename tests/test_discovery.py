"""A command finds the ranks of each of its inputs once: each rank file's first bytes are read
once (``read.ranks``), whatever reads them next (the prefetch, the guard, the job runner)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TESTDATA, shared_trace

from traceaug.cli import main
from traceaug.read import ranks

JOB = "kineto/jobs/dlrm_v100_8ranks"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict:
    seen = {"resolve": 0, "peek": []}
    resolve, peek = ranks.resolve, ranks._peek

    def counting_resolve(*a, **k):
        seen["resolve"] += 1
        return resolve(*a, **k)

    def counting_peek(path):
        seen["peek"].append(Path(path).name)
        return peek(path)

    monkeypatch.setattr(ranks, "resolve", counting_resolve)
    monkeypatch.setattr(ranks, "_peek", counting_peek)
    return seen


@pytest.mark.parametrize("args", [
    ["info", "{J}"], ["kernels", "{J}"], ["report", "{J}"], ["stragglers", "{J}"],
    ["counters", "{J}", "{O}/out/"], ["critical-path", "{J}", "--job", "--summary-only"],
    ["merge", "{J}", "{O}/m.json"], ["whatif", "{J}", "--step", "10"],
    ["kernels", "{J}", "--rank", "3"], ["query", "{J}", "SELECT 1", "--rank", "2"],
], ids=lambda a: " ".join(a[:3]))
def test_one_discovery_per_command(counted: dict, tmp_path: Path, args: list[str]) -> None:
    job = shared_trace(JOB)
    argv = [a.replace("{J}", str(job)).replace("{O}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in job.glob("*.json.gz"))
    assert counted["resolve"] == 1
    assert sorted(counted["peek"]) == files  # each rank file's head read once


def test_a_diff_of_two_jobs_finds_each_side_once(counted: dict) -> None:
    job = shared_trace(JOB)
    result = CliRunner().invoke(main, ["diff", str(job), str(job), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert counted["resolve"] == 2
    assert sorted(counted["peek"]) == sorted(2 * [p.name for p in job.glob("*.json.gz")])


def test_a_lone_file_is_not_peeked_at(counted: dict) -> None:
    result = CliRunner().invoke(main, ["kernels", str(TESTDATA / "small_training.json.gz")])
    assert result.exit_code == 0, result.output
    assert counted["resolve"] == 1 and counted["peek"] == []
