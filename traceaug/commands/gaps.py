"""``traceaug gaps``: idle gaps per stream and device, their histogram, transitions."""

from __future__ import annotations

import click

from ..analysis import gaps
from .analysis import command
from .declare import COUNT, US, Call, option


def _gaps_check(call: Call) -> None:
    """A histogram's bounds in order."""
    if call["hist_min"] is not None and call["hist_max"] is not None \
            and call["hist_min"] >= call["hist_max"]:
        raise click.BadParameter(f"{call['hist_max']:g} is not above --hist-min "
                                 f"{call['hist_min']:g}", param_hint="--hist-max")


COMMAND = command(
    "gaps", "Idle gaps per stream and per device, their histogram, kernel-to-kernel transitions.",
    gaps,
    (option("--hist-min", type=US, help="Histogram lower bound (µs)."),
     option("--hist-max", type=US, help="Histogram upper bound (µs)."),
     option("--bins", type=click.IntRange(1, 1000), default=20, show_default=True,
            help="Histogram bins."),
     option("--top", type=COUNT, default=20, show_default=True, help="Transitions shown per rank."),
     option("--sort", type=click.Choice(list(gaps.TRANSITION_SORTS)), default="count",
            show_default=True, help="Order of the transitions.")),
    part=("step", "top", "sort"), combine=("hist_min", "hist_max", "bins"), prepare=_gaps_check)
