"""Bad input: one clear line naming the file and the reason, exit 1, no traceback."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from conftest import run_cli, shared_trace

import traceaug

TRIVIAL = b'{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":2}]}'


def make_bad(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, the reason its error must contain)."""
    real = gzip.decompress(shared_trace("kineto/a100_triton.json.gz").read_bytes())
    files = {
        "empty": (b"", "empty file"),
        "truncated": (real[: len(real) // 2], "JSON trace file is incomplete"),
        "garbage": (bytes(range(256)) * 20, "Unknown trace type"),
        "not_a_trace": (b'{"hello": [1, 2, 3]}', "not a trace"),
    }
    out = {}
    for name, (data, reason) in files.items():
        p = tmp_path / f"{name}.json"
        p.write_bytes(data)
        out[name] = (p, reason)
    gz = tmp_path / "truncated.json.gz"
    gz.write_bytes(gzip.compress(real)[:200])
    out["truncated_gzip"] = (gz, "corrupt gzip data")
    out["missing"] = (tmp_path / "missing.json", "no such file")
    return out


@pytest.mark.parametrize("name", ["empty", "truncated", "garbage", "not_a_trace", "truncated_gzip",
                                  "missing"])
def test_cli_bad_input_one_line(tmp_path: Path, name: str) -> None:
    path, reason = make_bad(tmp_path)[name]
    before = path.read_bytes() if path.exists() else None
    result = run_cli("info", str(path))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and reason in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert (path.read_bytes() if path.exists() else None) == before  # input untouched


def test_sql_error_shows_perfettos_message(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(TRIVIAL)
    result = run_cli("query", str(p), "SELECT nope FROM slice")
    assert result.returncode == 1
    assert "no such column: nope" in result.stderr
    assert "Traceback (most recent call last):\n" not in result.stderr


def test_api_raises_traceaug_error(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(b"{")
    with pytest.raises(traceaug.TraceaugError, match="t.json"):
        traceaug.load(p, progress=False)


def test_directory_with_duplicate_ranks(tmp_path: Path) -> None:
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_bytes(b'{"distributedInfo": {"rank": 3}, "traceEvents": []}')
    result = run_cli("info", str(tmp_path))
    assert result.returncode == 1
    assert "rank 3 appears twice: a.json and b.json" in result.stderr


def test_bad_native_engine_is_a_clean_error(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_bytes(TRIVIAL)
    result = run_cli("--tp-bin", str(tmp_path / "missing"), "info", str(trace))
    assert result.returncode == 2 and "does not exist" in result.stderr
    fake = tmp_path / "not_a_shell"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    result = run_cli("--tp-bin", str(fake), "info", str(trace))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and str(fake) in result.stderr


@pytest.mark.parametrize("name", ["truncated", "garbage", "not_a_trace", "truncated_gzip"])
def test_pass1_workers_report_bad_input_as_this_process_does(tmp_path: Path, name: str) -> None:
    """A chunk a worker cannot parse sends pass 1 back to this process, whose confirmed
    scan gives the same one-line reason."""
    path, reason = make_bad(tmp_path)[name]
    messages = []
    for workers in (0, 2):
        with pytest.raises(traceaug.TraceaugError) as err:
            traceaug.load(path, progress=False, workers=workers)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert str(path) in messages[1] and reason in messages[1]
