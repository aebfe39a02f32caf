"""``traceaug kernels | gaps | breakdown | launches``: an analysis's per-rank part (run in the
rank's task, where its ops are: only its tables come back) and the combine of the ranks' parts
(``analysis.kernels`` ...), rendered as titled tables (``report.sections``)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import click

from .. import paths
from ..analysis import breakdown, gaps, kernels, launches
from ..errors import TraceaugError
from ..job import parts
from ..job.run import Work
from .declare import COUNT, JOB, US, Call, Command, argument, echo, fmt, option, rank, step

GPU_STEPS = "gpu_steps"  # the load kind the analyses need (``analysis.gpu_steps``)


def rank_parts(call: Call, fn: Callable, params: dict, kind: str = GPU_STEPS,
               collectives: bool = False) -> tuple[list[parts.RankPart], list | None]:
    """Each rank's ``RankPart`` of ``fn(ops, in_job, **params)`` in rank order, computed in its
    task; and for a job of several ranks (``collectives``) each rank's collective tables from
    the same read (``analysis.collectives.ranked``), else None."""
    from ..analysis.collectives import ranked

    in_job = len(call.files()) > 1
    both = collectives and in_job
    work = Work("collectives" if both else kind, parts.part,
                {"fn": fn, "in_job": in_job, **params},
                parts.open_ops_and_tables if both else parts.open_ops)
    done = call.run(work, None)
    if not any(p.ops for p in done.values()):
        raise TraceaugError(f"{call['trace']}: no GPU kernels, copies or sets to analyse")
    tables = ranked({r: p.collectives for r, p in done.items()}) if both else None
    return list(done.values()), tables


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
    from ..report.sections import public

    return {title: frame(public(t)) for title, t in sections}


def shown(sections: list, call: Call, full_names: bool = False) -> None:
    """The sections printed (``report.sections.render``)."""
    from ..report.sections import render

    echo(render(sections, call["fmt"], full_names))


def _command(name: str, help: str, module: ModuleType, options: tuple,
             **declared: Any) -> Command:
    """An analysis command: TRACE, the job options, ``--rank``, ``--step``, ``--format``, then
    its ``options``; ``module.part`` takes the rank's ops and the parameters ``declared["part"]``
    names, ``module.combine`` the ranks' tables and those ``declared["combine"]`` names."""
    part, combine = declared.pop("part"), declared.pop("combine", ())

    def compute(call: Call) -> list[tuple[str, dict]]:
        found, _ = rank_parts(call, module.part, {p: call[p] for p in part},
                              declared.get("kind", lambda p: GPU_STEPS)(call.params))
        return module.combine(tables(found), **{p: call[p] for p in combine})

    return Command(name, help, (argument("trace", type=paths.Input(urls=True)), JOB, rank(),
                                step(), fmt(), *options), compute, declared.pop("show", shown),
                   sections_api, inputs=("trace",), **{"kind": lambda p: GPU_STEPS, **declared})


def _launches_shown(sections: list, call: Call) -> None:
    """The launch list cut to ``--top`` in the terminal (csv / json: all of it)."""
    top = call["top"]
    if call["fmt"] == "table":
        sections = [(t if t != "launches" else f"launches (first {top}; csv / json: all)",
                     {k: v[:top] for k, v in c.items()} if t == "launches" else c)
                    for t, c in sections]
    shown(sections, call)


def _gaps_check(call: Call) -> None:
    if call["hist_min"] is not None and call["hist_max"] is not None \
            and call["hist_min"] >= call["hist_max"]:
        raise click.BadParameter(f"{call['hist_max']:g} is not above --hist-min "
                                 f"{call['hist_min']:g}", param_hint="--hist-max")


KERNELS = _command(
    "kernels", "Per GPU kernel / copy / set: count, total, mean, std, min, max, shares and type.",
    kernels,
    (option("--top", type=COUNT, help="Only the first N kernels (per rank)."),
     option("--sort", type=click.Choice(list(kernels.SORTS)), default="total", show_default=True,
            help="Order of the kernels."),
     option("--type", "kind", type=click.Choice(["comp", "comm", "mem"]),
            help="Only computation, communication or memory ops."),
     option("--full-names", is_flag=True, help="Do not shorten long names in the terminal.")),
    part=("step", "kind", "sort"), combine=("top",),
    show=lambda sections, call: shown(sections, call, call["full_names"]),
    kind=lambda p: kernels.load_kind(p.get("step")))
GAPS = _command(
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
BREAKDOWN = _command(
    "breakdown", "Per rank and step: busy / idle / computation / communication / memory and "
    "overlaps, idle per stream, communication-computation overlap.", breakdown,
    (option("--kernel-wait-us", type=US, default=30.0, show_default=True,
            help="Gaps shorter than this (and not host waits) are kernel waits (HTA's rule)."),),
    part=("step", "kernel_wait_us"))
LAUNCHES = _command(
    "launches", "Per launch: runtime call duration, GPU duration, launch delay; outliers.",
    launches,
    (option("--runtime-cutoff", type=US, default=50.0, show_default=True,
            help="Runtime calls longer than this (µs) are outliers."),
     option("--delay-cutoff", type=US, default=100.0, show_default=True,
            help="Launch delays above this (µs) are outliers."),
     option("--top", type=COUNT, default=20, show_default=True,
            help="Rows of each outlier list (and of the launch list in the terminal).")),
    part=("step", "runtime_cutoff", "delay_cutoff", "top"), show=_launches_shown)
