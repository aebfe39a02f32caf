"""``traceaug cupti``'s tables (``analysis.cupti``): per kernel, every rank, a ``rank`` column first; a trace
without ``cuda_profiler_range`` events gets a one-row note instead."""

from __future__ import annotations

import numpy as np

from ..analysis.tables import Columns

KERNELS = "CUPTI counters per kernel"
METRICS = "CUPTI metrics per kernel (every recorded metric)"


def sections(results: dict) -> list[tuple[str, Columns]]:
    """The per-kernel table and the long table of every metric, every rank."""
    if not any(len(r["kernels"]["kernel"]) for r in results.values()):
        note = next(iter(results.values()))["note"] if results else ""
        return [("CUPTI counters", {"notes": np.array([note], dtype=object)})]
    out = []
    for title, key in ((KERNELS, "kernels"), (METRICS, "metrics")):
        tables = [{"rank": np.full(len(r[key]["kernel"]), rank, dtype=object), **r[key]}
                  for rank, r in results.items() if len(r[key]["kernel"])]
        names = list(dict.fromkeys(c for t in tables for c in t))
        out.append((title, {c: np.concatenate([t.get(c, np.full(len(t["kernel"]), np.nan))
                                               for t in tables]) for c in names}))
    return out
