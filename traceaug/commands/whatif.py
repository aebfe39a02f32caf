"""``traceaug whatif``: the replay of one trace or of a whole job (``analysis.replay``,
``analysis.job_replay``), per step the baseline and each change, formatted."""

from __future__ import annotations

from typing import NamedTuple

import click

import traceaug.paths as paths

from ..errors import TraceaugError
from .declare import JOB, Call, Command, argument, echo, fmt, option, rank, step


def compute(call: Call) -> tuple[dict, dict, dict]:
    """``replay.tables`` of one trace file (or ``--rank`` of a directory), or of a whole job (a directory
    of ranks without ``--rank``: ``analysis.job_replay``), and the replays' errors over the steps."""
    from ..analysis import job_path as jp
    from ..analysis import job_replay, replay
    from ..job import parts
    from ..job.run import Work, items_of, run

    scales = call["scale"]
    parsed = [replay.parse_scale(s) for s in ((scales,) if isinstance(scales, str) else scales)]
    files = call.files()
    if len(files) > 1 and call.get("roofline") is not None:
        raise TraceaugError(f"{call['trace']}: --roofline replays one rank: choose it with --rank")
    if len(files) > 1:
        done = run(Work("job_path", parts.job_path, {"scales": tuple(parsed)}), items_of(files),
                   call.job)
        return _with_errors(replay.tables(job_replay.whatif(
            jp.keyed(done), call["step"], parsed, call["no_launch_delay"], call["no_stragglers"])))
    if call["no_stragglers"]:
        raise TraceaugError(f"{call['trace']}: --no-stragglers needs a job (a directory of ranks)")
    roofline = call.get("roofline")
    work = Work("sync" if roofline is None else "sync_shapes", parts.apply,
                {"fn": _replayed, "step": call["step"], "scales": parsed,
                 "no_launch_delay": call["no_launch_delay"], "roofline": roofline})
    return _with_errors(run(work, items_of(files), call.job)[files[0].rank])


def _with_errors(found: tuple[dict, dict]) -> tuple[dict, dict, dict]:
    from ..analysis.replay import error_summary

    return (*found, error_summary(found[0]))


def _replayed(trace, step: int | None, scales: list, no_launch_delay: bool,
              roofline: float | None = None) -> tuple[dict, dict]:
    from ..analysis import replay
    from ..analysis.efficiency import at_roofline

    factors = None if roofline is None else {
        f"roofline={roofline:g}%": lambda ev: at_roofline(trace, roofline, ev["correlation"], ev["gpu"],
                                                          ev["id"])}
    return replay.tables(replay.whatif(trace, step, scales, no_launch_delay, factors))


class WhatIf(NamedTuple):
    """``traceaug.whatif``'s result: per step the measured, replayed baseline and dependency-only times
    (``step, measured_ns, baseline_ns, baseline_error_pct, unexplained_pct, dependency_ns,
    dependency_error_pct, with_cpu_gaps_ns, with_cpu_gaps_error_pct``), per (step, change) the
    predicted step time (``step, change, predicted_ns, speedup, saving_pct``), and each replay's error
    over the steps (``replay, steps, mean_abs_error_pct, p90_abs_error_pct, max_abs_error_pct``)."""

    steps: object
    changes: object
    errors: object


def _api(found: tuple[dict, dict, dict], call: Call) -> WhatIf:
    from ..analysis.tables import frame

    return WhatIf(*(frame(t) for t in found))


def _check(call: Call) -> None:
    from ..analysis.replay import parse_scale

    for s in call["scale"]:  # refused before any load: a usage error
        try:
            parse_scale(s)
        except TraceaugError as e:
            raise click.UsageError(str(e)) from None


def _show(found: tuple[dict, dict, dict], call: Call) -> None:
    from ..render.whatif_text import render

    echo(render(*found, call["fmt"]))


COMMAND = Command(
    "whatif", "Replay TRACE's critical-path graph per step: the baseline's replay error, then the "
    "predicted step time and speedup of each change, and the error of a dependency-only replay "
    "(recorded durations and dependencies alone). A directory of ranks: the whole job, the "
    "ranks' graphs joined at every collective.",
    (argument("trace", type=paths.Input()),
     step("Only ProfilerStep#N (default: every step)."),
     option("--scale", "scale", multiple=True, metavar="SELECTOR=FACTOR",
            help="Scale the time of the events SELECTOR picks: comp, comm, mem (kernel types), "
                 "cpu, or a kernel / CPU op name glob. Repeatable: each is one change."),
     option("--no-launch-delay", is_flag=True, help="Also replay with launch delays of 0."),
     option("--roofline", type=click.FloatRange(0, 100, min_open=True), metavar="PCT",
            help="Also replay with every op efficiency models at PCT % of its roofline (no op made "
                 "slower; ops without a model or peaks unchanged)."),
     option("--no-stragglers", is_flag=True,
            help="A job: also replay with every rank at the median arrival of each collective."),
     rank("For a directory: the rank to replay (default: the job)."), fmt(), JOB),
    compute, _show, _api,
    kind=lambda p: "sync" if p.get("roofline") is None else "sync_shapes", inputs=("trace",),
    prepare=_check)
