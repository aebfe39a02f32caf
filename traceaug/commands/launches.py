"""``traceaug launches``: per launch its call, GPU time and delay, and outliers."""

from __future__ import annotations

from ..analysis import launches
from .analysis import command, shown
from .declare import COUNT, US, Call, option


def _launches_shown(sections: list, call: Call) -> None:
    """The launch list cut to ``--top`` in the terminal (csv / json: all of it)."""
    top = call["top"]
    if call["fmt"] == "table":
        sections = [(t if t != "launches" else f"launches (first {top}; csv / json: all)",
                     {k: v[:top] for k, v in c.items()} if t == "launches" else c)
                    for t, c in sections]
    shown(sections, call)


COMMAND = command(
    "launches", "Per launch: runtime call duration, GPU duration, launch delay; outliers.",
    launches,
    (option("--runtime-cutoff", type=US, default=50.0, show_default=True,
            help="Runtime calls longer than this (µs) are outliers."),
     option("--delay-cutoff", type=US, default=100.0, show_default=True,
            help="Launch delays above this (µs) are outliers."),
     option("--top", type=COUNT, default=20, show_default=True,
            help="Rows of each outlier list (and of the launch list in the terminal).")),
    part=("step", "runtime_cutoff", "delay_cutoff", "top"), show=_launches_shown)
