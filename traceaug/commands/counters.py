"""``traceaug counters``: a copy of IN with memory-bandwidth and queue-length counter tracks
(``rewrite.counters``), and the per-stream and per-copy-kind summaries printed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import click

from . import rewriters
from .declare import Call, fmt, option, rank

if TYPE_CHECKING:
    import pandas as pd


def series(value: str | tuple | list) -> list[str]:
    """``--series``: a comma-separated choice of ``analysis.counters.SERIES`` (or a sequence)."""
    from ..analysis.counters import SERIES

    chosen = [v.strip() for v in (value.split(",") if isinstance(value, str) else value)
              if v.strip()]
    if not chosen or any(v not in SERIES for v in chosen):
        raise click.BadParameter(f"choose from {', '.join(SERIES)} (comma-separated)")
    return chosen


class Counters(NamedTuple):
    """What ``traceaug.counters`` returns: its summary tables and the files it wrote."""

    queue: pd.DataFrame
    bandwidth: pd.DataFrame
    written: list[Path]
    memory: pd.DataFrame | None = None  # per rank, device and step: peaks (``analysis.memory``)


def _api(results: list[dict], call: Call) -> Counters:
    """The summaries, one row per rank and stream / copy kind: ``queue`` (``rank, device,
    stream``, ``mean_queued`` time-weighted over the trace, ``max_queued``, ``empty_pct``,
    ``full_ns``) and ``bandwidth`` (``rank, device, kind``, ``bytes``, ``busy_ns``,
    ``mean_gbps_busy``, ``peak_gbps``), the paths written and ``memory`` (``rank, device, step``,
    ``peak_allocated_bytes``, ``peak_reserved_bytes``, ``peak_at_ns``, ``events``)."""
    import pandas as pd

    from ..analysis.counters import QUEUE_COLUMNS
    from ..analysis.memory import STEP_COLUMNS
    from ..analysis.tables import frame
    from ..render.counters_text import with_rank

    results = with_rank(results)
    tables = []
    for key, columns in (("queue_summary", ("rank", *QUEUE_COLUMNS)),
                         ("bandwidth_summary", ("rank", "device", "kind", "bytes", "busy_ns",
                                                "mean_gbps_busy", "peak_gbps")),
                         ("memory_summary", ("rank", *STEP_COLUMNS))):
        found = [frame(r[key]).infer_objects() for r in results if key in r]
        tables.append(pd.concat(found, ignore_index=True) if found
                      else pd.DataFrame({c: [] for c in columns}))
    return Counters(tables[0], tables[1], [Path(r["out"]) for r in results if r["out"]], tables[2])


COMMAND = rewriters.command(
    "counters", "Write OUT: a copy of IN with memory-bandwidth, queue-length and memory "
    "(allocated, reserved) counter tracks."
    "\n\nIN and OUT may be directories of per-rank traces (one output per rank, same names);\n"
    "an OUT ending in / is a directory (made if missing) that gets IN's name.",
    (option("--series", default="bandwidth,queue,memory", show_default=True,
            help="Which counters: bandwidth, queue, memory (allocated and reserved bytes per "
                 "device, from [memory] events), comma-separated."),
     option("--style", type=click.Choice(["traceaug", "hta"]), default="traceaug",
            show_default=True,
            help="hta: HTA's exact event shapes, for scripts built on HTA's output."),
     rank(), fmt("Format of the summary printed on stdout."),
     option("--keep-bytes", is_flag=True,
            help="Keep every original byte. By default events the Perfetto UI would drop "
                 "(partly overlapping, on negative thread ids) are moved so that it shows them.")),
    lambda call: {"series": series(call["series"]), "style": call["style"]}, api=_api,
    load_kind="gpu")
