"""Render results as a terminal table, CSV or JSON, without pandas (its import is a third
of a second of a command)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence

import orjson

FORMATS = ("table", "csv", "json")


def render_records(records: list[dict], fmt: str) -> str:
    """Key/value records (one per trace) as text."""
    if fmt == "json":
        data = records[0] if len(records) == 1 else records
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
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
            lines.append(f"{k:<{width}}  {v}")
        for key, label in LISTED.items():
            for w in r.get(key, []):
                lines.append(f"  {label}: {w}")
        lines.append("")
    return "\n".join(lines)


# List fields of a record printed one item a line (``info``: traceaug's engine warnings, and what
# the Perfetto UI loses opening the file as it is), with the label of each line.
LISTED = {"warnings": "warning", "perfetto_ui": "in the Perfetto UI"}


def render_columns(columns: dict[str, Sequence], fmt: str, digits: int = 4) -> str:
    """Equal-length columns (lists or numpy arrays) as text in one of ``FORMATS``, without
    pandas; the table rounds floats to ``digits`` decimals, as few as the column needs."""
    names = list(columns)
    values = [[_text_of_blob(v) for v in (c.tolist() if hasattr(c, "tolist") else list(c))]
              for c in columns.values()]
    rows = list(zip(*values))
    if fmt == "json":
        records = [{k: None if isinstance(v, float) and math.isnan(v) else v
                    for k, v in zip(names, r)} for r in rows]
        return orjson.dumps(records).decode() + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([["" if isinstance(v, float) and math.isnan(v) else v for v in r]
                          for r in rows])
        return buf.getvalue()
    if not rows:
        return "(no rows)\n" if names else "(no result)\n"
    cells = [_cells(col, digits) for col in values]
    widths = [max(len(n), *map(len, c)) for n, c in zip(names, cells)]
    lines = ["  ".join(n.rjust(w) for n, w in zip(names, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in zip(*cells)]
    return "\n".join(lines) + "\n"


def _text_of_blob(value):
    """A blob (SQL BLOB) as hex text, ``0x...``, in every format; any other value as it is."""
    return "0x" + value.hex() if isinstance(value, bytes | bytearray) else value


def _cells(column: list, digits: int) -> list[str]:
    floats = [v for v in column if isinstance(v, float) and not math.isnan(v)]
    if not floats:
        return ["NaN" if isinstance(v, float) else str(v) for v in column]
    places = max(len(f"{round(v, digits):.{digits}f}".rstrip("0").split(".")[1]) for v in floats)
    return [("NaN" if math.isnan(v) else f"{v:.{max(places, 1)}f}") if isinstance(v, float)
            else str(v) for v in column]
