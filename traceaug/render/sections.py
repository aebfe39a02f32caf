"""An analysis command's titled tables as printed: terminal (µs, long names cut, histograms as bars), csv (a
block per table), json (one object keyed by title); columns named with their unit (``public``: exact ns)."""

from __future__ import annotations

import orjson

from ..analysis.tables import Columns, objects
from ..output import CELL_WIDTH, cut, json_text, render_columns

# Columns the analyses keep in ns under bare names (``analysis.*``, the report reads them so):
# CSV, JSON and the API's DataFrames name them ``*_ns`` (``public``), the terminal ``*_us``.
NS = {"total", "mean", "std", "min", "max", "median", "window_start", "window", "cpu_step", "busy",
      "idle", "computation", "communication", "memory", "comp_only", "comm_only", "mem_only",
      "comp_comm", "comp_mem", "comm_mem", "comp_comm_mem", "cpu_duration", "gpu_duration",
      "launch_delay", "mean_total", "min_total", "max_total", "mean_cpu_duration",
      "max_cpu_duration", "mean_launch_delay", "max_launch_delay", "mean_wait", "mean_transfer"}
# Shares, as percent (``kernels``'), or as fractions (the idle breakdown's ``ratio``) made percent.
PERCENT = {"share_launches": "launches_pct", "share_time": "time_pct"}
FRACTION = {"ratio": "share_pct"}


def public(table: Columns) -> Columns:
    """The table as CSV, JSON and the API's DataFrames give it: each time with its unit in its
    name (``total`` -> ``total_ns``), each share a percent named ``*_pct``."""
    out = {}
    for c, v in table.items():
        if c in NS:
            out[f"{c}_ns"] = v
        elif c in PERCENT:
            out[PERCENT[c]] = v
        elif c in FRACTION:
            out[FRACTION[c]] = 100 * v
        else:
            out[c] = v
    return out


def clip_names(table: Columns, width: int = CELL_WIDTH) -> Columns:
    """Long names cut as a terminal table cuts them (``output.cut``), for pages that show
    tables outside the terminal (the report)."""
    out = dict(table)
    for c in ("name", "from", "to"):
        if c in out:
            out[c] = objects([cut(n, width) if isinstance(n, str) else n for n in out[c].tolist()])
    return out


def shown(table: Columns, fmt: str, full_names: bool = True) -> Columns:
    """A ``public`` table as rendered: in the terminal ``*_ns`` become ``*_us`` and the window start and a
    transition's full op names are left to csv / json; ``full_names=False``: names cut (``clip_names``)."""
    table = public(table if full_names else clip_names(table))
    if fmt != "table":
        return table
    out = {}
    for c, v in table.items():
        if c in ("from", "to") and "transition" in table:  # the short "A → B" says it
            continue
        if c == "window_start_ns":
            continue
        if c.endswith("_ns") and v.dtype.kind in "iuf":
            out[f"{c[:-3]}_us"] = v / 1e3
        elif c.endswith("_ns") and v.dtype == object:  # integers with missing values (None)
            out[f"{c[:-3]}_us"] = objects([None if x is None else x / 1e3 for x in v.tolist()])
        else:
            out[c] = v
    return out


def render(sections: list[tuple[str, Columns]], fmt: str) -> str:
    """Titled tables: in the terminal one after another (histograms as bars), in csv a block per table after
    a ``# title`` line, in json one object keyed by title; terminal names cut unless ``--wide``."""
    if fmt == "json":
        data = {title: orjson.loads(render_columns(public(t), "json")) for title, t in sections}
        return json_text(data)
    parts = []
    for title, t in sections:
        if fmt == "table" and "lo_us" in t:
            parts.append(f"{title}\n{bars(t)}")
            continue
        body = render_columns(shown(t, fmt), fmt)
        parts.append(f"# {title}\n{body}" if fmt == "csv" else f"{title}\n{body}")
    return "\n".join(parts)


def bars(hist: Columns, width: int = 50) -> str:
    """The histogram drawn in the terminal."""
    peak = max(int(hist["count"].max(initial=0)), 1)
    def us(v: float) -> str:  # log-spaced bins start below 1 µs: 0.0012, not 0.0
        return f"{v:.1f}" if abs(v) >= 1 or v == 0 else f"{v:.2g}"

    lines = [f"{us(lo):>12} – {us(hi):<12} {'█' * round(width * n / peak):<{width}} {n}"
             for lo, hi, n in zip(hist["lo_us"].tolist(), hist["hi_us"].tolist(),
                                  hist["count"].tolist())]
    return "\n".join(lines) + "\n"
