"""``traceaug convert``: an Nsight Systems SQLite export to a Chrome JSON trace; ``traceaug
open``: a trace (or a job, merged) in the Perfetto UI bundled with traceaug."""

from __future__ import annotations

import tempfile
from pathlib import Path

from .. import paths
from .declare import Call, Command, argument, echo, open_checks, open_options, option, serve
from .merge import write


def convert(call: Call) -> str:
    """Convert REPORT into OUT and say what was written."""
    from ..read import nsys

    n = nsys.convert(call["src"], call["dst"])
    return f"wrote {call['dst']}: {n} events\n"


def _converted(text: str, call: Call) -> None:
    echo(paths.shown(text), err=True)
    if call["open_ui"]:
        serve(call["dst"], port=call["port"], browser=not call["no_browser"])


def open_trace(call: Call) -> None:
    """TRACE served until Ctrl-C: an nsys export as its temporary conversion (under its own
    name), a directory of ranks as their merged trace (``merge``'s)."""
    from ..read.inputs import trace_input

    trace, browser = call["trace"], not call["no_browser"]
    if not trace.is_dir():
        serve(trace_input(trace), port=call["port"], browser=browser, name=Path(trace).name)
        return
    with tempfile.TemporaryDirectory(prefix="traceaug-open-") as tmp:
        merged = Path(tmp) / f"{trace.name}.merged.json.gz"
        write(call, merged)
        serve(merged, port=call["port"], browser=browser, name=merged.name)


CONVERT = Command(
    "convert", "Convert an Nsight Systems SQLite export (`nsys export --type sqlite`) to a Chrome "
    "JSON trace in Kineto conventions (OUT.json or OUT.json.gz).",
    (argument("src", metavar="REPORT", type=paths.Input()),
     argument("dst", metavar="OUT", type=paths.Output()),
     option("--open", "open_ui", is_flag=True, help="Open OUT in the Perfetto UI when done."),
     *open_options()),
    convert, _converted, lambda text, call: text,
    prepare=lambda call: open_checks(call["open_ui"], call["dst"], call["port"], "OUT to be a file"))
OPEN = Command(
    "open", "Open TRACE in the Perfetto UI bundled with traceaug (offline, 127.0.0.1 only); a "
    "directory of ranks opens as one trace (what `traceaug merge` writes).",
    (argument("trace", type=paths.Input()), *open_options()),
    open_trace, lambda result, call: None, inputs=("trace",), rank_selects=False)
