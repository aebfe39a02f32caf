"""``traceaug efficiency``' tables: per op group, per family, per step (MFU), every rank's, as tables (µs),
CSV (``# title`` blocks, ns) or JSON; without any device's peaks, no bound / roofline / % columns."""

from __future__ import annotations

import numpy as np

from ..analysis.efficiency import NO_GPU_NOTE, NO_MODEL_NOTE, NO_SHAPES_NOTE, changed, modelled
from ..analysis.tables import Columns, objects
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


REPORT_STEPS = "Efficiency: MFU per step"
REPORT_OPS = "Efficiency: top ops by GPU time (% of roofline, bound)"
NOTES = "Efficiency"
# What report shows of each table (the rank's own columns: every rank's figures in a job)
REPORT_SHOWN = {"steps": ("rank", "step", "step_ns", "flops", "mfu_pct", "families"),
                "groups": ("rank", "device", "name", "shapes", "dtypes", "family", "count", "total_ns",
                           "flops", "tflops", "tbps", "roofline_pct", "bound")}
EMPTY = (NO_GPU_NOTE, NO_SHAPES_NOTE, NO_MODEL_NOTE)


def _notes(text: list[str]) -> list[tuple[str, Columns]]:
    return [(NOTES, {"notes": objects(text)})] if text else []


def report_part(found: dict, top: int) -> dict:
    """What ``report_sections`` reads of a rank's ``efficiency.part``: its notes, MFU per step and its
    first ``top`` op groups (a rank's rows come by GPU time; copies, not views holding every row), the
    columns report shows; a job's report holds this of each rank, not the whole part."""
    return {"notes": found["notes"], "peaks_known": found["peaks_known"], "modelled": modelled(found),
            "steps": {c: v for c, v in found["steps"].items() if c in REPORT_SHOWN["steps"]},
            "groups": {c: v[:top].copy() for c, v in found["groups"].items() if c in REPORT_SHOWN["groups"]}}


def report_sections(parts: dict) -> list[tuple[str, Columns]]:
    """``report``'s efficiency sections from each rank's ``report_part``: the notes (devices found by
    their properties, devices without peaks: no % columns then), MFU per step and the top op groups of
    each rank by GPU time; a trace where no op has a model gets its one-line note alone."""
    ranked = {r: p for r, p in parts.items() if p["modelled"]}
    notes = list(dict.fromkeys(n for p in parts.values() for n in p["notes"]))
    if not ranked:
        return _notes([next((n for n in EMPTY if n in notes), NO_MODEL_NOTE)])
    out = tables([{"rank": r, **p} for r, p in ranked.items()])
    if len(parts) == 1:
        for t in out.values():
            t.pop("rank")
    return [*_notes(notes), (REPORT_STEPS, out["steps"]), (REPORT_OPS, out["groups"])]


DIFF_OPS = "Efficiency of the changed ops, A vs B (achieved TFLOP/s and TB/s, % of roofline, bound)"
DIFF_STEPS = "Efficiency: MFU per step, A vs B"
NEED_PEAKS_DIFF = ("roofline_a_pct", "roofline_b_pct", "bound_a", "bound_b", "mfu_pct")


def diff_sections(parts: dict, by: str, top: int) -> list[tuple[str, Columns]]:
    """``diff``'s efficiency sections from each rank's op rows and A's and B's ``efficiency.part``: the
    changed CPU ops' groups (``efficiency.changed``: ``--by`` name or short-name) in A and in B, and MFU
    per step of each side; the notes of each side first; neither side with a model: its one-line note."""
    notes = list(dict.fromkeys(f"{side}: {n}" for _, both in parts.values()
                               for side, p in zip("AB", both, strict=True) for n in p["notes"]))
    if not any(modelled(p) for _, both in parts.values() for p in both):
        found = [n for _, both in parts.values() for p in both for n in p["notes"] if n in EMPTY]
        return _notes([f"neither side: {found[0] if found else NO_MODEL_NOTE}"])
    known = any(p["peaks_known"] for _, both in parts.values() for p in both)
    ops, steps = [], []
    for rank, (rows, (a, b)) in parts.items():
        keys = set(rows["key"][(rows["status"] != "unchanged") & (rows["device"] == "cpu")].tolist())
        found = changed(a, b, keys if by != "category" else set(), by)
        ops.append({"rank": objects([rank] * len(found["name"])), **found})
        for side, p in zip("AB", (a, b), strict=True):
            if modelled(p):
                n = len(p["steps"]["step"])
                steps.append({"rank": objects([rank] * n), "side": objects([side.lower()] * n), **p["steps"]})
    out = []
    for title, tables_ in ((DIFF_STEPS, steps), (DIFF_OPS, ops)):
        joined = {c: np.concatenate([t[c] for t in tables_]) for c in tables_[0]
                  if known or c not in NEED_PEAKS_DIFF}
        if len(parts) == 1:
            joined.pop("rank")
        out.append((title, joined))
    return [*_notes(notes), *out]
