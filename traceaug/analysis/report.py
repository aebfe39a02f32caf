"""The ``report`` command's text: every analysis of a rank's GPU ops with the report's options."""

from __future__ import annotations

from . import breakdown, gaps, kernels, launches
from .gpu_steps import GpuOps
from .tables import Columns


def part(g: GpuOps, in_job: bool, step: int | None, top: int) -> dict:
    """A rank's part of the ``report`` command's text: each analysis's part with the report's
    options."""
    return {"kernels": kernels.part(g, in_job, step),
            "breakdown": breakdown.part(g, in_job, step, breakdown.KERNEL_WAIT_US),
            "gaps": gaps.part(g, in_job, step, top, "count"),
            "launches": launches.part(g, in_job, step, launches.RUNTIME_CUTOFF_US,
                                      launches.DELAY_CUTOFF_US, top, full=False)}


def combine(parts: list[dict], top: int) -> list[tuple[str, Columns]]:
    """Every analysis's tables (the text form of ``report``) from each rank's ``part``."""
    def each(name: str) -> list[dict]:
        return [p[name] for p in parts]

    return (kernels.combine(each("kernels"), top) + breakdown.combine(each("breakdown"))
            + gaps.combine(each("gaps"), None, None, 20) + launches.combine(each("launches")))

