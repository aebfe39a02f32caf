"""``traceaug counters``: the trace with queue-length (per stream) and bandwidth (per copy kind) tracks;
``hta`` style: HTA's exact event shapes (``Queue Length``, ``Memcpy BW``) for scripts built on HTA."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analysis.counters import SERIES, compute
from .events import counter_events
from .pipeline import Rewriter

if TYPE_CHECKING:
    from ..trace import Trace


QUEUE = "Queue length"  # + " stream <n>", padded to one width: the UI (v52) sorts tracks by lower(name)
BANDWIDTH = "Bandwidth (GB/s)"  # + " <copy kind>"; short: the UI cuts titles past ~25 characters
MEMORY = "Memory"  # + " allocated cuda:0" / " reserved cuda:0": bytes ([memory] events)


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
    if "memory" in result:
        events += counter_events(result["memory"], base_ns, MEMORY, lambda k: k, False)
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
