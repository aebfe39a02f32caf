"""``traceaug patterns`` as a rewriter: the "ops" load kind, its compute and its summary.

Everything else (targets, the copy, the load, the splice) is ``rewrite.pipeline``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson

from ..errors import TraceaugError
from ..output import render_columns
from ..rewrite import pipeline
from ..rewrite.patterns import prepare

if TYPE_CHECKING:
    from ..read.prefetch import Prefetched
    from ..trace import Trace

TABLE_KERNELS = 70  # characters of short kernel names shown per row in the table format


def compute(trace: Trace, options: dict) -> tuple[dict, list[bytes]]:
    """Patterns, occurrences and overlay events (options: operator, min_len, top_k)."""
    result, events = prepare(trace, options.get("operator"), options.get("min_len", 3),
                             options.get("top_k", 5))
    return {**result, "top_k": options.get("top_k", 5)}, events


def _rows(result: dict) -> dict[str, np.ndarray]:
    p = result["patterns"]
    return {"pattern": np.array([f"P{i}" for i in p["pattern"].tolist()], dtype=object),
            **{k: v for k, v in p.items() if k != "pattern"}}


def summary_text(results: list[dict], fmt: str) -> str:
    """Every pattern (csv, json: with its occurrences' GPU starts), or the top-k of each
    scope as a table."""
    parts = []
    for r in results:
        rows, top_k = _rows(r), r["top_k"]
        if fmt == "json":
            o = r["occurrences"]
            data = orjson.loads(render_columns(rows, "json"))
            ids = r["patterns"]["pattern"]  # occurrences are sorted by pattern, then GPU start
            lo, hi = np.searchsorted(o["pattern"], ids), np.searchsorted(o["pattern"], ids, "right")
            for d, a, b in zip(data, lo.tolist(), hi.tolist(), strict=True):
                d["occurrence_gpu_ts_ns"] = o["gpu_ts"][a:b].tolist()
            parts.append(orjson.dumps({"file": r["file"], "out": r["out"], "patterns": data},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
        elif fmt == "csv":
            parts.append(render_columns(rows, "csv"))
        else:
            keep = np.concatenate([np.flatnonzero(rows["scope"] == s)[:top_k]
                                   for s in ("whole", "operator", "stream")])
            keep.sort()
            table = {k: v[keep] for k, v in rows.items()}
            table["kernels"] = np.array([k if len(k) <= TABLE_KERNELS else k[:TABLE_KERNELS - 1] + "…"
                                         for k in table["kernels"].tolist()], dtype=object)
            table["kernel_ids"] = np.array([k if len(k) <= 40 else k[:39] + "…"
                                            for k in table["kernel_ids"].tolist()], dtype=object)
            counts = {s: int((rows["scope"] == s).sum()) for s in ("whole", "operator", "stream")}
            parts.append(f"Kernel patterns of {r['file']} (top {top_k} of each scope; "
                         + ", ".join(f"{n} {s}" for s, n in counts.items())
                         + " in all: --format csv lists every one)\n"
                         + render_columns(table, "table"))
            if r["out"]:
                parts.append(f"wrote {r['out']} ({r['events']} events)\n")
    return "".join(parts) if fmt != "table" else "\n".join(parts)


PATTERNS = pipeline.Rewriter(name="patterns", kind="ops", compute=compute, summary=summary_text)


def run(src: Path, dst: str | Path | None, operator: str | None, min_len: int, top_k: int,
        rank: int | None, fmt: str, tp_bin: str | None = None,
        prefetched: Prefetched | None = None, open_ui: bool | dict = False) -> str:
    """``patterns`` over one trace (a directory needs ``--rank``), through the pipeline."""
    found, _ = pipeline.targets(src, None, rank)
    if len(found) > 1:
        raise TraceaugError(f"{src}: holds {len(found)} ranks; choose one with --rank")
    options = {"operator": operator, "min_len": min_len, "top_k": top_k}
    return pipeline.run(PATTERNS, src, dst, options, rank=rank, fmt=fmt, tp_bin=tp_bin,
                        prefetched=prefetched, open_ui=open_ui)
