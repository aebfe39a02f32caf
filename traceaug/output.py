"""Results as a terminal table, CSV or JSON, without pandas (a third of a second to import). Missing values:
``NULL`` / empty / ``null``; ``inf`` / ``-inf``; tiny or huge floats in exponent form, never 0."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence

import orjson

import traceaug.runtime as runtime

FORMATS = ("table", "csv", "json")
MISSING = "NULL"  # a missing value in a table
CELL_WIDTH = 80  # a longer text cell is cut to this many characters in a table, ending in "…"
TABLE_WIDTH = 160  # a terminal table's widest line, its text columns cut to fit (unless ``--wide``)
NARROWEST = 12  # characters a text column keeps whatever the fit
KEYS = ("rank", "step", "device", "stream", "source")  # leading columns that name a row: in every block
HUGE = 1e15  # from here on a float's fixed decimals would be noise: exponent form


def json_text(data, indent: bool = True) -> str:
    """``data`` as JSON text ending in a newline; a non-UTF-8 file name (a str with surrogates) has its bytes
    escaped as ``\\xff``, as Python shows them."""
    option = orjson.OPT_INDENT_2 if indent else None
    try:
        return orjson.dumps(data, option=option).decode() + "\n"
    except TypeError:
        return orjson.dumps(valid_utf8(data), option=option).decode() + "\n"


def versioned(text: str, version: int, extra: dict | None = None) -> str:
    """A command's JSON ``text`` with ``schema_version`` first (its schema: docs/schemas/NAME.json) and
    ``extra``'s keys last; a list becomes ``{"schema_version": N, "rows": [...]}``: every output is one
    object."""
    data = orjson.loads(text)
    return json_text({"schema_version": version, **(data if isinstance(data, dict) else {"rows": data}),
                      **(extra or {})})


def valid_utf8(value):
    """``value`` with every str made valid UTF-8 (undecodable bytes as ``\\xNN``)."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {valid_utf8(k): valid_utf8(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [valid_utf8(v) for v in value]
    return value


def render_records(records: list[dict], fmt: str) -> str:
    """Key/value records (one per trace) as text."""
    if fmt == "json":
        return json_text(records[0] if len(records) == 1 else records)
    if fmt == "csv":
        flat = [{k: "; ".join(map(str, v)) if isinstance(v, list) else v for k, v in r.items()}
                for r in records]
        names = list(dict.fromkeys(k for r in flat for k in r))
        return render_columns({k: [r.get(k) for r in flat] for k in names}, "csv")
    lines = []
    for r in records:
        width = max(len(k) for k in r)
        for k, v in r.items():
            if isinstance(v, list):
                v = ", ".join(map(str, v)) if k not in LISTED else ("none" if not v else "")
            elif _missing(v):
                v = MISSING
            lines.append(f"{k:<{width}}  {v}")
        for key, label in LISTED.items():
            for w in r.get(key, []):
                lines.append(f"  {label}: {w}")
        lines.append("")
    return "\n".join(lines)


# List fields of a record printed one item a line (``info``: traceaug's engine warnings, and what
# the Perfetto UI loses opening the file as it is), with the label of each line.
LISTED = {"warnings": "warning", "perfetto_ui": "in the Perfetto UI"}


def render_columns(columns: dict[str, Sequence], fmt: str, digits: int = 4,
                   full: bool = False) -> str:
    """Equal-length columns (lists or numpy arrays) as text in one of ``FORMATS``, without pandas; a table
    rounds floats to at most ``digits`` decimals and, unless ``full`` or ``--wide``, cuts text (``cut``) to
    fit ``TABLE_WIDTH`` columns."""
    names = list(columns)
    values = [[_text_of_blob(v) for v in (c.tolist() if hasattr(c, "tolist") else list(c))]
              for c in columns.values()]
    rows = list(zip(*values))
    if fmt == "json":
        records = [{k: _json_value(v) for k, v in zip(names, r)} for r in rows]
        return json_text(records, indent=False)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([["" if _missing(v) else v for v in r] for r in rows])
        return buf.getvalue()
    if not rows:
        return "(no rows)\n" if names else "(no result)\n"
    cells = [_cells(col, digits) for col in values]
    if full or runtime.current().wide:
        return _table(names, cells)
    cells = _fitted(names, values, cells)
    return "\n".join(_table([names[i] for i in b], [cells[i] for i in b])
                     for b in _blocks(names, cells))


def _table(names: list[str], cells: list[list[str]]) -> str:
    widths = [max(len(n), *map(len, c)) for n, c in zip(names, cells)]
    lines = ["  ".join(n.rjust(w) for n, w in zip(names, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in zip(*cells)]
    return "\n".join(lines) + "\n"


def _blocks(names: list[str], cells: list[list[str]]) -> list[list[int]]:
    """The columns of each block a table still wider than ``TABLE_WIDTH`` is printed in, one
    under the other, each led by the table's leading ``KEYS``."""
    widths = [max(len(n), *map(len, c)) + 2 for n, c in zip(names, cells)]
    keys = next((i for i, n in enumerate(names) if n not in KEYS), len(names))
    lead, used, blocks = list(range(keys)), sum(widths[:keys]), [[]]
    for i in range(keys, len(names)):
        if blocks[-1] and used + widths[i] - 2 > TABLE_WIDTH:
            blocks.append([])
            used = sum(widths[:keys])
        blocks[-1].append(i)
        used += widths[i]
    return [lead + b for b in blocks]


def _fitted(names: list[str], values: list[list], cells: list[list[str]]) -> list[list[str]]:
    """The cells with every text column cut to one width (at most ``CELL_WIDTH``), the widest
    that keeps the table within ``TABLE_WIDTH`` (never below its name or ``NARROWEST``)."""
    text = [any(isinstance(v, str) for v in col) for col in values]
    widths = [max(len(n), *map(len, c)) for n, c in zip(names, cells)]
    floor = [max(len(n), NARROWEST) for n in names]

    def line(cap: int) -> int:
        return sum(min(w, max(cap, f)) if t else w
                   for w, f, t in zip(widths, floor, text)) + 2 * (len(names) - 1)
    cap = next((c for c in range(CELL_WIDTH, NARROWEST, -1) if line(c) <= TABLE_WIDTH), NARROWEST)
    return [[cut(c, max(cap, f)) for c in col] if t else col
            for col, f, t in zip(cells, floor, text)]


def cut(text: str, width: int = CELL_WIDTH) -> str:
    """``text`` as every terminal table shows it: at most ``width`` characters, a longer one
    cut to ``width - 1`` and "…"."""
    return text if len(text) <= width else text[:width - 1] + "…"


def _text_of_blob(value):
    """A blob (SQL BLOB) as hex text, ``0x...``, in every format; any other value as it is."""
    return "0x" + value.hex() if isinstance(value, bytes | bytearray) else value


def _missing(value) -> bool:
    return value is None or isinstance(value, float) and math.isnan(value)


def _json_value(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _fixed(value: float, digits: int) -> bool:
    """Whether ``digits`` fixed decimals show this finite float faithfully."""
    return value == 0 or 10.0**-digits <= abs(value) < HUGE


def _cells(column: list, digits: int) -> list[str]:
    """A column's table cells: floats with the decimals the column needs (at most ``digits``),
    or in exponent form when fixed decimals would hide them."""
    fixed = [v for v in column if isinstance(v, float) and math.isfinite(v) and _fixed(v, digits)]
    places = max((len(f"{round(v, digits):.{digits}f}".rstrip("0").split(".")[1]) for v in fixed),
                 default=1)
    return [_cell(v, max(places, 1), digits) for v in column]


def _cell(value, places: int, digits: int) -> str:
    if _missing(value):
        return MISSING
    if not isinstance(value, float):
        return str(value)
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if _fixed(value, digits):
        return f"{value:.{places}f}"
    return f"{value:.{digits + 1}g}"
