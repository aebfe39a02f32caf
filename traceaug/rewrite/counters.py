"""``traceaug counters``: a copy of the trace with queue-length and bandwidth counter tracks.

traceaug style: one track per stream (``Queue length stream 7``) and per copy
kind (``Memory bandwidth (GB/s) HtoD``) in the GPU's process. ``hta`` style:
HTA's exact event shapes (``Queue Length`` with ``id`` = stream, ``Memcpy BW``
per copy name) for scripts built on HTA's output.
"""

from __future__ import annotations

from pathlib import Path

from ..analysis.counters import SERIES, compute
from ..errors import TraceaugError
from ..trace import Trace
from . import splice
from .events import counter_events


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


def prepare(trace: Trace, out: Path | None, series: tuple[str, ...] = SERIES,
            style: str = "traceaug") -> tuple[dict, list[bytes]]:
    """Check ``out`` (unless None), compute the series and summaries (``analysis.counters
    .compute``: numpy tables) and, for ``out``, the events to splice in: all the engine is
    needed for."""
    if out is not None:
        splice.check_output(trace.path, out)
        if trace.plan is None:
            raise TraceaugError(f"{trace.path}: not a Chrome JSON trace; counters need one")
    result = compute(trace, series, style)
    events = counter_track_events(result, trace.base_ns, style) if out is not None else []
    result["events"] = len(events)
    return result, events
