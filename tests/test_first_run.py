"""The first run compiles the wasm engine for seconds: a terminal is told why it waits."""

from __future__ import annotations

import io
import sys

import pytest

from traceaug.engine import wasm_module


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_cache_miss_says_it_compiles_on_a_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("TRACEAUG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TRACEAUG_NO_PROGRESS", raising=False)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    build = wasm_module._load_build.__wrapped__(False)  # not the process's cached build
    assert not build.from_cache
    text = terminal.getvalue()
    assert text.startswith("\r\x1b[Ktraceaug: compiling the trace processor (first run only")
    assert str(tmp_path) in text and text.endswith("…\n") and text.count("\n") == 1
    assert "takes about 20-30 s" in text  # how long to wait, not "a few seconds"
    again = Terminal()
    monkeypatch.setattr(sys, "stderr", again)
    assert wasm_module._load_build.__wrapped__(False).from_cache  # now cached: nothing said
    assert again.getvalue() == ""


def test_no_note_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from traceaug.progress import note

    note("compiling")
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys, "stderr", Terminal())
    monkeypatch.setenv("TRACEAUG_NO_PROGRESS", "1")
    note("compiling")
    assert sys.stderr.getvalue() == ""
