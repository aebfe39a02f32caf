"""``traceaug open``: a trace (or a job, merged) in the Perfetto UI bundled with traceaug."""

from __future__ import annotations

from pathlib import Path

import traceaug.paths as paths

from ..atomic import scratch
from .declare import Call, Command, argument, open_options, serve
from .merge import write


def open_trace(call: Call) -> None:
    """TRACE served until Ctrl-C: an nsys export as its temporary conversion (under its own
    name), a directory of ranks as their merged trace (``merge``'s)."""
    from ..read.inputs import trace_input

    if call["b"] is not None:
        from .diff import open_pair

        open_pair(call)
        return
    trace, browser = call["trace"], not call["no_browser"]
    if not trace.is_dir():
        serve(trace_input(trace), port=call["port"], browser=browser, name=Path(trace).name)
        return
    with scratch("traceaug-open-") as tmp:
        merged = tmp / f"{trace.name}.merged.json.gz"
        write(call, merged)
        serve(merged, port=call["port"], browser=browser, name=merged.name)


COMMAND = Command(
    "open", "Open TRACE in the Perfetto UI bundled with traceaug (offline, 127.0.0.1 only); a "
    "directory of ranks opens as one trace (what `traceaug merge` writes); `open A B` opens what "
    "`traceaug diff A B --open` does.",
    (argument("trace", type=paths.Input()), argument("b", type=paths.Input(), required=False),
     *open_options()),
    open_trace, lambda result, call: None, inputs=("trace", "b"), rank_selects=False,
    prepare=lambda call: _port_free(call))


def _port_free(call: Call) -> None:
    """A busy or reserved ``--port`` refused before any work (a job's merge takes seconds)."""
    from ..view.server import check_port

    check_port(call["port"])
