"""A loaded trace: the engine, the file's metadata and its time base. SQL timestamps are ns relative to
``Trace.base_ns`` (nonzero if epoch-µs times were rebased for exactness); ``Trace.absolute`` maps back."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from perfetto.trace_processor.api import TraceProcessorException

import traceaug.runtime as runtime

from .engine.loader import load
from .engine.results import typed_columns
from .errors import TraceaugError
from .read.kinds import kind_of
from .sql_modules import PACKAGE, modules_for, sql_modules

if TYPE_CHECKING:
    import pandas as pd

SQL_PACKAGE = PACKAGE


def _series_values(column: np.ndarray):
    """A ``columns`` column for pandas: integers with NULL (objects) as nullable ``Int64``."""
    if column.dtype != object:
        return column
    values = [v for v in column.tolist() if v is not None]
    if values and all(isinstance(v, int) for v in values):
        import pandas as pd

        return pd.array(column.tolist(), dtype="Int64")
    return column


def frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """``Trace.columns``' result as ``Trace.query`` gives it: a DataFrame, integers with NULL
    as nullable ``Int64``."""
    import pandas as pd  # here: the command line imports it only when a command needs it

    return pd.DataFrame({name: _series_values(values) for name, values in columns.items()})


def named_for(error: TraceaugError, read: Path, named: Path) -> TraceaugError:
    """``error`` naming ``named`` (the file the user gave) where it names ``read`` (the file
    read in its place: an nsys export's temporary conversion)."""
    if read == named:
        return error
    return TraceaugError(str(error).replace(str(read), str(named)).replace(read.name, named.name))


@dataclass(frozen=True)
class Detached:
    """What a result keeps of its trace once the engine is closed (a job's task returns it):
    where it came from, its rank and its absolute time base (engine ns + ``base_ns``)."""

    path: Path | str
    rank: int | None
    base_ns: int
    world_size: int | None = None

    def absolute(self, ts: int) -> int:
        return ts + self.base_ns

    def close(self) -> None:
        """Nothing to close: results may be used as a trace was (``with``)."""

    def __enter__(self) -> Detached:
        return self

    def __exit__(self, *exc) -> None:
        pass


class Trace:
    """One trace file loaded into Perfetto's trace processor; ``kind`` (``read.kinds.KINDS``): what the engine
    keeps: "analysis" (default), "full", "gpu", "gpu_steps", "ops", "patterns", "sync", "collectives"."""

    def __init__(self, path: str | Path, kind: str | None = None, *,
                 memory64: bool | None = None, on_plan=None, **options) -> None:
        """``options``: ``tp_bin``, ``progress``, ``workers`` (this load's, over the runtime's:
        ``runtime.Runtime``), or the older ``full`` / ``only`` in place of ``kind``."""
        from .read.inputs import trace_input

        self.path = Path(path)  # the file named: every message names it (an nsys export too)
        older = {k: options.pop(k) for k in ("full", "only") if k in options}
        try:
            load_kind = kind_of(kind, **older)
        except ValueError as e:
            raise TraceaugError(f"{self.path}: {e}") from None
        self.file = trace_input(path)  # the file read: an nsys export's Chrome JSON conversion
        try:
            with runtime.using(**options):
                loaded = load(self.file, load_kind.name, memory64, self.path.name, on_plan)
        except TraceaugError as e:
            raise named_for(e, self.file, self.path) from None
        self.tp = loaded.tp
        self.plan = loaded.plan
        self.memory64 = loaded.memory64
        meta = {}
        if self.plan is not None:
            meta = {**self.plan.layout.header, **self.plan.layout.trailer}
        self.metadata: dict = meta
        self.base_ns: int = self.plan.base_ns if self.plan else 0
        # What the engine got (read.kinds.KINDS); a file Perfetto read as it is: "full".
        self.kind: str = self.plan.kind if self.plan else "full"
        # Every arg and flow event (the "full" kind).
        self.full: bool = self.plan.full if self.plan else True
        # Subset kind: "gpu" (counters), "gpu_steps" (analyses), "ops" (diff), "patterns", "sync"; else None.
        self.only: str | None = self.plan.only if self.plan else None
        self._included: set[str] = set()  # modules (with what they include) already included
        self._prepare_sql()

    # ----- metadata --------------------------------------------------------
    @property
    def distributed_info(self) -> dict:
        info = self.metadata.get("distributedInfo")
        return info if isinstance(info, dict) else {}

    @property
    def rank(self) -> int | None:
        rank = self.distributed_info.get("rank")
        return rank if isinstance(rank, int) else None

    @property
    def world_size(self) -> int | None:
        size = self.distributed_info.get("world_size")
        return size if isinstance(size, int) else None

    @property
    def device_properties(self) -> list[dict]:
        props = self.metadata.get("deviceProperties")
        return [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []

    def span(self) -> tuple[int, int] | None:
        """First start and last end of every event (engine ns), even in a subset load (pass 1
        saw them all); None for a trace with no complete slices."""
        if self.only is not None and self.plan.span_ns is not None:
            return self.plan.span_ns
        c = self.columns("SELECT MIN(ts) AS s, MAX(ts + dur) AS e FROM slice WHERE dur >= 0")
        start, end = c["s"][0], c["e"][0]
        if start is None:  # NULL: no rows
            return None
        return int(start), int(end)

    def absolute(self, ts_ns):
        """Map engine timestamps (ns) back to the file's own time base (epoch ns)."""
        return ts_ns + self.base_ns

    # ----- SQL --------------------------------------------------------------
    def _prepare_sql(self) -> None:
        self.tp.backend.register_sql_package(SQL_PACKAGE, sql_modules())
        moved = (self.plan.moved_slices, self.plan.moved_flows) if self.plan else (0, 0)
        self.execute(
            "CREATE PERFETTO TABLE traceaug_meta AS "
            f"SELECT {self.base_ns} AS time_base_ns, {moved[0]} AS lane_slices, "
            f"{moved[1]} AS lane_flows, {int(self.full)} AS full_load, "
            f"{repr(self.only) if self.only else 'NULL'} AS subset_load, "
            f"'{self.kind}' AS load_kind"
        )

    def query(self, sql: str) -> pd.DataFrame:
        """Run PerfettoSQL into a DataFrame typed as ``columns`` types, integers with NULL as nullable
        ``Int64`` (exact, <NA>); a bad query raises ``TraceaugError`` with Perfetto's message."""
        return frame(self.columns(sql))

    def columns(self, sql: str) -> dict[str, np.ndarray]:
        """Run PerfettoSQL; each result column as a numpy array: int64 or float64 when every
        value is an integer or a number (NULL only among floats, as NaN), else objects."""
        return typed_columns(self._result(sql))

    def execute(self, sql: str) -> None:
        """Run PerfettoSQL for its effect (a table, an include), not its rows."""
        self._result(sql)

    def _result(self, sql: str):
        """The engine's QueryResult; a bad query raises ``TraceaugError`` with Perfetto's message."""
        try:
            result = self.tp.backend.execute_query(sql)
            error = result.error
        except TraceProcessorException as e:
            error = str(e)
        if error:
            raise TraceaugError(f"{self.path}: SQL error: {perfetto_message(error)}") from None
        return result

    def include_for(self, sql: str) -> None:
        """Include the traceaug modules whose tables ``sql`` names (``traceaug_gpu_op``...),
        as ``traceaug query`` and ``traceaug.query`` do by themselves."""
        for module in modules_for(sql):
            self.include(module)

    def include(self, module: str) -> None:
        """``INCLUDE PERFETTO MODULE`` (ours or the standard library's), once per trace: a repeat costs a
        round trip and a statement (a rank's analyses include ``traceaug.gpu`` several times)."""
        if module in self._included:
            return
        self.execute(f"INCLUDE PERFETTO MODULE {module}")
        self._included |= _with_includes(module)

    def detached(self, rank: int | None = None, named: str | None = None) -> Detached:
        """This trace's ``Detached`` (its rank, else ``rank``; ``named``: what the user named,
        a URL fetched to ``path``)."""
        return Detached(named if named is not None else self.path,
                        self.rank if self.rank is not None else rank, self.base_ns,
                        self.world_size)

    def close(self) -> None:
        self.tp.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_INCLUDES = re.compile(r"^\s*INCLUDE\s+PERFETTO\s+MODULE\s+([\w.]+)\s*;", re.MULTILINE | re.IGNORECASE)


@cache
def _with_includes(module: str) -> frozenset[str]:
    """``module`` and the traceaug modules it includes, directly or not (including it
    included those)."""
    text = sql_modules().get(module, "")
    return frozenset({module}).union(*(_with_includes(m) for m in _INCLUDES.findall(text)
                                       if m != module))


def perfetto_message(error: str) -> str:
    """Perfetto's error as one line: its own "Traceback ... File "stdin" line 1 col 8 ... ^"
    frame cut down to the message and where the SQL went wrong."""
    lines = [line.strip() for line in error.strip().splitlines()]
    if not lines or not lines[0].startswith("Traceback"):
        return " ".join(error.split())
    carets = [i for i, line in enumerate(lines) if line and set(line) <= {"^", "~"}]
    message = " ".join(lines[carets[-1] + 1:] if carets else lines[-1:]) or lines[-1]
    where = [line for line in lines if line.startswith("File ")]
    if where and " line " in where[-1]:
        message += f" ({where[-1][where[-1].index(' line ') + 1:]})"
    return message
