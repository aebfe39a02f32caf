"""Run ``traceaug critical-path`` over a file or a directory of ranks; format its summary."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from ..output import render_columns
from ..read.inputs import TraceFile
from ..rewrite import critical_path, splice
from ..trace import Trace
from .counters import _targets  # the shared rank selection (moves to rewrite/pipeline.py)

if TYPE_CHECKING:
    from ..read.prefetch import Prefetched

NAME = "critical-path"


def _one(target: tuple[TraceFile, Path | None], options: dict, tp_bin, quiet, prefetched) -> dict:
    tf, out = target
    copy = None if out is None else splice.Copy(tf.path, out, NAME)  # deflates meanwhile
    try:
        with Trace(tf.path, tp_bin=tp_bin, progress=False if quiet else None, full=True,
                   workers=1 if quiet else None, prefetched=prefetched) as trace:
            summary, events = critical_path.compute(trace, options)
            rank = trace.rank if trace.rank is not None else tf.rank
            layout = trace.plan.layout if trace.plan is not None else None
        if copy is not None:
            copy.finish(layout, events, False if quiet else None)
    finally:
        if copy is not None:
            copy.cancel()
    summary["rank"], summary["file"] = rank, str(tf.path)
    summary["out"] = None if out is None else str(out)
    return summary


def run(src: Path, dst: Path | None, options: dict, rank: int | None = None, fmt: str = "table",
        tp_bin: str | None = None, prefetched: Prefetched | None = None) -> str:
    """The path of every target (two ranks at a time); returns the formatted summary."""
    targets = _targets(Path(src), None if dst is None else Path(dst), rank)
    if len(targets) > 1:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(lambda t: _one(t, options, tp_bin, True, None), targets))
    else:
        results = [_one(targets[0], options, tp_bin, False, prefetched)]
    return summary_text(results, fmt)


def summary_text(results: list[dict], fmt: str) -> str:
    """Length, share per category and top events of each rank's path."""
    if fmt == "json":
        data = results[0] if len(results) == 1 else results
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    if fmt == "csv":  # long form: rank, section, key, ns, share
        rows: dict[str, list] = {c: [] for c in ("rank", "section", "key", "ns", "share")}
        for r in results:
            for section, key in (("length", None), ("categories", "category"), ("top", "event")):
                if key is None:
                    items = [("length", r["length_ns"], 1.0)]
                else:
                    t = r[section]
                    items = list(zip(t[key], t["ns"], t["share"]))
                for k, ns, share in items:
                    for c, v in zip(rows, (r["rank"], section, k, ns, share)):
                        rows[c].append(v)
        return render_columns(rows, "csv")
    parts = []
    for r in results:
        who = f"rank {r['rank']}: " if r["rank"] is not None and len(results) > 1 else ""
        parts.append(f"{who}critical path of {r['window']}: {r['length_ns'] / 1e3:,.3f} us "
                     f"(window {(r['end_ns'] - r['start_ns']) / 1e3:,.3f} us)")
        cats = r["categories"]
        parts.append(render_columns({"category": cats["category"],
                                     "us": [v / 1e3 for v in cats["ns"]],
                                     "share": cats["share"]}, "table"))
        top = r["top"]
        parts.append("top events on the path\n" + render_columns(
            {"event": [_short(e) for e in top["event"]], "us": [v / 1e3 for v in top["ns"]],
             "share": top["share"]}, "table"))
        if r["out"]:
            parts.append(f"wrote {r['out']} ({r['events']} events)\n")
    return "\n".join(parts)


def _short(name, width: int = 60) -> str:
    name = str(name)
    return name if len(name) <= width else name[: width - 3] + "..."
