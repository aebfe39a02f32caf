"""``traceaug breakdown``: per rank and step, busy / idle / by type and idle per stream."""

from __future__ import annotations

from ..analysis import breakdown
from .analysis import command
from .declare import US, option

COMMAND = command(
    "breakdown", "Per rank and step: busy / idle / computation / communication / memory and "
    "overlaps, idle per stream, communication-computation overlap.", breakdown,
    (option("--kernel-wait-us", type=US, default=30.0, show_default=True,
            help="Gaps shorter than this (and not host waits) are kernel waits (HTA's rule)."),),
    part=("step", "kernel_wait_us"), per_op=True, schema_version=2)
