"""`traceaug open`: loopback only, only the UI's files and the one trace, a clean Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import TESTDATA


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture
def server():
    trace = TESTDATA / "small_training.json.gz"
    proc = subprocess.Popen([sys.executable, "-m", "traceaug", "open", str(trace), "--no-browser"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    m = re.search(r"(http://127\.0\.0\.1:(\d+))/#!/\?url=([^&\s]+)", line)  # then &startupCommands
    assert m, line
    yield proc, m.group(1), urllib.request.unquote(m.group(3)), trace
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_serves_only_the_ui_and_the_trace(server) -> None:
    _proc, base, trace_url, trace = server
    assert trace_url == f"{base}/trace/{trace.name}"
    with urllib.request.urlopen(trace_url) as r:
        assert r.read() == trace.read_bytes()
    assert status(base + "/") == 200
    assert status(base + "/v52.0-6b9586def/frontend_bundle.js") == 200
    assert status(base + "/trace/other.json") == 404
    assert status(base + "/v52.0-6b9586def/%2e%2e/%2e%2e/__init__.py") == 404
    assert status(base + "/../../../etc/passwd") == 404
    port = int(base.rsplit(":", 1)[1])
    assert listening_addresses(port) == ["127.0.0.1"]  # loopback only


def listening_addresses(port: int) -> list[str]:
    """IPv4 addresses listening on ``port``, from /proc/net/tcp (no traffic needed)."""
    table = Path("/proc/net/tcp")
    if not table.exists():
        pytest.skip("no /proc/net/tcp on this system")
    out = []
    for line in table.read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A = LISTEN
            out.append(".".join(str(int(addr[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_cleanly(server, sig) -> None:
    """Stopped by a signal, ``open`` exits as every command does: 128 + its number."""
    proc, base, _url, _trace = server
    assert status(base + "/") == 200
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 128 + sig, err
    assert "interrupted" in err and "Traceback" not in err
    time.sleep(0.2)
    with pytest.raises(OSError):
        urllib.request.urlopen(base + "/", timeout=2)


def test_missing_trace_is_an_error(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "traceaug", "open", str(tmp_path / "x.json"), "--no-browser"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "x.json: no such file" in r.stderr
