"""Shared fixtures: where the real traces live, and a skip when they are absent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"
KINETO = SHARED / "kineto"
TESTDATA = ROOT / "testdata"


def shared_trace(rel: str) -> Path:
    """A path under ../shared/traces, or skip the test with the reason."""
    path = SHARED / rel
    if not path.exists():
        pytest.skip(f"real trace {path} not present (../shared/traces is provided for CI)")
    return path


def kineto_files() -> list[str]:
    """Every Kineto trace file in ../shared/traces/kineto (relative names)."""
    if not KINETO.exists():
        return []
    return sorted(str(p.relative_to(SHARED)) for p in KINETO.rglob("*.json.gz"))


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m traceaug ARGS`` in a fresh process, its output captured."""
    return subprocess.run([sys.executable, "-m", "traceaug", *args], capture_output=True, text=True)
