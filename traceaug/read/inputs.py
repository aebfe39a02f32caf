"""Resolve a trace argument: one file, or a directory of per-rank traces and nsys exports.

A rank comes from ``distributedInfo.rank`` (parsed as JSON, compact or not) or an nsys
export's MPI rank (``nsys.recorded_rank``), else from the file name (``rank-3``,
``rank_3``, ``rank3``), else it is reported. Files traceaug wrote itself carry a
``"traceaug"`` top-level key and are skipped where the directory also holds traces it did not
write (their inputs); a directory of outputs alone is read as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import orjson

from ..errors import TraceaugError
from . import source

TRACE_SUFFIXES = (".json", ".json.gz")
EXPORT_SUFFIXES = (".sqlite",)  # nsys export --type sqlite
OUTPUT_MARK = b'"traceaug"'
_DIST = re.compile(rb'"distributedInfo"\s*:\s*(\{[^{}]*\})')
_NAME_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_PEEK = 1 << 20


@dataclass(frozen=True)
class TraceFile:
    """One input file as the user named it (an nsys export stays its ``.sqlite``: readers take
    ``trace_input(path)``) and the rank it belongs to (None for a lone file)."""

    path: Path
    rank: int | None


def _peek(path: Path) -> bytes:
    out = b""
    for block in source.iter_blocks(path, block=_PEEK):
        out = block
        break
    return out


def rank_of(path: Path, head: bytes | None = None) -> int | None:
    """The rank recorded in the file, else the one in its name, else None."""
    from . import nsys

    head = _peek(path) if head is None else head
    if head.startswith(nsys.SQLITE_MAGIC):
        rank = nsys.recorded_rank(path)
        if rank is not None:
            return rank
    elif m := _DIST.search(head):
        try:
            rank = orjson.loads(m.group(1)).get("rank")
        except orjson.JSONDecodeError:
            rank = None
        if isinstance(rank, int):
            return rank
    m = _NAME_RANK.search(path.name)
    return int(m.group(1)) if m else None


def is_traceaug_output(head: bytes) -> bool:
    """True for files traceaug wrote (their first bytes carry the marker key)."""
    start = head.lstrip()[:4096]
    return start.startswith(b"{") and OUTPUT_MARK in start


def trace_input(path: str | Path) -> Path:
    """The file to read for ``path``: itself, or for an Nsight Systems SQLite export its Chrome
    JSON conversion (a temporary file, made once per process); a ``.nsys-rep`` is an error.
    Messages name ``path``, never the conversion."""
    from . import nsys

    path = Path(path)
    if nsys.is_report(path):
        raise nsys.report_error(path)
    if path.is_file() and nsys.is_sqlite(path):
        return nsys.converted(path)
    return path


def resolve(path: str | Path) -> list[TraceFile]:
    """Files to read for ``path``; a directory must give one file per distinct rank."""
    path = Path(path)
    if not path.is_dir():
        from .nsys import is_report, report_error

        if is_report(path):
            raise report_error(path)
        if not path.exists():
            raise TraceaugError(f"{path}: no such file or directory")
        return [TraceFile(path, None)]
    inputs: list[tuple[Path, bytes]] = []
    outputs: list[tuple[Path, bytes]] = []
    for f in sorted(path.iterdir()):
        if (not f.is_file() or not f.name.endswith((*TRACE_SUFFIXES, *EXPORT_SUFFIXES))
                or f.stat().st_size == 0):
            continue
        head = _peek(f)
        (outputs if is_traceaug_output(head) else inputs).append((f, head))
    if not inputs and not outputs:
        raise TraceaugError(f"{path}: no trace files (*.json, *.json.gz, *.sqlite) in this "
                            "directory")
    # traceaug's outputs beside their inputs are derived copies, skipped; a directory of
    # outputs only (``counters DIR OUT/``) is read as the ranks it holds
    found: dict[int, Path] = {}
    unranked: list[Path] = []
    for f, head in inputs or outputs:
        rank = rank_of(f, head)
        if rank is None:
            unranked.append(f)
        elif rank in found:
            raise TraceaugError(f"{path}: rank {rank} appears twice: {found[rank].name} and {f.name}")
        else:
            found[rank] = f
    if unranked:
        if not found and len(unranked) == 1:
            return [TraceFile(unranked[0], None)]
        names = ", ".join(f.name for f in unranked)
        raise TraceaugError(f"{path}: cannot tell the rank of {names} (no distributedInfo.rank "
                            "or MPI rank recorded, no rank in the file name)")
    return [TraceFile(found[r], r) for r in sorted(found)]


def select(path: str | Path, rank: int | None = None) -> list[TraceFile]:
    """The files a command reads for ``path`` and ``--rank``: every rank of a directory, or
    the one asked for. A lone file is taken for any rank unless the file itself says it
    holds another one (``rank_of``); it then carries the rank asked for."""
    files = resolve(path)
    if rank is None:
        return files
    if len(files) == 1 and files[0].rank is None:
        found = rank_of(files[0].path)
        if found is not None and found != rank:
            raise TraceaugError(f"{path}: holds rank {found}, not rank {rank}")
        return [TraceFile(files[0].path, rank)]
    chosen = [f for f in files if f.rank == rank]
    if not chosen:
        raise TraceaugError(f"{path}: no trace for rank {rank} "
                            f"(it has {', '.join(str(f.rank) for f in files)})")
    return chosen


def output_name(path: Path) -> str:
    """The file name a rewriter's output of ``path`` gets in an output directory: its own, or
    for an nsys export the name of its Chrome JSON (``run.sqlite`` -> ``run.json``)."""
    from . import nsys

    return path.stem + ".json" if nsys.is_sqlite(path) else path.name
