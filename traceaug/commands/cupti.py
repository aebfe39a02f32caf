"""``traceaug cupti``: CUPTI range-profiler counters (``cuda_profiler_range`` events) per kernel, with the
CPU ops that launched each and the FLOPs the SASS instruction counts measure (``analysis.cupti``)."""

from __future__ import annotations

import traceaug.paths as paths

from ..job import parts
from .analysis import sections_api, shown
from .declare import JOB, Call, Command, argument, fmt, option, rank


def compute(call: Call) -> list:
    """The per-kernel table of every rank and the long table of every metric."""
    from ..analysis.cupti import kernels
    from ..job.run import Work
    from ..render.cupti_text import sections

    return sections(call.run(Work("cupti", parts.apply, {"fn": kernels}), "cupti"))


def show(result: list, call: Call) -> None:
    """The tables; in the terminal the metrics' long table only with ``--metrics``."""
    from ..render.cupti_text import METRICS

    keep = call["fmt"] != "table" or call["metrics"]
    shown([(title, t) for title, t in result if keep or title != METRICS], call)


COMMAND = Command(
    "cupti", "CUPTI counters per kernel (cuda_profiler_range events): the metrics recorded, the CPU "
    "ops that launched each kernel and the FLOPs the SASS instruction counts measure.",
    (argument("trace", type=paths.Input()), JOB, rank(), fmt(),
     option("--metrics", is_flag=True, help="Also print every recorded metric per kernel (csv and "
            "json always have them).")),
    compute, show, sections_api, kind=lambda p: "cupti", inputs=("trace",),
    cli_only=("fmt", "metrics"))
