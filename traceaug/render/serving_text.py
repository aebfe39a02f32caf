"""A serving trace's verdict, first in ``report``: each phase's step latency, how busy the GPU was and where
its GPU time goes, and how far the per-op split can be trusted (graph replays without their capture)."""

from __future__ import annotations

import orjson

from ..analysis.serving import WARM_UP
from ..analysis.serving_figures import PHASE_TABLE, WHERE_TABLE, combine
from ..analysis.tables import Columns, objects
from ..output import json_text, render_columns

SERVING_VERDICT = "serving verdict"
TOP_OPS = 5  # ops named per phase


def sections(parts: list[dict]) -> list[tuple[str, Columns]]:
    """The serving verdict (one line per sentence) and the two serving tables (``analysis.serving``)."""
    tables = combine(parts)
    return [(SERVING_VERDICT, {"text": objects(verdict(dict(tables), parts))}), *tables]


def _ms(ns) -> str:
    return f"{ns / 1e6:,.3f}"


def verdict(tables: dict, parts: list[dict]) -> list[str]:
    """The verdict's sentences: per phase its steps and latency, GPU busy / idle, where its time goes; what
    the trace cannot tell."""
    ph, where = tables[PHASE_TABLE], tables[WHERE_TABLE]
    said = ", ".join(f"{n} {p} step{'s' if n != 1 else ''}" for p, n in zip(ph["phase"], ph["steps"]))
    out = [f"Serving trace: {said}."]
    if WARM_UP in ph["phase"].tolist():
        n = ph["steps"][ph["phase"].tolist().index(WARM_UP)]
        out.append(f"Steady state: after {n} warm-up step{'s' if n != 1 else ''} (before the graph capture "
                   "ended or the first graph replay), which the phase figures leave out.")
    for i, phase in enumerate(ph["phase"].tolist()):
        batch = ph["mean_batch"][i]
        out.append(
            f"{phase.capitalize()}: step latency mean {_ms(ph['latency_mean_ns'][i])} ms (p50 "
            f"{_ms(ph['latency_p50_ns'][i])}, p90 {_ms(ph['latency_p90_ns'][i])}, p99 "
            f"{_ms(ph['latency_p99_ns'][i])}, max {_ms(ph['latency_max_ns'][i])} ms)"
            + (f" at mean batch {batch:g}" if batch is not None else "")
            + f"; the GPU is busy {100 - ph['gpu_idle_pct'][i]:.1f} % of its GPU windows.")
        m = where["phase"] == phase
        rows = [(o, s) for o, s in zip(where["op"][m], where["share_pct"][m])][:TOP_OPS]
        out.append(f"{phase.capitalize()} GPU time goes to " + ", ".join(f"{o} {s:.1f} %" for o, s in rows)
                   + ".")
    replayed = sum(p["replayed"] for p in parts)
    if replayed:
        out += [p["line"] + "." for p in parts if p["replayed"]]
        if sum(p["attributed"] for p in parts) < replayed:
            out.append("Reliability: the per-op split of graph-replayed kernels is unknown; their count "
                       "and GPU time are exact, and the replay's GPU time is busy time, never idle.")
    return out


def summary_text(results: list[dict], fmt: str) -> str:
    """``traceaug serving``'s summary, a row per rank: its steps per phase, graph-replayed kernels and how
    many were attributed to their ops (the table adds the attribution line, or what to record)."""
    rows = {"rank": objects([r["rank"] for r in results]), "file": objects([r["file"] for r in results]),
            "steps": objects([r["steps"] for r in results]),
            "phases": objects([", ".join(f"{n} {p}" for p, n in r["phases"].items()) or "none"
                               for r in results]),
            "graph_replayed": objects([r["graph_replayed"] for r in results]),
            "attributed": objects([r["attributed"] for r in results])}
    if fmt == "json":
        return json_text(orjson.loads(render_columns(rows, "json")))
    if fmt == "csv":
        return render_columns(rows, fmt)
    lines = [f"{'rank ' + str(r['rank']) + ': ' if len(results) > 1 else ''}{r['replays']}" for r in results
             if r["replays"]]
    return render_columns(rows, "table") + "".join(f"{line}\n" for line in lines)
