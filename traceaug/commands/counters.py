"""Run ``traceaug counters`` over a file or a directory of ranks, and format its summary."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson

from ..errors import TraceaugError
from ..output import render_columns
from ..read.inputs import TraceFile, resolve
from ..rewrite import splice, visible
from ..rewrite.counters import prepare
from ..trace import Trace

if TYPE_CHECKING:
    from ..read.prefetch import Prefetched


def _targets(src: Path, dst: Path | None, rank: int | None) -> list[tuple[TraceFile, Path | None]]:
    files = resolve(src)
    if rank is not None:
        files = [f for f in files if f.rank == rank]
        if not files:
            raise TraceaugError(f"{src}: no trace for rank {rank}")
    if dst is None:
        return [(f, None) for f in files]
    if src.is_dir():
        if dst.exists() and not dst.is_dir():
            raise TraceaugError(f"{dst}: IN is a directory, so OUT must be one too")
        if dst.resolve() == src.resolve():
            raise TraceaugError(f"{dst}: is the input directory; choose another output")
        dst.mkdir(exist_ok=True)
        return [(f, dst / f.path.name) for f in files]
    if dst.is_dir():
        raise TraceaugError(f"{dst}: is a directory; give an output file for one input file")
    return [(f, dst) for f in files]


def _one(target: tuple[TraceFile, Path | None], series, style, tp_bin, quiet, prefetched,
         keep_bytes: bool = False) -> dict:
    tf, out = target  # quiet: two ranks at once, one pass-1 worker process each
    copy = None if out is None else splice.Copy(tf.path, out, "counters", keep_bytes)  # deflates meanwhile
    try:
        with Trace(tf.path, tp_bin=tp_bin, progress=False if quiet else None, only="gpu",
                   workers=1 if quiet else None, prefetched=prefetched) as trace:
            result, events = prepare(trace, out, series, style)
            if copy is not None:
                visible.apply(trace.plan, copy)  # what the Perfetto UI would drop: moved
            rank = trace.rank if trace.rank is not None else tf.rank
            layout = trace.plan.layout if trace.plan is not None else None
        if copy is not None:  # the engine is closed: its memory is free for the copy
            copy.finish(layout, events, False if quiet else None)
    finally:
        if copy is not None:
            copy.cancel()
    for key in ("queue_summary", "bandwidth_summary"):
        if key in result:
            table = result[key]
            result[key] = {"rank": np.full(len(table["device"]), rank, dtype=object), **table}
    result["file"], result["out"] = str(tf.path), None if out is None else str(out)
    return result


def run(src: Path, dst: Path | None, series: tuple[str, ...], style: str, rank: int | None,
        fmt: str, tp_bin: str | None = None, prefetched: Prefetched | None = None,
        keep_bytes: bool = False) -> str:
    """Process every target (two ranks at a time) and return the formatted summary.
    ``keep_bytes``: keep every original byte (else the output is one the Perfetto UI shows in
    full: ``rewrite.visible``)."""
    targets = _targets(Path(src), None if dst is None else Path(dst), rank)
    quiet = len(targets) > 1
    if quiet:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(
                lambda t: _one(t, series, style, tp_bin, True, prefetched, keep_bytes), targets))
    else:
        results = [_one(targets[0], series, style, tp_bin, False, prefetched, keep_bytes)]
    return summary_text(results, fmt)


def summary_text(results: list[dict], fmt: str) -> str:
    """The per-stream and per-copy-kind summaries as a table, CSV (long form) or JSON."""
    tables = {key: {c: np.concatenate([r[key][c] for r in results if key in r])
                    for c in next(r[key] for r in results if key in r)}
              for key in ("queue_summary", "bandwidth_summary") if any(key in r for r in results)}
    if fmt == "json":
        data = {k.removesuffix("_summary"): orjson.loads(render_columns(v, "json"))
                for k, v in tables.items()}
        data["outputs"] = [r["out"] for r in results if r["out"]]
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    if fmt == "csv":  # long form: series, rank, device, key, metric, value
        long: dict[str, list] = {c: [] for c in ("series", "rank", "device", "key", "metric", "value")}
        for key, table in tables.items():
            ident = "stream" if key == "queue_summary" else "kind"
            for metric in [c for c in table if c not in ("rank", "device", ident)]:
                n = len(table[metric])
                long["series"] += [key.removesuffix("_summary")] * n
                long["metric"] += [metric] * n
                for column, source in (("rank", "rank"), ("device", "device"), ("key", ident),
                                       ("value", metric)):
                    long[column] += table[source].tolist()
        return render_columns(long, "csv") if tables else ""
    parts = []
    titles = {"queue_summary": "Queue length per stream (time-weighted over the trace)",
              "bandwidth_summary": "Memory bandwidth per copy kind"}
    for key, table in tables.items():
        parts.append(titles[key] + "\n" + render_columns(table, "table"))
    parts += [f"wrote {r['out']} ({r.get('events', 0)} counter events)" + "\n"
              for r in results if r["out"]]
    return "\n".join(parts)
