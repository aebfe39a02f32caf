"""Resolve a trace argument to the file to read (``trace_input``), a capture argument to its traces
(``capture_files``), and name outputs (ranks: ``read.ranks``)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import TraceaugError


def trace_input(path: str | Path) -> Path:
    """The file to read for ``path``: itself, or an nsys SQLite export's Chrome JSON conversion (temporary,
    made once per process); a ``.nsys-rep`` is an error. Messages name ``path``, never the conversion."""
    from . import nsys

    path = Path(path)
    if nsys.is_report(path):
        raise nsys.report_error(path)
    if path.is_file() and nsys.is_sqlite(path):
        return nsys.converted(path)
    return path


def output_name(path: Path) -> str:
    """The file name a rewriter's output of ``path`` gets in an output directory: its own, or
    for an nsys export the name of its Chrome JSON (``run.sqlite`` -> ``run.json``)."""
    from . import nsys

    return path.stem + ".json" if nsys.is_sqlite(path) else path.name


def capture_files(path: str | Path) -> list[tuple[Path, int | None]]:
    """The capture traces ``path`` names: itself, or the files a directory's ``execution_details.json``
    lists (with their batch sizes); the user's error naming the file when that is unreadable."""
    path = Path(path)
    if not path.is_dir():
        return [(path, None)]
    details = path / "execution_details.json"
    try:
        entries = json.loads(details.read_text())
        return [(path / e["file"], e.get("batch_size")) for e in entries]
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise TraceaugError(f"{details}: not a capture list (a JSON list of {{\"file\", \"batch_size\", "
                            f"\"mode\"}}: {e})") from None
