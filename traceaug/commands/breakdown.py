"""``traceaug breakdown``: per rank and step, busy / idle / by type and idle per stream; a serving trace's
figures per phase first (``analysis.serving_phases``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..analysis import breakdown, serving_phases
from .analysis import command
from .declare import US, option

if TYPE_CHECKING:
    from ..analysis.gpu_steps import GpuOps


def part(g: GpuOps, in_job: bool, step: int | None, kernel_wait_us: float) -> dict:
    """A rank's breakdown (``analysis.breakdown.part``) and, of a serving trace, its phases."""
    out = breakdown.part(g, in_job, step, kernel_wait_us)
    phases = serving_phases.part(g, step)
    return out if phases is None else {**out, "phases": phases}


def combine(parts: list[dict]) -> list[tuple[str, dict]]:
    """The ranks' serving phases (none without), then ``analysis.breakdown``'s sections."""
    return [*serving_phases.sections([p.get("phases") for p in parts]), *breakdown.combine(parts)]


COMMAND = command(
    "breakdown", "Per rank and step: busy / idle / computation / communication / memory and "
    "overlaps, idle per stream, communication-computation overlap; a serving trace's steps per phase "
    "(prefill, decode, mixed): latency, GPU busy / idle, launch and scheduler time, kernel families.",
    sys.modules[__name__],
    (option("--kernel-wait-us", type=US, default=30.0, show_default=True,
            help="Gaps shorter than this (and not host waits) are kernel waits (HTA's rule)."),),
    part=("step", "kernel_wait_us"), per_op=True, schema_version=2)
