"""``traceaug convert``: an Nsight Systems SQLite export to a Chrome JSON trace."""

from __future__ import annotations

import traceaug.paths as paths

from .declare import Call, Command, argument, open_checks, open_options, option, said, serve


def convert(call: Call) -> str:
    """Convert REPORT into OUT and say what was written."""
    from ..read import nsys

    n = nsys.convert(call["src"], call["dst"])
    return f"wrote {call['dst']}: {n} events\n"


def _converted(text: str, call: Call) -> None:
    said(text.rstrip("\n"))
    if call["open_ui"]:
        serve(call["dst"], port=call["port"], browser=not call["no_browser"])


COMMAND = Command(
    "convert", "Convert an Nsight Systems SQLite export (`nsys export --type sqlite`) to a Chrome "
    "JSON trace in Kineto conventions (OUT.json or OUT.json.gz).",
    (argument("src", metavar="REPORT", type=paths.Input()),
     argument("dst", metavar="OUT", type=paths.Output()),
     option("--open", "open_ui", is_flag=True, help="Open OUT in the Perfetto UI when done."),
     *open_options()),
    convert, _converted, lambda text, call: text,
    prepare=lambda call: open_checks(call["open_ui"], call["dst"], call["port"], "OUT to be a file"))
