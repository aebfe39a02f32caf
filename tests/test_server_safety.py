"""The `open` server refuses foreign Host headers (DNS rebinding) and odd paths, quietly."""

from __future__ import annotations

import contextlib
import http.client
import io
import threading

import pytest
from click.testing import CliRunner
from conftest import TESTDATA

from traceaug.cli import main
from traceaug.view.server import PerfettoServer


@pytest.fixture(scope="module")
def server():
    srv = PerfettoServer(TESTDATA / "small_training.json.gz", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def get(srv: PerfettoServer, path: str, host: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    conn.putrequest("GET", path, skip_host=True)
    conn.putheader("Host", host if host is not None else f"127.0.0.1:{srv.port}")
    conn.endheaders()
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, body


def test_foreign_host_is_refused(server) -> None:
    trace = "/trace/small_training.json.gz"
    status, body = get(server, trace)
    assert status == 200 and body == (TESTDATA / "small_training.json.gz").read_bytes()
    assert get(server, trace, f"localhost:{server.port}")[0] == 200
    for host in ("attacker.example", f"attacker.example:{server.port}", "127.0.0.1",
                 f"127.0.0.1:{server.port + 1}", "", f"localhost.attacker.example:{server.port}"):
        status, body = get(server, trace, host)
        assert status == 403, host
        assert b"\x1f\x8b" not in body  # not one byte of the trace
    assert get(server, "/", "attacker.example")[0] == 403  # nor the UI


def test_odd_paths_answer_without_traceback(server) -> None:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert get(server, "/%00")[0] == 400
        assert get(server, "/v52.0-6b9586def/%00x.js")[0] == 400
        assert get(server, "/" + "a" * 6000)[0] == 414
        assert get(server, "/" + "a/" * 200 + "x")[0] == 404
        assert get(server, "/trace/%00")[0] == 404
    assert "Traceback" not in stderr.getvalue()


@pytest.mark.parametrize("port", ["70000", "-1", "65536", "x"])
def test_open_port_out_of_range(port: str) -> None:
    res = CliRunner().invoke(main, ["open", str(TESTDATA / "small_training.json.gz"), "--port", port,
                                    "--no-browser"])
    assert res.exit_code == 2
    assert "--port" in res.output and "Traceback" not in res.output


def test_open_on_a_directory_without_ranks_says_so(tmp_path) -> None:
    """``open JOB`` opens a job's ranks merged; a directory with no trace says so, in one line."""
    res = CliRunner().invoke(main, ["open", str(tmp_path), "--no-browser"])
    assert res.exit_code == 1
    assert res.output.strip() == (f"traceaug: error: {tmp_path}: no trace files (*.json, "
                                  "*.json.gz, *.sqlite) in this directory")
