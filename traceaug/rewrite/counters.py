"""``traceaug counters``: a copy of the trace with queue-length and bandwidth counter tracks.

traceaug style: one track per stream (``Queue length stream 7``) and per copy
kind (``Memory bandwidth (GB/s) HtoD``) in the GPU's process. ``hta`` style:
HTA's exact event shapes (``Queue Length`` with ``id`` = stream, ``Memcpy BW``
per copy name) for scripts built on HTA's output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analysis.counters import SERIES, compute
from .events import counter_events

if TYPE_CHECKING:
    from ..trace import Trace


def counter_track_events(result: dict, base_ns: int, style: str) -> list[bytes]:
    """The counter events for every computed series."""
    hta = style == "hta"
    events: list[bytes] = []
    if "queue" in result:
        if hta:
            events += counter_events(result["queue"], base_ns, "Queue Length", "Queue Length", True,
                                     id_column=True)
        else:
            events += counter_events(result["queue"], base_ns, "Queue length",
                                     lambda s: f"stream {s}", False)
    if "bandwidth" in result:
        if hta:
            events += counter_events(result["bandwidth"], base_ns, lambda k: k, "Memcpy BW", True)
        else:
            events += counter_events(result["bandwidth"], base_ns, "Memory bandwidth (GB/s)",
                                     lambda k: k, False)
    return events


def prepare(trace: Trace, series: tuple[str, ...] = SERIES, style: str = "traceaug"
            ) -> tuple[dict, list[bytes]]:
    """The series and summaries (``analysis.counters.compute``: numpy tables) and the counter
    events to splice in: all the engine is needed for."""
    result = compute(trace, series, style)
    return result, counter_track_events(result, trace.base_ns, style)
