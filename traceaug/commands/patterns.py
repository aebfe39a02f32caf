"""Run ``traceaug patterns`` over a file (or one rank of a directory) and format its table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson

from ..output import render_columns
from ..rewrite import splice
from ..rewrite.patterns import prepare
from ..trace import Trace

if TYPE_CHECKING:
    from ..read.prefetch import Prefetched

TABLE_KERNELS = 70  # characters of short kernel names shown per row in the table format


def _one(src: Path, out: Path | None, options: dict, tp_bin, prefetched) -> dict:
    copy = None if out is None else splice.Copy(src, out, "patterns")  # deflates meanwhile
    try:
        with Trace(src, tp_bin=tp_bin, only="ops", prefetched=prefetched) as trace:
            result, events = prepare(trace, options["operator"], options["min_len"],
                                     options["top_k"], out is not None)
            layout = trace.plan.layout if trace.plan is not None else None
        if copy is not None:
            copy.finish(layout, events)
    finally:
        if copy is not None:
            copy.cancel()
    result["file"], result["out"] = str(src), None if out is None else str(out)
    return result


def run(src: Path, dst: Path | None, operator: str | None, min_len: int, top_k: int,
        rank: int | None, fmt: str, tp_bin: str | None = None,
        prefetched: Prefetched | None = None) -> str:
    """Find the patterns of one trace, write OUT with the overlay, return the summary text."""
    from .counters import _targets  # GLUE: the pipeline's shared rank selection replaces it

    targets = _targets(Path(src), None if dst is None else Path(dst), rank)
    if len(targets) > 1:
        from ..errors import TraceaugError

        raise TraceaugError(f"{src}: holds {len(targets)} ranks; choose one with --rank")
    (tf, out), = targets
    options = {"operator": operator, "min_len": min_len, "top_k": top_k}
    return summary_text([_one(tf.path, out, options, tp_bin, prefetched)], fmt, top_k)


def _rows(result: dict) -> dict[str, np.ndarray]:
    p = result["patterns"]
    return {"pattern": np.array([f"P{i}" for i in p["pattern"].tolist()], dtype=object),
            **{k: v for k, v in p.items() if k != "pattern"}}


def summary_text(results: list[dict], fmt: str, top_k: int) -> str:
    """Every pattern (csv, json: with its occurrences' GPU starts), or the top-k of each
    scope as a table."""
    parts = []
    for r in results:
        rows = _rows(r)
        if fmt == "json":
            o = r["occurrences"]
            data = orjson.loads(render_columns(rows, "json"))
            for d, i in zip(data, r["patterns"]["pattern"].tolist(), strict=True):
                d["occurrence_gpu_ts_ns"] = o["gpu_ts"][o["pattern"] == i].tolist()
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
