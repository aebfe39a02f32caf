"""``traceaug info``: devices, ranks, steps, span, counts, streams and warnings, one record
per rank (``analysis.info``)."""

from __future__ import annotations

import traceaug.paths as paths

from ..job import parts
from .declare import JOB, Call, Command, argument, echo, fmt, rank, serving_options


def compute(call: Call) -> list[dict]:
    """Every rank's record, in rank order."""
    from ..job.run import Work

    return list(call.run(Work("analysis", parts.info), "info").values())


def show(records: list[dict], call: Call) -> None:
    from ..render.info_text import render

    echo(paths.shown(render(records, call["fmt"], cache_states(call) if len(records) > 1 else None)))


def cache_states(call: Call) -> list[str] | None:
    """Each rank's state in the table cache after this run (the load kinds it holds); None with no cache."""
    from ..job.cache import where

    store = where(call.job.cache, call.job.no_cache)
    return [store.state(f.path) for f in call.files()] if store else None


COMMAND = Command(
    "info", "Devices, ranks, steps, time span, event counts, streams and Perfetto's warnings (a "
    "directory: one row per rank and a job line).",
    (argument("trace", type=paths.Input()), fmt(), rank(), *serving_options(), JOB),
    compute, show,
    api=lambda records, call: records, kind=lambda p: "analysis", inputs=("trace",))
