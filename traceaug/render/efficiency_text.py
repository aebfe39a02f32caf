"""``traceaug efficiency``' tables: per op group, per family, per step (MFU), every rank's, as tables (µs),
CSV (``# title`` blocks, ns) or JSON; without any device's peaks, no bound / roofline / % columns."""

from __future__ import annotations

import numpy as np

from ..output import json_text, render_columns

TITLES = {"steps": "MFU per step", "families": "Per op family", "groups": "Per op (name, shapes, dtypes)",
          "opportunities": "Step time saved at 100 % of roofline (replayed), by op"}
NEED_PEAKS = ("bound", "roofline_ns", "roofline_pct", "mfu_pct")
# What the terminal shows of each table (all of them in CSV and JSON).
SHOWN = {"steps": ("rank", "step", "step_ns", "flops", "mfu_pct", "families"),
         "families": ("rank", "device", "family", "count", "total_ns", "gpu_pct", "tflops", "tbps",
                      "roofline_pct"),
         "groups": ("rank", "device", "name", "shapes", "family", "count", "total_ns", "mean_ns", "tflops",
                    "tbps", "bound", "roofline_pct"),
         "opportunities": ("rank", "name", "shapes", "gpu_saved_ns", "saved_ns", "saved_pct")}


def tables(results: list[dict]) -> dict[str, dict[str, np.ndarray]]:
    """Each table of every rank, with a leading ``rank`` column; the columns that need peaks left out when no
    rank's devices have any."""
    known = any(r["peaks_known"] for r in results)
    out = {}
    for key in ("groups", "families", "steps", "opportunities"):
        if key not in results[0]:
            continue
        parts = [r[key] for r in results]
        names = [c for c in parts[0] if known or c not in NEED_PEAKS]
        ranks = np.concatenate([np.full(len(p[names[0]]), -1 if r["rank"] is None else r["rank"], np.int64)
                                for r, p in zip(results, parts, strict=True)])
        out[key] = {"rank": ranks, **{c: np.concatenate([p[c] for p in parts]) for c in names}}
    return out


def _shown(table: dict[str, np.ndarray], top: int | None) -> dict[str, list]:
    """A terminal view: times in µs, FLOPs in GFLOP, bytes in MB, ``top`` rows."""
    out = {}
    for c, v in table.items():
        v = v[:top] if top is not None else v
        if c.endswith("_ns"):
            out[c[:-3] + "_us"] = v / 1e3
        elif c == "flops":
            out["gflop"] = v / 1e9
        elif c == "bytes":
            out["mb"] = v / 1e6
        else:
            out[c] = v
    return out


def summary_text(results: list[dict], fmt: str) -> str:
    """The tables in ``fmt``; the notes (devices found by properties, devices without peaks) first."""
    found = tables(results)
    notes = list(dict.fromkeys(n for r in results for n in r["notes"]))
    if fmt == "json":
        data = {k: [dict(zip(t, row, strict=True)) for row in zip(*(v.tolist() for v in t.values()))]
                for k, t in found.items()}
        data["notes"] = notes
        data["devices"] = {str(d): v for r in results for d, v in r["devices"].items()}
        data["outputs"] = [r["out"] for r in results if r["out"]]
        return json_text(_no_nan(data))
    if fmt == "csv":
        return "".join(f"# {k}\n" + render_columns(t, "csv") for k, t in found.items())
    top = results[0].get("top", 15)
    parts = [f"note: {n}" for n in notes]
    for key in ("steps", "families", "groups", "opportunities"):
        if key not in found:
            continue
        table = {c: v for c, v in found[key].items() if c in SHOWN[key]}
        if not len(table["rank"]):
            continue
        if len(results) == 1:
            table.pop("rank")
        if len(set(table.get("device", np.zeros(0)).tolist())) == 1:
            table.pop("device")
        more = len(next(iter(table.values()))) - top if key == "groups" else 0
        title = TITLES[key] + (f" (top {top} by GPU time of {top + more})" if more > 0 else "")
        parts.append(title + "\n" + render_columns(_shown(table, top if key == "groups" else None), "table"))
    return "\n".join(parts)


def _no_nan(data):
    """NaN (no figure) as null."""
    if isinstance(data, dict):
        return {k: _no_nan(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_no_nan(v) for v in data]
    return None if isinstance(data, float) and np.isnan(data) else data
