"""Where a report page may be written (checked before any trace loads)."""

from __future__ import annotations

from pathlib import Path

from ..errors import TraceaugError


def check_output(out: Path, src: Path) -> None:
    """A page can be written at ``out``: its folder exists, it is no folder and not the input."""
    if out.is_dir():
        raise TraceaugError(f"{out}: is a directory; give a file name for the page")
    if not out.parent.is_dir():
        raise TraceaugError(f"{out}: no such directory: {out.parent}")
    if out.exists() and src.exists() and out.resolve() == src.resolve():
        raise TraceaugError(f"{out}: is the input; choose another output")
