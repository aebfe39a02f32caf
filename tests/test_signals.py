"""Ctrl-C and SIGTERM at many points of real runs: exit 130 / 143 at once, never a crash
(the engine is stopped by epoch interruption, never by an exception in a host call), no
output or temporary file, no process left running."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import kineto_gen
import pytest

STEPS = 50_000  # ~48 MB of JSON: pass 1 in worker processes, a few seconds of engine


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("signals")
    path = kineto_gen.write_large(d / "big.json", STEPS)
    shutil.copy(path, d / "big_b.json")
    return path


def live_in_session(sid: int) -> list[str]:
    """Processes of the run's session still alive (zombies are dead: here no init reaps them)."""
    out = subprocess.run(["ps", "-s", str(sid), "-o", "pid=,stat="], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if "Z" not in line.split()[1]]


def interrupt(args: list[str], cwd: Path, after: float, sig: int = signal.SIGINT) -> tuple[int, str, float]:
    """Start ``traceaug ARGS`` in its own session, send ``sig`` after ``after`` s; return
    (exit code, stderr, seconds from the signal to the exit)."""
    proc = subprocess.Popen([sys.executable, "-m", "traceaug", *args], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    time.sleep(after)
    sent = time.perf_counter()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"{args} still running 15 s after the signal")
    took = time.perf_counter() - sent
    deadline = time.monotonic() + 3
    while live_in_session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_in_session(proc.pid) == [], f"{args}: processes left after the exit"
    return proc.returncode, err, took


# (command, delay) pairs: the whole run of each command, from argument parsing on (20 tries).
TRIES = ([("counters", d) for d in (0.2, 0.5, 0.8, 1.1, 1.3, 1.5, 2.0, 2.5, 3.0, 3.5, 4.5, 6.0)]
         + [("diff", d) for d in (0.4, 1.0, 2.0, 3.0, 4.5, 6.0)]
         + [("info", d) for d in (0.6, 1.8)])


def test_sigint_at_many_points(big: Path) -> None:
    d = big.parent
    before = sorted(os.listdir(d))
    crashed = []
    for cmd, after in TRIES:
        args = {"counters": ["counters", big.name, "out.json.gz"],
                "diff": ["diff", big.name, "big_b.json", "--html", "r.html", "--trace", "m.json"],
                "info": ["info", big.name]}[cmd]
        code, err, took = interrupt(args, d, after)
        if code != 130 or err != "traceaug: interrupted\n":
            if code == 0 and cmd == "info":  # info may end before the signal: fine
                continue
            crashed.append((cmd, after, code, err[-300:]))
        assert sorted(os.listdir(d)) == before, (cmd, after)  # no output, no temporary file
        assert took < 5, (cmd, after, took)  # typically 0.1 s; slack for a loaded machine
    assert crashed == []


def test_sigterm_exits_143(big: Path) -> None:
    code, err, _ = interrupt(["counters", big.name, "out.json.gz"], big.parent, 1.5, signal.SIGTERM)
    assert (code, err) == (143, "traceaug: interrupted\n")
    assert not (big.parent / "out.json.gz").exists()


def test_ctrl_c_stops_a_long_query_within_a_second(tmp_path: Path) -> None:
    trace = kineto_gen.write(tmp_path / "t.json", kineto_gen.trace())
    sql = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000) "
           "SELECT SUM(x) FROM c")
    code, err, took = interrupt(["query", trace.name, sql], tmp_path, 3.0)
    assert (code, err) == (130, "traceaug: interrupted\n")
    assert took < 1.0
