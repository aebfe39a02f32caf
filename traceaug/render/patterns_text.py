"""``traceaug patterns``' summary: each rank's patterns as a table (the top k of each scope),
CSV (every pattern) or JSON (with each occurrence's GPU start)."""

from __future__ import annotations

import numpy as np
import orjson

from ..analysis.patterns import SCOPES
from ..output import json_text, render_columns


def _rows(result: dict, rank: bool) -> dict[str, np.ndarray]:
    """The pattern table with ``P<n>`` ids (and a leading rank column for several ranks)."""
    p = result["patterns"]
    n = len(p["pattern"])
    lead = {"rank": np.full(n, result["rank"], dtype=object)} if rank else {}
    return {**lead, "pattern": np.array([f"P{i}" for i in p["pattern"].tolist()], dtype=object),
            **{k: v for k, v in p.items() if k != "pattern"}}


def _json(r: dict) -> dict:
    o = r["occurrences"]
    data = orjson.loads(render_columns(_rows(r, False), "json"))
    ids = r["patterns"]["pattern"]  # occurrences are sorted by pattern, then GPU start
    lo, hi = np.searchsorted(o["pattern"], ids), np.searchsorted(o["pattern"], ids, "right")
    for d, a, b in zip(data, lo.tolist(), hi.tolist(), strict=True):
        d["occurrence_gpu_ts_ns"] = o["gpu_ts"][a:b].tolist()
    return {"file": r["file"], "rank": r["rank"], "out": r["out"], "operator": r["operator"],
            "instances": r["instances"], "patterns": data}


def _table(r: dict) -> str:
    rows, top_k = _rows(r, False), r["top_k"]
    keep = np.sort(np.concatenate([np.flatnonzero(rows["scope"] == s)[:top_k] for s in SCOPES]))
    table = {k: v[keep] for k, v in rows.items()}
    counts = ", ".join(f"{int((rows['scope'] == s).sum())} {s}" for s in SCOPES)
    what = r["operator"] or "top-level CPU ops"
    return (f"Kernel patterns of {r['file']}: {r['instances']} instances of {what} launched "
            f"GPU work;\n{counts} patterns (top {top_k} of each scope shown, --format csv lists "
            f"every one)\n" + render_columns(table, "table"))


def summary_text(results: list[dict], fmt: str) -> str:
    """Every pattern (csv; json with its occurrences' GPU starts), or the top-k of each scope
    as a table, for each rank."""
    if fmt == "json":
        data = [_json(r) for r in results]
        return json_text(data[0] if len(data) == 1 else data)
    if fmt == "csv":
        tables = [_rows(r, len(results) > 1) for r in results]
        return render_columns({k: np.concatenate([t[k] for t in tables]) for k in tables[0]}, "csv")
    return "\n".join(_table(r) for r in results)
