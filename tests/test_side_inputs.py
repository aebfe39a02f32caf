"""Inputs that never end or never start (issue 24, items 4-6), through the real CLI in a fresh
process each: an SQL file, a config, the CSVs a config names, stdin, FIFOs and devices, and
whitespace where a trace should begin. Each run has a generous timeout: a hang fails the test
instead of stopping the suite (the old code blocked or read without end on every one)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import kineto_gen
import pytest

STEPS = 3  # kineto_gen.trace(): its ProfilerSteps
GUARD_S = 60  # no case below takes more than a few seconds; the old code never ended


def run(args: list[str], tmp_path: Path, stdin: bytes | None = None, guard_s: int = GUARD_S,
        **env: str) -> subprocess.CompletedProcess:
    """``traceaug ARGS`` with ``$TMPDIR`` in ``tmp_path/tmp`` (so what it spools can be seen)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    full_env = {**os.environ, "TMPDIR": str(tmp), **env}
    return subprocess.run([sys.executable, "-m", "traceaug", *args], input=stdin, env=full_env,
                          capture_output=True, timeout=guard_s, cwd=tmp_path)


def one_line_error(res: subprocess.CompletedProcess, name: str, reason: str) -> None:
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert err.count("\n") == 1 and err.startswith(f"traceaug: error: {name}: "), err
    assert reason in err, err


def trace(tmp_path: Path) -> Path:
    return kineto_gen.write(tmp_path / "t.json", kineto_gen.trace())


STEPS_SQL = "SELECT COUNT(*) AS steps FROM slice WHERE name GLOB 'ProfilerStep#*'"


# ----- 24.4: files read beside the trace ------------------------------------------------------

def test_sql_file_fifo_without_writer_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "q.sql"
    os.mkfifo(fifo)
    res = run(["query", str(trace(tmp_path)), "-f", str(fifo)], tmp_path)
    one_line_error(res, str(fifo), "no writer")


def test_sql_file_fifo_with_writer_is_read(tmp_path: Path) -> None:
    """A process substitution (``-f <(echo ...)``) still works: the FIFO is read to its end."""
    fifo = tmp_path / "q.sql"
    os.mkfifo(fifo)
    src = trace(tmp_path)

    def write() -> None:
        with open(fifo, "w") as f:  # blocks until traceaug opens it
            f.write(STEPS_SQL)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    res = run(["query", "--format", "json", str(src), "-f", str(fifo)], tmp_path)
    writer.join(5)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["rows"] == [{"steps": STEPS}]


@pytest.mark.parametrize("device,reason", [("/dev/urandom", "binary data"),
                                           ("/dev/zero", "NUL bytes only")])
def test_sql_file_device_is_refused(tmp_path: Path, device: str, reason: str) -> None:
    res = run(["query", str(trace(tmp_path)), "-f", device], tmp_path)
    one_line_error(res, device, reason)


def test_sql_from_stdin_still_works(tmp_path: Path) -> None:
    res = run(["query", "--format", "json", str(trace(tmp_path)), "-f", "-"], tmp_path,
              stdin=STEPS_SQL.encode())
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["rows"] == [{"steps": STEPS}]


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom"])
def test_config_named_csv_that_never_ends_is_refused(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        csv = tmp_path / "kern.csv"
        os.mkfifo(csv)
        name, reason = str(csv), "no writer"
    else:
        csv = Path(kind)
        name, reason = kind, "NUL bytes"
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"inputs": [{"format": "csv", "nsys_csv_file_path":
                                              {"kernel_sum": str(csv)}}]}))
    res = run(["summary", "--config", str(config)], tmp_path)
    one_line_error(res, name, reason)


def test_class_map_from_a_device_is_refused(tmp_path: Path) -> None:
    csv = tmp_path / "kern.csv"
    csv.write_text("Time (%),Total Time (ns),Instances,Name\n100.0,1000,2,gemm\n")
    res = run(["summary", str(csv), "--class-map", "/dev/urandom"], tmp_path)
    one_line_error(res, "/dev/urandom", "not a JSON class map")


# ----- 24.5: spooling stops as soon as the bytes cannot be a trace ----------------------------

@pytest.mark.parametrize("command", [["info"], ["kernels"], ["counters", "-"]])
def test_urandom_is_refused_at_once(tmp_path: Path, command: list[str]) -> None:
    res = run([command[0], "/dev/urandom", *command[1:]], tmp_path)
    one_line_error(res, "/dev/urandom", "not a trace")
    assert os.listdir(tmp_path / "tmp") == []  # the spool is gone too


def test_binary_bytes_after_a_brace_stop_the_spool(tmp_path: Path) -> None:
    res = run(["info", "-"], tmp_path, stdin=b'{"traceEvents": [' + os.urandom(3 << 20))
    one_line_error(res, "stdin", "binary data")


@pytest.mark.parametrize("line, said", [("{", "'{' after its first {"), ("[", "'[' after its first ["),
                                        ("[{", "'[' after its first {")])
def test_a_stream_that_cannot_start_a_trace_stops_at_once(tmp_path: Path, line: str, said: str) -> None:
    """``yes '{' | traceaug info -`` (issue 39 item 13): ``{`` then ``{`` starts no JSON trace (a key's
    ``"`` or ``}`` must come), nor ``[`` then ``[`` (an event or ``]``); the spool stops there, not at
    its 64 MB bound."""
    yes = subprocess.Popen(["yes", line], stdout=subprocess.PIPE)
    try:
        tmp = tmp_path / "tmp"
        tmp.mkdir()
        res = subprocess.run([sys.executable, "-m", "traceaug", "info", "-"], stdin=yes.stdout,
                             capture_output=True, timeout=GUARD_S, cwd=tmp_path,
                             env={**os.environ, "TMPDIR": str(tmp), "TRACEAUG_SPOOL_MAX_MB": "64"})
    finally:
        yes.kill()
        yes.wait()
    one_line_error(res, "stdin", f"{said}, not a trace")
    assert os.listdir(tmp) == []


def test_what_may_follow_a_first_brace_is_still_read(tmp_path: Path) -> None:
    """Whitespace between ``{`` / ``[`` and what follows, split across pipe reads, is no reason to stop."""
    events = json.dumps(kineto_gen.trace()["traceEvents"]).encode()
    res = run(["info", "--format", "json", "-"], tmp_path, stdin=b"[ \n\t" + events[1:])
    assert res.returncode == 0 and json.loads(res.stdout)["kernels"] == STEPS, res.stderr
    obj = json.dumps(kineto_gen.trace()).encode()
    res = run(["info", "--format", "json", "-"], tmp_path, stdin=b"{" + b" " * (3 << 20) + obj[1:])
    assert res.returncode == 0 and json.loads(res.stdout)["kernels"] == STEPS, res.stderr


def test_spool_stops_at_its_bound(tmp_path: Path) -> None:
    """A stream that looks like a trace but goes on: ``$TRACEAUG_SPOOL_MAX_MB`` stops it."""
    events = b",".join([json.dumps(e).encode() for e in kineto_gen.events()] * 2000)
    assert len(events) > 3 << 20
    res = run(["info", "-"], tmp_path, stdin=b'{"traceEvents": [' + events + b"]}",
              TRACEAUG_SPOOL_MAX_MB="1")
    one_line_error(res, "stdin", "more than 1 MB")
    res = run(["info", "--format", "json", "-"], tmp_path, stdin=b'{"traceEvents": [' + events
              + b"]}", TRACEAUG_SPOOL_MAX_MB="8")
    assert res.returncode == 0 and json.loads(res.stdout)["kernels"] == STEPS * 2000


def test_gzip_on_stdin_is_still_read(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(kineto_gen.trace()).encode())
    res = run(["info", "--format", "json", "-"], tmp_path, stdin=data)
    assert res.returncode == 0 and json.loads(res.stdout)["profiler_steps"] == STEPS


def test_magic_number_split_across_pipe_writes(tmp_path: Path) -> None:
    """A FIFO whose writer sends a gzip's first byte alone: the check waits for enough bytes
    to see the magic number instead of judging one byte."""
    fifo = tmp_path / "t.json.gz"
    os.mkfifo(fifo)
    data = gzip.compress(json.dumps(kineto_gen.trace()).encode())

    def write() -> None:
        with open(fifo, "wb", buffering=0) as f:
            f.write(data[:1])
            threading.Event().wait(0.3)
            f.write(data[1:])

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    res = run(["info", "--format", "json", str(fifo)], tmp_path)
    writer.join(5)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["kernels"] == STEPS


# ----- 24.6: whitespace -----------------------------------------------------------------------

def _gzip_spaces(path: Path, mb: int, after: bytes = b"") -> Path:
    """A gzip of ``mb`` MB of spaces (then ``after``), written in a fraction of a second."""
    z = zlib.compressobj(1, wbits=31)
    block = b" " * (1 << 20)
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(z.compress(block))
        f.write(z.compress(after) + z.flush())
    return path


@pytest.mark.parametrize("command", ["info", "counters"])
def test_only_whitespace_is_refused_without_the_engine(tmp_path: Path, command: str) -> None:
    """5 MB of " \\n" took the engine 18 s to find nothing; now refused at once by what it is."""
    path = tmp_path / "ws.json"
    path.write_bytes(b" \n" * (5 << 19))
    res = run([command, str(path), str(tmp_path / "o.json")][: 2 if command == "info" else 3],
              tmp_path)
    one_line_error(res, str(path), "only whitespace")


@pytest.mark.parametrize("command", ["info", "counters"])
def test_gzip_of_endless_spaces_is_refused(tmp_path: Path, command: str) -> None:
    """A gzip of 100 MB of spaces (2 GB ran for minutes): refused after 64 MB of them, even
    with a trace behind them."""
    path = _gzip_spaces(tmp_path / "sp.json.gz", 100, json.dumps(kineto_gen.trace()).encode())
    res = run([command, str(path), str(tmp_path / "o.json")][: 2 if command == "info" else 3],
              tmp_path)
    one_line_error(res, str(path), "more than 64 MB of whitespace")
    assert not (tmp_path / "o.json").exists()


def test_whitespace_before_a_trace_is_read_by_a_rewriter(tmp_path: Path) -> None:
    """60 MB of spaces before a trace: the rewriter's marker search stepped through them a byte
    at a time in Python (50 s); now the run ends well inside the guard, the trace intact."""
    data = json.dumps(kineto_gen.trace()).encode()
    src = tmp_path / "sp.json"
    src.write_bytes(b" " * (60 << 20) + data)
    out = tmp_path / "o.json"
    res = run(["counters", str(src), str(out)], tmp_path, guard_s=30)  # here: ~4 s
    assert res.returncode == 0, res.stderr
    written = out.read_bytes()
    events = data.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    assert written.startswith(b" " * (60 << 20)) and data[events:] in written
    assert json.loads(written)["traceEvents"]
