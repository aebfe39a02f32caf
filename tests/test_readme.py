"""README's fresh-machine commands stay true: CI runs exactly its test command."""

from __future__ import annotations

from conftest import ROOT


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = "pip install -q -e '.[test]' && python -m pytest -q"
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
