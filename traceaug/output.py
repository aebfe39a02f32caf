"""Render results as a terminal table, CSV or JSON."""

from __future__ import annotations

import orjson
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
    with pd.option_context("display.max_rows", None, "display.max_columns", None,
                           "display.width", 200, "display.max_colwidth", 80):
        return df.to_string(index=False) + "\n"


def render_records(records: list[dict], fmt: str) -> str:
    """Key/value records (one per trace) as text."""
    if fmt == "json":
        data = records[0] if len(records) == 1 else records
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    if fmt == "csv":
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
