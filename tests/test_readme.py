"""README's fresh-machine commands stay true: CI runs exactly its test command.

Its sample outputs too: each ```text block that starts with `$ traceaug ...` is run
again, and every line of the sample must be in the fresh output. A line without a digit (a header:
column names, a section title) must appear exactly (spaces between words aside), so a renamed
column that README forgot fails here; in other lines a number matches any number, so a figure
that moves does not. A line ending in `…` is cropped (a prefix); a line `…` alone stands for
cropped lines. Only cheap inputs: testdata/ and small shared traces (skipped when absent)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SHARED, shared_trace

DIGITS = r"-?\d[\d.,]*(?:e[-+]?\d+)?"
NUMBER = rf"(?:{DIGITS}|NULL|nan|inf)"
CROP = "…"


def samples() -> list[tuple[str, list[str]]]:
    """(command, sample lines) for every ```text block of README.md that starts with `$ traceaug`."""
    text = (ROOT / "README.md").read_text()
    found = []
    for block in re.findall(r"^```text\n(.*?)^```", text, flags=re.M | re.S):
        first, *rest = block.splitlines()
        if first.startswith("$ traceaug "):
            found.append((first[2:], rest))
    return found


def line_pattern(line: str) -> re.Pattern:
    """LINE as a regex: numbers match any number, runs of spaces any run, a trailing `…` a prefix."""
    prefix = line.rstrip().endswith(CROP)
    body = line.strip().removesuffix(CROP) if prefix else line.strip()
    parts = []
    for word in body.split():
        pieces = re.split(DIGITS, word)
        parts.append(NUMBER.join(re.escape(p) for p in pieces))
    return re.compile(r"\s+".join(parts) + ("" if prefix else r"\Z"))


def run_sample(command: str, work: Path) -> str:
    """COMMAND (a README line) run in WORK, where testdata/ and ../shared/ are README's paths."""
    args = shlex.split(command)
    assert args[0] == "traceaug"
    argv = [sys.executable, "-m", "traceaug", *args[1:]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if args[1] == "open":  # serves until Ctrl-C: read up to its prompt, then stop it
        server = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        try:
            lines = []
            for out in server.stdout:
                lines.append(out)
                if out.startswith("Press Ctrl-C"):
                    break
        finally:
            server.send_signal(signal.SIGINT)
            server.communicate(timeout=30)
        return "".join(lines)
    result = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stderr + result.stdout


SAMPLES = samples()


def test_readme_has_samples() -> None:
    """Every command README describes shows one sample."""
    commands = {shlex.split(command)[1] for command, _ in SAMPLES}
    assert commands >= {"counters", "critical-path", "whatif", "diff", "patterns", "kernels", "gaps",
                        "breakdown", "launches", "report", "open", "convert", "summary", "info",
                        "query", "collectives", "stragglers", "cupti"}


@pytest.mark.parametrize(("command", "lines"), SAMPLES, ids=[c for c, _ in SAMPLES])
def test_readme_sample_output(command: str, lines: list[str], tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "testdata").symlink_to(ROOT / "testdata")
    if "../shared/" in command:
        shared_trace(".")
        (tmp_path / "shared").symlink_to(SHARED.parent)
    fresh = [line.strip() for line in run_sample(command, work).splitlines()]
    checked = [line for line in lines if line.strip() not in ("", CROP)]
    assert checked, f"the sample of `{command}` shows nothing"
    for line in checked:
        pattern = line_pattern(line)
        assert any(pattern.match(out) for out in fresh), (
            f"README's sample of `{command}` shows a line the command no longer prints:\n{line}")


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = "pip install -q -e '.[test]' && python -m pytest -q -n 2"
    assert command in readme.split("```bash\n")[2]
    assert ci[-1] == command


def test_readme_main_job_runs(tmp_path) -> None:
    import subprocess
    import sys

    out = tmp_path / "small_training.counters.json.gz"
    result = subprocess.run([sys.executable, "-m", "traceaug", "counters",
                             str(ROOT / "testdata" / "small_training.json.gz"), str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "Queue length per stream" in result.stdout and out.exists()


def test_readme_sample_trace_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "traceaug counters testdata/small_training.json.gz small_training.counters.json.gz" in readme
    assert (ROOT / "testdata" / "small_training.json.gz").exists()
