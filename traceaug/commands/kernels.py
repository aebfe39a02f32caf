"""``traceaug kernels``: per GPU kernel / copy / set, every rank (``analysis.kernels``)."""

from __future__ import annotations

import click

from ..analysis import kernels
from .analysis import command
from .declare import COUNT, option

COMMAND = command(
    "kernels", "Per GPU kernel / copy / set: count, total, mean, std, min, max, shares and type.",
    kernels,
    (option("--top", type=COUNT, help="Only the first N kernels (per rank)."),
     option("--sort", type=click.Choice(list(kernels.SORTS)), default="total", show_default=True,
            help="Order of the kernels."),
     option("--type", "kind", type=click.Choice(["comp", "comm", "mem"]),
            help="Only computation, communication or memory ops.")),
    part=("step", "kind", "sort"), combine=("top",), per_op=True, schema_version=2,
    kind=lambda p: kernels.load_kind(p.get("step")))
