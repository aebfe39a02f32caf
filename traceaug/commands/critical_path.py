"""``traceaug critical-path`` as a rewriter: the "sync" load kind, ``rewrite.critical_path``'s
compute and the summary below; targets, copy, load and splice are ``rewrite.pipeline``'s."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..output import cut, json_text, render_columns
from ..rewrite import critical_path, pipeline

if TYPE_CHECKING:
    from ..job.run import JobOptions
    from ..read.prefetch import Prefetched


def run(src: Path, dst: str | Path | None, options: dict, rank: int | None = None,
        fmt: str = "table", tp_bin: str | None = None, prefetched: Prefetched | None = None,
        open_ui: bool | dict = False, job: JobOptions | None = None) -> str:
    """``critical-path`` over every target, through the pipeline; the formatted summary."""
    return pipeline.run(CRITICAL_PATH, src, dst, options, rank=rank, fmt=fmt, tp_bin=tp_bin,
                        prefetched=prefetched, open_ui=open_ui, job=job)


def summary_text(results: list[dict], fmt: str) -> str:
    """Length, share per category and top events of each rank's path."""
    if fmt == "json":
        data = results[0] if len(results) == 1 else results
        return json_text(data)
    if fmt == "csv":  # long form: rank, section, key, ns, share_pct
        rows: dict[str, list] = {c: [] for c in ("rank", "section", "key", "ns", "share_pct")}
        for r in results:
            for section, key in (("length", None), ("categories", "category"), ("top", "event")):
                if key is None:
                    items = [("length", r["length_ns"], 100.0)]
                else:
                    t = r[section]
                    items = list(zip(t[key], t["ns"], t["share_pct"]))
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
        for what, calls in r.get("inferred", {}).items():
            parts.append(f"inferred: {calls:,} {what}")
        parts.append(render_columns({"category": cats["category"],
                                     "us": [v / 1e3 for v in cats["ns"]],
                                     "share_pct": cats["share_pct"]}, "table"))
        top = r["top"]
        parts.append("top events on the path\n" + render_columns(
            {"event": [_short(e) for e in top["event"]], "us": [v / 1e3 for v in top["ns"]],
             "share_pct": top["share_pct"]}, "table"))
    return "\n".join(parts)


def _short(name, width: int = 60) -> str:
    return cut(str(name), width)


CRITICAL_PATH = pipeline.Rewriter(name="critical-path", kind="sync", compute=critical_path.compute,
                                  summary=summary_text)
