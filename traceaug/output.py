"""Render results as a terminal table, CSV or JSON.

pandas loads on first use: the command line imports this module before it starts
pass 1 in child processes (``read.prefetch``), which should not wait for pandas."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("table", "csv", "json")


def render_frame(df: pd.DataFrame, fmt: str) -> str:
    """A DataFrame as text in one of ``FORMATS``."""
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        return df.to_json(orient="records", force_ascii=False) + "\n"
    if df.empty:
        return "(no rows)\n" if len(df.columns) else "(no result)\n"
    import pandas as pd

    with pd.option_context("display.max_rows", None, "display.max_columns", None,
                           "display.width", 200, "display.max_colwidth", 80):
        return df.to_string(index=False) + "\n"


def render_records(records: list[dict], fmt: str) -> str:
    """Key/value records (one per trace) as text."""
    if fmt == "json":
        data = records[0] if len(records) == 1 else records
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    if fmt == "csv":
        import pandas as pd

        flat = [{k: "; ".join(map(str, v)) if isinstance(v, list) else v for k, v in r.items()}
                for r in records]
        return pd.DataFrame(flat).to_csv(index=False)
    lines = []
    for r in records:
        width = max(len(k) for k in r)
        for k, v in r.items():
            if isinstance(v, list):
                v = ", ".join(map(str, v)) if k != "warnings" else ("none" if not v else "")
            lines.append(f"{k:<{width}}  {v}")
        for w in r.get("warnings", []):
            lines.append(f"  warning: {w}")
        lines.append("")
    return "\n".join(lines)


def render_columns(columns: dict[str, Sequence], fmt: str, digits: int = 4) -> str:
    """Equal-length columns (lists or numpy arrays) as text in one of ``FORMATS``, without
    pandas; the table rounds floats to ``digits`` decimals, as few as the column needs."""
    names = list(columns)
    values = [c.tolist() if hasattr(c, "tolist") else list(c) for c in columns.values()]
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
        return "(no rows)\n"
    cells = [_cells(col, digits) for col in values]
    widths = [max(len(n), *map(len, c)) for n, c in zip(names, cells)]
    lines = ["  ".join(n.rjust(w) for n, w in zip(names, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in zip(*cells)]
    return "\n".join(lines) + "\n"


def _cells(column: list, digits: int) -> list[str]:
    floats = [v for v in column if isinstance(v, float) and not math.isnan(v)]
    if not floats:
        return ["NaN" if isinstance(v, float) else str(v) for v in column]
    places = max(len(f"{round(v, digits):.{digits}f}".rstrip("0").split(".")[1]) for v in floats)
    return [("NaN" if math.isnan(v) else f"{v:.{max(places, 1)}f}") if isinstance(v, float)
            else str(v) for v in column]
