"""``traceaug counters``: a copy of the trace with queue-length and bandwidth counter tracks.

traceaug style: one track per stream (``Queue length stream 7``) and per copy
kind (``Bandwidth (GB/s) HtoD``) in the GPU's process. ``hta`` style:
HTA's exact event shapes (``Queue Length`` with ``id`` = stream, ``Memcpy BW``
per copy name) for scripts built on HTA's output.

The Perfetto UI (v52) lists a process's counter tracks by ``lower(name)`` and cuts titles
longer than about 25 characters in a process group: stream numbers are padded with spaces
to one width (``stream   7`` sorts before ``stream  25``; the UI shows one space) and the
bandwidth tracks' names stay short (``Bandwidth (GB/s) Memset``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analysis.counters import SERIES, compute
from .events import counter_events
from .pipeline import Rewriter

if TYPE_CHECKING:
    from ..trace import Trace


QUEUE = "Queue length"  # traceaug style: + " stream <n>" (padded)
BANDWIDTH = "Bandwidth (GB/s)"  # traceaug style: + " <copy kind>"


def counter_track_events(result: dict, base_ns: int, style: str) -> list[bytes]:
    """The counter events for every computed series."""
    hta = style == "hta"
    events: list[bytes] = []
    if "queue" in result:
        if hta:
            events += counter_events(result["queue"], base_ns, "Queue Length", "Queue Length", True,
                                     id_column=True)
        else:
            width = max((len(str(s)) for s in result["queue"]["key"].tolist()), default=0)
            events += counter_events(result["queue"], base_ns, QUEUE,
                                     lambda s: f"stream {s:>{width}}", False)
    if "bandwidth" in result:
        if hta:
            events += counter_events(result["bandwidth"], base_ns, lambda k: k, "Memcpy BW", True)
        else:
            events += counter_events(result["bandwidth"], base_ns, BANDWIDTH, lambda k: k, False)
    return events


def prepare(trace: Trace, series: tuple[str, ...] = SERIES, style: str = "traceaug"
            ) -> tuple[dict, list[bytes]]:
    """The series and summaries (``analysis.counters.compute``: numpy tables) and the counter
    events to splice in: all the engine is needed for."""
    result = compute(trace, series, style)
    return result, counter_track_events(result, trace.base_ns, style)


def rewrite(trace: Trace, options: dict) -> tuple[dict, list[bytes]]:
    """The series, their summaries and the counter events (options: series, style)."""
    return prepare(trace, tuple(options.get("series", SERIES)), options.get("style", "traceaug"))


REWRITER = Rewriter("counters", "gpu", rewrite)
