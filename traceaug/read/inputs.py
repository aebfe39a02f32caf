"""Resolve a trace argument to the file to read (``trace_input``) and name outputs (ranks: ``read.ranks``)."""

from __future__ import annotations

from pathlib import Path


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
