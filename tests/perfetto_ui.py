"""Drive the Perfetto UI that ``traceaug open`` serves, in headless Chromium (for test_browser.py).

What: start ``python -m traceaug open TRACE --no-browser``, read the URL it prints on stderr, open
that URL in one navigation in a Chromium page that may reach 127.0.0.1 only, wait until the UI has
loaded the trace (or shown its error), then read the UI's own state:

* SQL in the UI's engine: ``await window.app.trace.engine.query(sql)`` gives a ``QueryResult``;
  ``columns()`` names the columns and ``iter(spec)`` walks the rows (``it.valid()``/``it.next()``,
  the cell of column ``c`` is ``it[c]``; a ``null`` spec entry accepts any type; 64-bit
  integers come back as BigInt and are turned into numbers here).
* the track list: ``window.app.trace.workspace.flatTracks``, nodes with ``name``, ``uri`` and
  ``fullPath``; ``window.app.trace.tracks.getTrack(uri)`` says whether a renderer is registered.
* errors: ``alert``/``confirm`` dialogs (recorded and dismissed) and Perfetto's error modal
  (``.pf-modal-dialog`` in the DOM, e.g. "JSON trace file is incomplete").

Why: a file traceaug writes is only useful if the Perfetto UI users open (v52, the very build
``traceaug open`` serves) reads it as traceaug's own engine does. This module keeps the browser
plumbing out of the tests, so each test states counts, not "the page loaded".
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.util
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
VIEWPORT = {"width": 1600, "height": 1000}
SERVER_START_TIMEOUT_S = 30.0
LOAD_TIMEOUT_S = 90.0
POLL_S = 0.25
URL_LINE = re.compile(r"^Perfetto UI with (?P<name>.+): (?P<url>http://127\.0\.0\.1:\d+/#!/\?url=\S+)$")

# One snapshot of the UI: has the trace finished loading, and is an error modal up?
STATE_JS = """() => {
  const app = window.app;
  const trace = app && app.trace;
  const ready = !!(trace && trace.engine && !app.isLoadingTrace
                   && trace.engine.numRequestsPending === 0);
  const modal = document.querySelector('.pf-modal-dialog');
  return {
    ready: ready,
    app: !!app,
    loading: !!(app && app.isLoadingTrace),
    tracks: ready ? trace.workspace.flatTracks.length : -1,
    modal: modal ? modal.innerText : null,
  };
}"""

QUERY_JS = """async (sql) => {
  const result = await window.app.trace.engine.query(sql);
  const cols = result.columns();
  const spec = Object.fromEntries(cols.map((c) => [c, null]));
  const rows = [];
  for (const it = result.iter(spec); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) {
      const v = it[c];
      row[c] = typeof v === 'bigint' ? Number(v) : v;
    }
    rows.push(row);
  }
  return rows;
}"""

TRACKS_JS = """() => window.app.trace.workspace.flatTracks.map((t) => ({
  name: t.name ?? t.title ?? '',
  uri: t.uri ?? null,
  path: t.fullPath,
  registered: !!(t.uri && window.app.trace.tracks.getTrack(t.uri)),
  expanded: !!t.expanded,
}))"""

# Expand the groups holding `names`, pin `pin`, scroll to the first of `names`, hide the sidebar,
# then ask for a redraw.
SHOW_JS = """([names, pin]) => {
  const trace = window.app.trace;
  const ws = trace.workspace;
  const nodes = ws.flatTracks.filter((t) => names.includes(t.name));
  for (const n of nodes) {
    for (let p = n.parent; p && p.expand; p = p.parent) p.expand();
    if (n.name === pin && !n.isPinned) n.pin();
  }
  if (nodes.length) trace.scrollTo({track: {uri: nodes[0].uri, expandGroup: true}});
  if (window.app.sidebar.visible) window.app.sidebar.toggleVisibility();
  window.app.raf.scheduleFullRedraw();  // these API calls change state but do not redraw
  return {shown: nodes.map((n) => n.name), pinned: ws.pinnedTracks.map((t) => t.name)};
}"""


# The pinned panel's tracks whose title is wholly inside the panel's box (the panel scrolls:
# a pinned track can be off screen), top to bottom.
PINNED_ON_SCREEN_JS = """() => {
  const panel = document.querySelector('.pf-viewer-page__pinned-track-tree');
  if (!panel) return [];
  const box = panel.getBoundingClientRect();
  const names = new Set(window.app.trace.workspace.pinnedTracks.map((t) => t.name));
  return [...panel.querySelectorAll('*')]
    // each title's full name (the title itself may be cut in the middle)
    .filter((e) => e.classList.contains('pf-track__title-popup') && names.has(e.textContent))
    .filter((e) => {
      const r = e.getBoundingClientRect();
      return r.height > 0 && r.top >= box.top && r.bottom <= box.bottom;
    })
    .sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top)
    .map((e) => e.textContent);
}"""


IDLE_JS = """() => {
  const raf = window.app.raf;
  const redraws = typeof raf.hasPendingRedraws === 'function' ? raf.hasPendingRedraws()
                                                              : raf.hasPendingRedraws;
  return window.app.trace.engine.numRequestsPending === 0 && !redraws;
}"""


def missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not CHROMIUM.is_file():
        return f"{CHROMIUM} not found (Debian: apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright Python package is not installed (pip install playwright)"
    return None


def require(test_file: str) -> None:
    """At the top of a browser test module: skip it, with a warning naming it, when Chromium
    or Playwright is missing; under CI (``CI`` set), fail instead (CI installs both)."""
    import warnings

    import pytest
    from conftest import under_ci

    why = missing()
    if why is None:
        return
    if under_ci():
        pytest.fail(f"browser tests cannot run under CI: {why}", pytrace=False)
    warnings.warn(f"tests/{Path(test_file).name} skipped: {why}", pytest.PytestWarning,
                  stacklevel=2)
    pytest.skip(f"browser tests need Chromium and Playwright: {why}", allow_module_level=True)


@contextlib.contextmanager
def chromium():
    """Playwright started and Debian's Chromium launched (``launch``), closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            yield browser
        finally:
            browser.close()


def launch(playwright):
    """Debian's Chromium, headless, with a fresh profile (Playwright's temporary user data dir)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                                      headless=True)


def open_offline(page, path: Path, record: dict) -> None:
    """Open the page file ``path`` with every request other than the file's own (``file:``,
    ``blob:``, ``data:``) blocked and listed in ``record["blocked"]``, its script errors in
    ``record["errors"]``; return once the page says it is drawn (``body[data-ready]``)."""

    def route(r) -> None:
        if r.request.url.startswith(("file://", "blob:", "data:")):
            r.continue_()
        else:  # nothing leaves the machine
            record["blocked"].append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda e: record["errors"].append(str(e)))
    page.goto(Path(path).as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)


class TraceServer:
    """``traceaug open TRACE --no-browser`` as a subprocess; a context manager that always stops it."""

    def __init__(self, trace: Path, announced: str | None = None) -> None:
        self.trace = Path(trace)
        self.announced = announced or self.trace.name  # a glob: the name the server prints
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.stderr: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()

    def __enter__(self) -> TraceServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "traceaug", "open", str(self.trace), "--no-browser"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        try:
            self.url = self._wait_for_url()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"`traceaug open {self.trace}` exited before printing its URL "
                                     f"(code {self.proc.wait()}): {' | '.join(self.stderr)}")
            self.stderr.append(line)
            m = URL_LINE.match(line)
            if m:
                assert fnmatch.fnmatchcase(m["name"], self.announced), (
                    f"server announced {m['name']!r}, not {self.announced}")
                return m["url"]
        raise AssertionError(f"`traceaug open {self.trace}` printed no URL within "
                             f"{SERVER_START_TIMEOUT_S:.0f} s: {' | '.join(self.stderr)}")

    def stop(self) -> None:
        """Ctrl-C (the server's own way out), then SIGTERM, then SIGKILL; always reaped."""
        proc = self.proc
        if proc is None:
            return
        for stop in (lambda: proc.send_signal(signal.SIGINT), proc.terminate, proc.kill):
            if proc.poll() is not None:
                break
            stop()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
        proc.wait()
        self._drainer.join(timeout=10)  # it reads stderr to its end: close it only after
        if proc.stderr is not None:
            proc.stderr.close()


class PerfettoPage:
    """One browser context and page on the UI; a context manager that closes both."""

    def __init__(self, browser, url: str, context=None) -> None:
        self.url = url
        self.own = context is None  # else a page of ``context`` (another page's: ``PerfettoPage.context``)
        self.context = browser.new_context(viewport=VIEWPORT) if context is None else context
        self.page = self.context.new_page()
        self.page.set_default_timeout(LOAD_TIMEOUT_S * 1000)
        self.dialogs: list[str] = []
        self.page_errors: list[str] = []
        self.blocked: list[str] = []
        self.page.route("**/*", self._route)
        self.page.on("dialog", self._dialog)
        self.page.on("pageerror", lambda e: self.page_errors.append(str(e)))

    def __enter__(self) -> PerfettoPage:
        return self

    def __exit__(self, *exc) -> None:
        if self.own:
            self.context.close()
        else:
            self.page.close()

    def _route(self, route) -> None:
        url = route.request.url
        if url.startswith(("http://127.0.0.1:", "http://127.0.0.1/")) or url.startswith(("data:", "blob:")):
            route.continue_()
        else:  # nothing leaves the machine
            self.blocked.append(url)
            route.abort()

    def _dialog(self, dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def open(self, timeout: float = LOAD_TIMEOUT_S) -> dict:
        """Navigate once; wait until the trace is loaded (and stays so) or an error shows up.

        Returns the last UI state (see STATE_JS). "Loaded" means ``window.app.trace.engine``
        exists, ``app.isLoadingTrace`` is false, the engine has no pending request, and the
        track count is unchanged across two polls.
        """
        self.page.goto(self.url, wait_until="load")
        deadline = time.monotonic() + timeout
        last: dict = {}
        stable = 0
        while True:
            state = self.page.evaluate(STATE_JS)
            if self.dialogs or state["modal"]:
                return state
            if state["ready"]:
                stable = stable + 1 if last.get("ready") and last["tracks"] == state["tracks"] else 0
                if stable >= 2:
                    return state
            last = state
            if time.monotonic() > deadline:
                raise AssertionError(f"the UI neither loaded {self.url} nor showed an error within "
                                     f"{timeout:.0f} s; last state {state}; page errors {self.page_errors}")
            self.page.wait_for_timeout(POLL_S * 1000)  # lets Playwright deliver dialog events

    def errors(self) -> list[str]:
        """Every error the UI showed: dialogs, then the error modal's text."""
        modal = self.page.evaluate(STATE_JS)["modal"]
        return self.dialogs + ([f"modal: {modal}"] if modal else [])

    def query(self, sql: str) -> list[dict]:
        """Rows of ``sql`` run by the UI's own trace processor, as dicts."""
        try:
            return self.page.evaluate(QUERY_JS, sql)
        except Exception as e:  # a Playwright Error carrying the engine's message
            raise AssertionError(f"the UI's engine failed on {sql!r}: {e}") from None

    def tracks(self) -> list[dict]:
        """The workspace's tracks in the UI: name, uri, path (group names), renderer present,
        expanded (a group)."""
        return self.page.evaluate(TRACKS_JS)

    def show_tracks(self, names: list[str], pin: str | None = None) -> dict:
        """Expand the groups holding ``names``, pin ``pin``, scroll there, hide the sidebar."""
        shown = self.page.evaluate(SHOW_JS, [names, pin])
        self.wait_idle()
        return shown

    def pinned(self) -> list[str]:
        """The workspace's pinned tracks, in the pinned panel's order."""
        return self.page.evaluate("() => window.app.trace.workspace.pinnedTracks.map((t) => t.name)")

    def pinned_on_screen(self) -> list[str]:
        """The titles of the pinned tracks the user sees (wholly inside the pinned panel)."""
        return self.page.evaluate(PINNED_ON_SCREEN_JS)

    def wait_idle(self, settle_s: float = 1.0) -> None:
        """Wait for the engine to answer the tracks' queries and for pending redraws, twice."""
        for _ in range(2):
            self.page.wait_for_timeout(settle_s * 1000)
            self.page.wait_for_function(IDLE_JS, polling=int(POLL_S * 1000))

    def shows_text(self, text: str) -> bool:
        """Whether an element with exactly this text is visible (track titles are DOM text)."""
        return self.page.get_by_text(text, exact=True).filter(visible=True).count() > 0

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path))
