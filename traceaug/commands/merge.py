"""``traceaug merge``: every rank of a job in one Perfetto trace (``rewrite.merge_job``), on
the clock of its matched collectives."""

from __future__ import annotations

from pathlib import Path

import traceaug.guard as guard
import traceaug.paths as paths

from ..errors import TraceaugError
from .collectives import TABLES
from .declare import JOB, Call, Command, argument, option, said


def write(call: Call, out: Path, align: bool = True) -> tuple[int, int]:
    """The merged trace of the job (the command's first trace input) at ``out``, checked
    against its ranks before any work; the ranks and cross-rank arrows written."""
    from ..analysis import collectives as co
    from ..job.run import local_files
    from ..rewrite.merge_job import write_job

    files = call.files()
    if len(files) < 2:
        raise TraceaugError(f"{call[call.command.inputs[0]]}: merge needs a directory of two "
                            "ranks or more")
    guard.check([f.path for f in files], [out])
    found = co.match_job(co.ranked(call.run(TABLES, "collectives")), align)
    with local_files(files) as local:
        return write_job(local, out, found)


def _show(written: tuple[int, int], call: Call) -> None:
    said(f"wrote {call['dst']} ({written[0]} ranks, {written[1]} cross-rank arrows)")


COMMAND = Command(
    "merge", "Write OUT: every rank of JOB in one Perfetto trace (processes \"rank N CPU\", "
    "\"rank N GPU d\" in rank order, clocks aligned, flow arrows from each waiting rank's kernel of a "
    "collective to the last arrival's, the straggler's).",
    (argument("src", metavar="JOB", type=paths.Input()), argument("dst", metavar="OUT",
                                                                 type=paths.Output()),
     option("--no-align", "align", is_flag=True, flag_value=False, default=True,
            help="Keep each rank's recorded clock (default: align the ranks' clocks on the "
            "ends of matched collectives)."), JOB),
    lambda call: write(call, call["dst"], call["align"]), _show,
    lambda written, call: written, inputs=("src",), rank_selects=False)
