"""Shared fixtures: where the real traces live, and a skip when they (or the reference tool) are
absent -- a failure under CI, where both are provided."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"
KINETO = SHARED / "kineto"
TESTDATA = ROOT / "testdata"


def under_ci() -> bool:
    """True under CI (``CI`` set and not false), where nothing the suite needs may be missing."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_or_fail(why: str) -> None:
    """Skip the test with WHY; under CI fail it instead (CI provides what was missing)."""
    if under_ci():
        pytest.fail(f"{why} (required under CI)", pytrace=False)
    pytest.skip(why)


def shared_trace(rel: str) -> Path:
    """A path under ../shared/traces, or skip the test with the reason (fail under CI)."""
    path = SHARED / rel
    if not path.exists():
        skip_or_fail(f"real trace {path} not present (../shared/traces is provided for CI)")
    return path


def require_hta() -> None:
    """The reference tool, HTA's newest release (``traceinsight``, ``import hta``), or skip (fail
    under CI, whose test extra installs it)."""
    try:
        import hta  # noqa: F401
    except ImportError:
        skip_or_fail("HTA is not installed (pip install traceinsight, the test extra)")


def kineto_files() -> list[str]:
    """Every Kineto trace file in ../shared/traces/kineto (relative names)."""
    if not KINETO.exists():
        return []
    return sorted(str(p.relative_to(SHARED)) for p in KINETO.rglob("*.json.gz"))


def run_cli(*args: str, text: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m traceaug ARGS`` in a fresh process, its output captured (``text=False``: as
    bytes); ``env``: its whole environment (default: this process's)."""
    return subprocess.run([sys.executable, "-m", "traceaug", *args], capture_output=True,
                          text=text, env=env)


def other_threads() -> list[threading.Thread]:
    """This process's threads but the main one and traceaug's signal watcher: with any alive,
    traceaug stops forking its children (``processes.can_fork``). Tests that use Dask or
    object storage keep them out of this process (their clients' threads never end)."""
    from traceaug import interrupt

    return [t for t in threading.enumerate()
            if t is not threading.main_thread() and not interrupt.is_watcher(t)]


def plan_fields(p) -> dict:
    """What a pass-1 plan (``normalize.Plan``) says, for comparing two plans of one file."""
    return {"held": p.held, "cuts": p.layout.cuts, "header": p.layout.header,
            "trailer": p.layout.trailer, "has_events": p.layout.has_events, "events": p.events,
            "moved": p.moved, "lane_threads": p.lane_threads, "thread_names": p.thread_names,
            "base_ns": p.base_ns, "span_ns": p.span_ns, "exact": p.exact_chunks,
            "first_seqs": p.chunk_first_seq}


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through Playwright (``perfetto_ui.launch``), one per test module."""
    import perfetto_ui
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = perfetto_ui.launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@contextmanager
def started_by(how: str) -> Iterator[None]:
    """Children and pass-1 workers fork while this process has no other thread; a live one
    makes them spawn (``processes.can_fork``)."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait) if how == "spawn" else None
    if other is not None:
        other.start()
    try:
        yield
    finally:
        stop.set()
        if other is not None:
            other.join()
