"""``nsys stats`` CSVs for ``traceaug summary`` by header name: ``cuda_gpu_kern_sum`` (older ``gpukernsum``),
``cuda_gpu_mem_time_sum`` (``gpumemtimesum``), ``nvtx_gpu_proj_trace``; times become integer ns."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from ..errors import TraceaugError
from . import source

_UNIT = re.compile(r"^(?P<base>.*?)\s*(?:\((?P<unit>ns|us|μs|ms|s)\))?$")
NS_PER = {None: 1, "ns": 1, "us": 1000, "μs": 1000, "ms": 1_000_000, "s": 1_000_000_000}

# report -> {field: (accepted header names without unit, is a time)}
REPORTS = {
    "kernel_sum": {"total": (("Total Time",), True), "count": (("Instances", "Calls", "Count"), False),
                   "name": (("Name",), None)},
    "mem_time_sum": {"total": (("Total Time",), True), "count": (("Count", "Operations", "Instances"), False),
                     "name": (("Operation", "Name"), None)},
    "nvtx_proj_trace": {"duration": (("Projected Duration",), True), "name": (("Name", "Range"), None)},
}
INT64_MAX = 2**63 - 1
TOO_LARGE = "more than a 64-bit integer holds"
TITLES = {"kernel_sum": "cuda_gpu_kern_sum", "mem_time_sum": "cuda_gpu_mem_time_sum",
          "nvtx_proj_trace": "nvtx_gpu_proj_trace"}


def _header(row: list[str]) -> dict[str, tuple[int, int]]:
    """Header cell -> (column, ns per unit), keyed by the name without its unit."""
    out = {}
    for i, cell in enumerate(row):
        m = _UNIT.match(cell.strip().lstrip("\ufeff"))
        out.setdefault(m.group("base"), (i, NS_PER[m.group("unit")]))
    return out


def _columns(path: Path, report: str, header: dict) -> dict[str, tuple[int, int]]:
    cols = {}
    for field, (names, _) in REPORTS[report].items():
        found = next((header[n] for n in names if n in header), None)
        if found is None:
            raise TraceaugError(f"{path}: not an nsys stats {TITLES[report]} CSV "
                                f"(no {' / '.join(repr(n) for n in names)} column)")
        cols[field] = found
    return cols


def kind_of(path: Path) -> str:
    """Which report a CSV is, from its header: kernel_sum, mem_time_sum or nvtx_proj_trace."""
    header = _header(next(_rows(path), None) or [])
    if "Projected Duration" in header:
        return "nvtx_proj_trace"
    if "Operation" in header:
        return "mem_time_sum"
    if "Name" in header and "Total Time" in header:
        return "kernel_sum"
    raise TraceaugError(f"{path}: not an nsys stats CSV this command reads (cuda_gpu_kern_sum, "
                        "cuda_gpu_mem_time_sum, nvtx_gpu_proj_trace, gpukernsum)")


def _rows(path: Path) -> Iterator[list[str]]:
    """The CSV's rows (``source.read_side``: a FIFO or device is read to a bound, never
    waited on or read without end); text that is not UTF-8 or not CSV is a one-line error."""
    data = source.read_side(path, "a CSV")
    try:
        text = io.StringIO(data.decode("utf-8"), newline="")
    except UnicodeDecodeError as e:
        raise TraceaugError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x}); "
                            "nsys stats writes UTF-8 CSVs") from None
    try:
        yield from csv.reader(text)
    except csv.Error as e:
        raise TraceaugError(f"{path}: malformed CSV ({e})") from None


def _number(path: Path, line: int, column: str, text: str, scale: int, integral: bool) -> int:
    """A cell as an int64 (ns or a count); a value int64 cannot hold is refused before any
    arithmetic on it (``1e999999`` as an int: a million digits, a minute of CPU)."""
    try:
        value = Decimal(text.strip().replace(",", ""))
    except InvalidOperation:
        raise TraceaugError(f"{path}: line {line}: {column} is {text!r}, not a number") from None
    if not value.is_finite() or value < 0:
        raise TraceaugError(f"{path}: line {line}: {column} is {text!r}, not a "
                            f"{'count' if integral else 'duration'}")
    if value and value.adjusted() > 20:
        raise TraceaugError(f"{path}: line {line}: {column} is {_cut(text)}, {TOO_LARGE}")
    value *= scale
    if integral and value != value.to_integral_value():
        raise TraceaugError(f"{path}: line {line}: {column} is {text!r}, not a count")
    out = int(value.to_integral_value())
    if out > INT64_MAX:
        raise TraceaugError(f"{path}: line {line}: {column} is {_cut(text)}, {TOO_LARGE}")
    return out


def _cut(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:39] + "…")


def read(path: str | Path, report: str) -> dict[str, np.ndarray]:
    """One report's rows in file order: ``name`` (object) and ``total`` + ``count`` (int64,
    ns and instances) for the summaries, ``name`` + ``duration`` (ns) for NVTX ranges."""
    path = Path(path)
    spec = REPORTS[report]
    rows = _rows(path)
    head = next(rows, None)
    if head is None:
        raise TraceaugError(f"{path}: empty file, expected an nsys stats {TITLES[report]} CSV")
    cols = _columns(path, report, _header(head))
    width = max(i for i, _ in cols.values()) + 1
    out: dict[str, list] = {field: [] for field in spec}
    for line, row in enumerate(rows, start=2):
        if not row:
            continue
        if len(row) < width:
            raise TraceaugError(f"{path}: line {line}: {len(row)} fields, expected at least {width}")
        for field, (i, scale) in cols.items():
            cell = row[i]
            if spec[field][1] is None:
                out[field].append(cell)
            elif report == "nvtx_proj_trace" and cell.strip() in ("", "None"):
                out[field].append(-1)  # a range nsys could not project
            else:
                out[field].append(_number(path, line, spec[field][0][0], cell,
                                          scale, integral=spec[field][1] is False))
    for field, values in out.items():  # a sum int64 cannot hold would wrap to a negative time
        if spec[field][1] is not None and sum(values) > INT64_MAX:
            raise TraceaugError(f"{path}: the {spec[field][0][0]} column sums to {sum(values):,}, "
                                f"{TOO_LARGE}")
    return {field: np.array(values, dtype=object if spec[field][1] is None else np.int64)
            for field, values in out.items()}
