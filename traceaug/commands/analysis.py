"""What the analysis commands share: the analysis's per-rank part, run in the rank's task (only
its tables come back), the combine of the ranks' parts, the titled tables printed."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import traceaug.paths as paths

from ..errors import TraceaugError
from ..job import parts
from ..job.run import Work
from .declare import JOB, Call, Command, argument, echo, fmt, rank, step

GPU_STEPS = "gpu_steps"  # the load kind the analyses need (``analysis.gpu_steps``)


def rank_parts(call: Call, fn: Callable, params: dict, collectives: bool = False,
               on_result: Callable | None = None) -> tuple[list[parts.RankPart], list | None]:
    """Each rank's ``RankPart`` of ``fn(ops, in_job, **params)``, read as the command's kind, in rank
    order (``on_result``'s answer in its place, as ``job.run.run``'s); with ``collectives``, a job's
    collective tables from the same read (one rank: None), each part's ``path`` its part of the
    verdict's replay (``params["step"]``'s alone, if given)."""
    from functools import partial

    in_job = len(call.files()) > 1
    kind = call.command.kind(call.params)
    both = collectives and in_job
    work = Work("job_path" if both else kind, parts.part,
                {"fn": fn, "in_job": in_job, **params},
                partial(parts.open_ops_and_tables, step=params.get("step")) if both else parts.open_ops)
    done = call.run(work, None, on_result=on_result)
    if not any(p.ops for p in done.values()):
        raise TraceaugError(f"{call['trace']}: no GPU kernels, copies or sets to analyse")
    if not both:
        return list(done.values()), None
    from ..analysis.collectives import ranked

    return list(done.values()), ranked({r: p.collectives for r, p in done.items()})


RELIABILITY = "reliability"
PER_OP = "graph-replayed kernels per op"  # their GPU time per op that captured them (``--capture``)


def per_op(found: list[parts.RankPart]) -> list[tuple[str, dict]]:
    """A section of the GPU time of each op whose captured kernels graph launches replayed, when any rank
    has one (``GpuOps.op_times``): the per-op figures a replay without its capture cannot give."""
    from ..analysis.tables import concat

    have = [p.op_times for p in found if len(p.op_times.get("op", ()))]
    return [(PER_OP, concat(have))] if have else []


def reliability(found: list[parts.RankPart]) -> list[tuple[str, dict]]:
    """A section of what the ranks' figures cannot tell (``GpuOps.notes``), when any rank has a note."""
    from ..analysis.tables import objects

    rows = [(p.rank, n) for p in found for n in p.notes]
    if not rows:
        return []
    return [(RELIABILITY, {"rank": objects([r for r, _ in rows]), "notes": objects([n for _, n in rows])})]


def tables(found: list[parts.RankPart]) -> list[dict]:
    """Each rank's tables; the first rank's analysis error (in rank order) raised, as the
    analyses raised it when they ran in this process."""
    for p in found:
        if p.error is not None:
            raise p.error
    return [p.tables for p in found]


def sections_api(sections: list[tuple[str, dict]], call: Call) -> dict:
    """Each titled table as a DataFrame, its columns named with their unit (``public``)."""
    from ..analysis.tables import frame
    from ..render.sections import public

    return {title: frame(public(t)) for title, t in sections}


def shown(sections: list, call: Call) -> None:
    """The sections printed (``report.sections.render``)."""
    from ..render.sections import render

    echo(render(sections, call["fmt"]))


def command(name: str, help: str, module: ModuleType, options: tuple,
             **declared: Any) -> Command:
    """TRACE, job options, ``--rank``, ``--step``, ``--format``, ``options``: ``module.part(ops,
    in_job, **declared["part"])`` per rank, ``module.combine(tables, **declared["combine"])`` (and with
    ``per_op``, the ``PER_OP`` section)."""
    part, combine = declared.pop("part"), declared.pop("combine", ())
    ops = per_op if declared.pop("per_op", False) else lambda found: []

    def compute(call: Call) -> list[tuple[str, dict]]:
        found, _ = rank_parts(call, module.part, {p: call[p] for p in part})
        return module.combine(tables(found), **{p: call[p] for p in combine}) + ops(found) + \
            reliability(found)

    return Command(name, help, (argument("trace", type=paths.Input()), JOB, rank(),
                                step(), fmt(), *options), compute, declared.pop("show", shown),
                   sections_api, inputs=("trace",), **{"kind": lambda p: GPU_STEPS, **declared})
