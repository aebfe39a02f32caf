"""One convention for what commands print: results on stdout; ``wrote ...``, URLs and
progress on stderr; help text on every option; ``--open`` takes ``open``'s options."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import click
from click.testing import CliRunner
from conftest import TESTDATA

from traceaug.cli import main

SMALL = TESTDATA / "small_training.json"
COMMANDS = {name: main.get_command(click.Context(main), name)
            for name in main.list_commands(click.Context(main))}  # the group loads them lazily


def test_every_option_of_every_command_has_help() -> None:
    assert len(COMMANDS) >= 18
    missing = [f"{name} {opt.opts[0]}" for name, command in [("traceaug", main), *COMMANDS.items()]
               for opt in command.params if isinstance(opt, click.Option) and not opt.help]
    assert missing == []


def test_counters_prints_its_summary_on_stdout_and_wrote_on_stderr(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    r = CliRunner().invoke(main, ["counters", str(SMALL), str(out)])
    assert r.exit_code == 0, r.output
    assert "Queue length per stream" in r.stdout and "wrote" not in r.stdout
    assert re.fullmatch(rf"wrote {re.escape(str(out))} \(\d+ events added by counters\)\n", r.stderr)
    assert int(r.stderr.split("(")[1].split()[0]) == out.read_text().count('"ph":"C"') > 0


def test_open_options_are_the_same_everywhere() -> None:
    """Every command with --open takes open's --port and --no-browser."""
    def options(name: str) -> dict:
        return {o.name: (o.type.name, repr(o.default), o.is_flag, o.help) for o in COMMANDS[name].params
                if o.name in ("port", "no_browser")}

    with_open = [name for name, c in COMMANDS.items() if any(o.name == "open_ui" for o in c.params)]
    assert set(with_open) >= {"counters", "diff"}
    for name in with_open:
        assert options(name) == options("open"), name
    assert set(options("open")) == {"port", "no_browser"}


def test_counters_open_serves_on_the_given_port_without_a_browser(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out.json.gz"
    proc = subprocess.Popen([sys.executable, "-m", "traceaug", "counters", str(SMALL), str(out),
                             "--open", "--no-browser", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stderr.readline() for _ in range(2)]
        assert lines[0].startswith(f"wrote {out} ("), lines
        url = re.search(r"http://127\.0\.0\.1:(\d+)/\S*", lines[1])
        assert url and int(url.group(1)) == port, lines
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/trace/{out.name}", timeout=10) as r:
            assert r.read() == out.read_bytes()
    finally:
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=20)
    assert proc.returncode == 130  # stopped by Ctrl-C, as every command
    assert "Queue length per stream" in stdout and "http" not in stdout and "wrote" not in stdout
