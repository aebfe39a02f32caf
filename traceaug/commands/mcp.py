"""``traceaug mcp``: a Model Context Protocol server on stdio (the official ``mcp`` SDK, ``traceaug[mcp]``)
whose tools are the commands with a ``--format json``, their parameters made from the declarations; each
call runs the command line in a child process, so a tool returns exactly the CLI's JSON and its errors."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

import traceaug.interrupt as interrupt
import traceaug.paths as paths

from ..errors import TraceaugError
from . import NAMES, load
from .declare import POSITIVE, Command, option

# Parameters no tool takes: outputs and the UI (a tool only reads), the format (always json), reading
# SQL from a file (a path the roots would not check). ``--summary-only`` is always given.
NOT_TAKEN = frozenset({"fmt", "open_ui", "port", "no_browser", "summary_only", "keep_bytes", "sql_file",
                       "cache", "no_cache"})
# Commands not served: ``summary``'s --config names further files, which the roots cannot check; ``cache``
# is no question about a trace (and ``cache clear`` removes files).
NOT_SERVED = frozenset({"mcp", "summary", "cache"})
GATE_EXIT = 3  # diff --fail-on-regression found one: its JSON is the answer (its gate says so)
PROGRESS_S = 1.0  # a progress notification this often while a tool runs
MAX_CHARS, MAX_ROWS, TIMEOUT_S = 200_000, 1_000, 600.0
SIGNAL_POLL_S = 0.05  # the server looks for Ctrl-C / SIGTERM this often


def tool_names() -> list[str]:
    """The commands served as tools: those with ``--format json`` (``traceaug NAME``'s JSON)."""
    return [n for n in NAMES if n not in NOT_SERVED and _json(load(n))]


def _json(command: Command) -> bool:
    return any(isinstance(p, click.Option) and p.name == "fmt" and "json" in p.type.choices
               for p in command.params)


def _taken(command: Command) -> list[click.Parameter]:
    """``command``'s parameters a tool takes: every one it exposes but outputs and ``NOT_TAKEN``."""
    return [p for p in command.click_params() if p.expose_value and p.name not in NOT_TAKEN
            and not isinstance(p.type, paths.Output)]


def _type(p: click.Parameter) -> dict:
    """A click parameter's JSON Schema type."""
    t = p.type
    if isinstance(t, paths.Input):
        out: dict = {"type": "string", "description": "a path under the server's roots"}
    elif isinstance(p, click.Option) and p.is_flag:
        out = {"type": "boolean"}
    elif isinstance(t, click.Choice):
        out = {"type": "string", "enum": list(t.choices)}
    elif isinstance(t, click.types.IntParamType):
        out = {"type": "integer"}
    elif isinstance(t, click.types.FloatParamType):
        out = {"type": "number"}
    else:
        out = {"type": "string"}
    for bound, key in (("min", "minimum"), ("max", "maximum")):
        if getattr(t, bound, None) is not None:
            out[key] = getattr(t, bound)
    if getattr(p, "multiple", False) or p.nargs == -1:
        out = {"type": "array", "items": out}
    return out


def input_schema(command: Command) -> dict:
    """The tool's arguments: ``command``'s parameters (``_taken``) with their help and defaults."""
    props, required = {}, []
    for p in _taken(command):
        prop = _type(p)
        help_text = getattr(p, "help", None)
        if help_text:
            prop["description"] = " ".join(filter(None, (prop.get("description"), help_text)))
        default = p.default
        if default is not None and type(default).__name__ != "Sentinel" and not callable(default):
            prop["default"] = list(default) if isinstance(default, tuple) else default
        props[p.name] = prop
        if isinstance(p, click.Argument) and p.required:
            required.append(p.name)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


class Server:
    """The tools over ``roots``: paths checked (symlinks resolved), the command run, its output capped."""

    def __init__(self, roots: list[Path], max_chars: int = MAX_CHARS, max_rows: int = MAX_ROWS,
                 timeout_s: float = TIMEOUT_S) -> None:
        self.given = [Path(os.path.abspath(r)) for r in roots]  # as the user named them (shown, passed on)
        self.roots = [Path(os.path.realpath(r)) for r in roots]
        self.max_chars, self.max_rows, self.timeout_s = max_chars, max_rows, timeout_s

    def path(self, value: str) -> str:
        """``value`` (relative: to the first root) as named, if it resolves under a root (a root reached
        through a symlink named the same in the output as in the CLI's), else the one-line error."""
        if not isinstance(value, str) or "://" in value:
            raise TraceaugError(f"{value}: not a path under the server's roots")
        named = os.path.abspath(self.given[0] / value)
        real = os.path.realpath(named)
        if not any(os.path.commonpath([real, str(r)]) == str(r) for r in self.roots):
            raise TraceaugError(f"{value}: outside the roots this server reads "
                                f"({', '.join(map(str, self.given))})")
        return named

    def argv(self, name: str, arguments: dict) -> list[str]:
        """``traceaug NAME ...`` for a tool call's arguments (``--format json``; ``--summary-only``)."""
        command = load(name)
        taken = {p.name: p for p in _taken(command)}
        unknown = sorted(set(arguments) - set(taken))
        if unknown:
            raise TraceaugError(f"{name}: no such argument {', '.join(unknown)} "
                                f"(takes {', '.join(taken)})")
        missing = [n for n, p in taken.items() if p.required and arguments.get(n) is None]
        if missing:
            raise TraceaugError(f"{name}: missing argument {', '.join(missing)}")
        options, positional = ["--format", "json"], []
        if any(p.name == "summary_only" for p in command.click_params()):
            options.append("--summary-only")
        for n, p in taken.items():
            value = arguments.get(n)
            if value is None:
                continue
            values = list(value) if isinstance(value, (list, tuple)) else [value]
            if isinstance(p.type, paths.Input):
                values = [self.path(v) for v in values]
            if isinstance(p, click.Argument):
                positional += map(str, values)
            elif p.is_flag:
                if p.secondary_opts:  # --full/--lean
                    options.append(p.opts[0] if value else p.secondary_opts[0])
                elif bool(value) != bool(p.default):
                    options.append(p.opts[0])
            else:
                for v in values:
                    options += [p.opts[-1], str(v)]
        return [name, *options, "--", *positional]  # "--": an SQL text may start with "-"

    async def run(self, name: str, arguments: dict, progress: Callable | None = None) -> str:
        """The CLI's JSON for tool ``name``, capped (``cap``); a failure raised as its one-line error."""
        argv = self.argv(name, arguments)
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "traceaug", *argv, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "TRACEAUG_NO_PROGRESS": "1"})
        done = asyncio.ensure_future(child.communicate())
        start = time.monotonic()
        try:
            if progress is not None:
                await progress(0.0, f"traceaug {name}: started")
            while not done.done():
                await asyncio.wait({done}, timeout=PROGRESS_S)
                elapsed = time.monotonic() - start
                if elapsed > self.timeout_s:
                    raise TraceaugError(f"{name}: still running after {self.timeout_s:g} s; stopped")
                if progress is not None and not done.done():
                    await progress(elapsed, f"traceaug {name}: {elapsed:.0f} s")
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        out, err = done.result()
        if child.returncode and not (child.returncode == GATE_EXIT and out.strip()):
            lines = err.decode(errors="replace").strip().splitlines() or [f"exit {child.returncode}"]
            raise TraceaugError(lines[-1].removeprefix("traceaug: error: "))
        return cap(out.decode(), self.max_chars, self.max_rows if name == "query" else None)


def cap(text: str, max_chars: int, max_rows: int | None = None) -> str:
    """JSON ``text`` at most ``max_chars`` long (and a query at most ``max_rows`` rows): the longest list
    in it halved until it fits, each cut said under ``"truncated"`` (where, rows kept, rows in all)."""
    import orjson

    data = orjson.loads(text)
    cuts: dict[str, list[int]] = {}

    def longest(node: Any, where: str) -> tuple[int, str, Any]:
        best = (len(node), where, node) if isinstance(node, list) else (-1, "", None)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            if isinstance(v, (dict, list)):
                best = max(best, longest(v, f"{where}/{k}"), key=lambda b: b[0])
        return best

    def cut(where: str, node: list, keep: int) -> None:
        cuts.setdefault(where or "/", [keep, len(node)])[0] = keep
        del node[keep:]

    if max_rows is not None:
        rows = data.get("rows") if isinstance(data, dict) else data
        if isinstance(rows, list) and len(rows) > max_rows:
            cut("/rows" if isinstance(data, dict) else "", rows, max_rows)
    size = len(text)
    while size > max_chars:
        n, where, node = longest(data, "")
        if n <= 1:
            break
        cut(where, node, n // 2)
        size = len(orjson.dumps(data))
    if not cuts:
        return text
    if isinstance(data, list):
        data = {"rows": data}
        cuts = {("/rows" + k if k != "/" else "/rows"): v for k, v in cuts.items()}
    data["truncated"] = [{"at": k, "kept": kept, "of": total} for k, (kept, total) in cuts.items()]
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"


def serve(server: Server) -> None:
    """Serve the tools on stdin / stdout until the client closes them."""
    try:
        import anyio
        import mcp.server.stdio
        import mcp_types as types
        from mcp.server.lowlevel import Server as Lowlevel
    except ImportError:
        raise TraceaugError("mcp: the MCP SDK is not installed; pip install 'traceaug[mcp]'") from None
    from ..version import __version__

    names = {n.replace("-", "_"): n for n in tool_names()}

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t, description=load(n).help + " (read-only: `traceaug " + n + " --format json`)",
                       input_schema=input_schema(load(n)),
                       annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False))
            for t, n in names.items()])

    async def call_tool(ctx, params) -> types.CallToolResult:
        meta = ctx.meta or {}
        token = meta.get("progress_token", meta.get("progressToken"))

        async def progress(elapsed: float, message: str) -> None:
            if token is not None:
                await ctx.session.send_progress_notification(token, elapsed, None, message,
                                                             related_request_id=ctx.request_id)
        try:
            if params.name not in names:
                raise TraceaugError(f"{params.name}: no such tool (tools: {', '.join(names)})")
            text = await server.run(names[params.name], dict(params.arguments or {}), progress)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        except TraceaugError as e:  # said as the command line says it: one line
            text = " ".join(f"traceaug: error: {e}".split())
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)

    app = Lowlevel("traceaug", version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with mcp.server.stdio.stdio_server() as (read, write), anyio.create_task_group() as group:
            group.start_soon(_stop_on_signal, group.cancel_scope)
            await app.run(read, write, app.create_initialization_options())
            group.cancel_scope.cancel()  # the client closed stdin: the watch ends too

    with interrupt.held():  # Ctrl-C / SIGTERM raised inside the loop came out of anyio's task groups as
        asyncio.run(main())  # a printed exception group, or not at all (exit 0): the loop stops instead
    interrupt.check()  # exit 130 / 143


async def _stop_on_signal(scope: Any) -> None:
    """Cancel ``scope`` (the server's) once a signal asked this process to stop."""
    import anyio

    while not interrupt.requested():
        await anyio.sleep(SIGNAL_POLL_S)
    scope.cancel()


def _roots(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """Each ``--root`` a directory, else the one line naming it (click's usage error took three)."""
    for root in value:
        if not os.path.isdir(root):
            why = "not a directory" if os.path.exists(root) else "no such directory"
            raise TraceaugError(f"{root}: --root: {why}")
    return value


COMMAND = Command(
    "mcp", "Serve traceaug's read-only analyses to agents: a Model Context Protocol server on stdin / "
    "stdout (needs `pip install 'traceaug[mcp]'`), one tool per command with a --format json, reading "
    "only paths under the --root directories.",
    (option("--root", "roots", multiple=True, required=True, callback=_roots, metavar="DIRECTORY",
            help="A directory whose files the tools may read (repeatable); any other path is refused."),
     option("--max-chars", type=POSITIVE, default=MAX_CHARS, show_default=True,
            help="A tool's JSON at most this long: its longest lists cut, said under \"truncated\"."),
     option("--max-rows", type=POSITIVE, default=MAX_ROWS, show_default=True,
            help="A query's result at most this many rows."),
     option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=TIMEOUT_S,
            show_default=True, help="Stop a tool call after this many seconds.")),
    lambda call: serve(Server([Path(r) for r in call["roots"]], call["max_chars"], call["max_rows"],
                              call["timeout_s"])),
    show=lambda result, call: None)
