"""Under CI a missing ../shared/traces or a missing reference tool fails the run; elsewhere the
test is skipped with its reason (printed by -rs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

PROBE = '''
from conftest import require_hta, shared_trace

def test_needs_a_trace():
    shared_trace("kineto/no_such_trace.json.gz")

def test_needs_hta():
    require_hta()
'''


def run_probe(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    """The probe module beside a copy of conftest.py, in a pytest of its own; ``import hta``
    made to fail by a shadowing package, so that both requirements are missing."""
    (tmp_path / "tests").mkdir()
    shutil.copy(HERE / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "test_probe.py").write_text(PROBE)
    (tmp_path / "shadow" / "hta").mkdir(parents=True)
    (tmp_path / "shadow" / "hta" / "__init__.py").write_text("raise ImportError('shadowed')\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(tmp_path / "shadow")
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests"], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_missing_trace_and_hta_fail_under_ci(tmp_path: Path) -> None:
    res = run_probe(tmp_path, "true")
    assert res.returncode == 1, res.stdout
    assert "2 failed" in res.stdout and "required under CI" in res.stdout


@pytest.mark.parametrize("ci", [None, "false"])
def test_missing_trace_and_hta_skip_elsewhere(tmp_path: Path, ci: str | None) -> None:
    res = run_probe(tmp_path, ci)
    assert res.returncode == 0, res.stdout
    assert "2 skipped" in res.stdout
    assert "no_such_trace.json.gz not present" in res.stdout and "HTA is not installed" in res.stdout
