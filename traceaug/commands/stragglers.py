"""``traceaug stragglers``: per step the job's verdict (``analysis.job_verdict``: the rank whose lateness sets
the step, where it comes from, what the others lost, what the replay saves without it), then per step each
rank's step time and wait in collectives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache, partial
from typing import TYPE_CHECKING

from .collectives import declared, matched, out, with_attrs
from .declare import Call

if TYPE_CHECKING:
    import pandas as pd

    from ..analysis import collectives as co
    from ..analysis.job_verdict import Verdict


def verdicts(found: co.Matched, paths: dict, job: co.Matched | None = None,
             call: Call | None = None) -> list[Verdict]:
    """Every step's verdict of the job ``found`` (``--step``'s only, if given), with the job replay of that
    step unchanged and without stragglers (``job_replay.without_stragglers`` of ``paths``, the ranks'
    ``job_path.replay_part``s): only the steps a verdict names are replayed. ``job``: the ranks' collectives
    matched and aligned, every step (``jp.match_parts(paths)``), when the caller has it; ``call``: the
    command, whose ranks' whole graphs a replay reads where their ports cannot tell (``graphs``)."""
    from ..analysis import job_path as jp
    from ..analysis import job_replay
    from ..analysis.job_verdict import verdicts as made

    steps = {int(s) for s in found.instances["step"].dropna()} & set(jp.step_keys(paths))
    if len(found.tables) < 2 or not steps:
        return made(found)
    job = job or jp.match_parts(paths)  # (the replay's own match: aligned, every step)
    whole = graphs(call) if call is not None else None
    return made(found, {k: job_replay.without_stragglers(paths, job, k, whole) for k in sorted(steps)})


def graphs(call: Call) -> Callable[[], dict]:
    """Every rank's graphs with their replay models (``job_path.rank_part``, keyed), read once when first
    asked: a verdict's replay asks only where the ranks' ports cannot tell (``job_replay.replayed``)."""
    from ..analysis.job_path import keyed
    from ..job import parts
    from ..job.run import Work

    return cache(lambda: keyed(call.run(Work("job_path", parts.job_path, {"scales": ()}), "job_path:()")))


def tables_and_path(opened) -> tuple:
    """A rank's collective tables (with the causes' windows) and its ``job_path.RankPart`` with replay
    models: from the one load of kind ``job_path`` the analysis commands share on a job with the table
    cache on, else from a load of kind ``stragglers`` (no report's sections computed)."""
    return opened.tables, opened.path


def _compute(call: Call) -> tuple[co.Matched, list[Verdict]]:
    from ..analysis import collectives as co
    from ..analysis.job_path import keyed
    from ..job import parts
    from ..job.run import Work

    done = call.run(Work("stragglers", parts.apply, {"fn": tables_and_path},
                         partial(parts.open_ops_and_tables, step=call["step"])), "stragglers")
    tables = {r: t for r, (t, _) in done.items()}
    # the replay's match (aligned, every step) is the one shown before --step: the job matched once
    job = co.match_job(co.ranked(tables)) if call["align"] else None
    found = matched(call, call["align"], tables, job)
    return found, verdicts(found, keyed({r: p for r, (_, p) in done.items()}), job, call)


def _show(found: tuple[co.Matched, list[Verdict]], call: Call) -> None:
    from ..render.collectives_text import notes, render_table, stragglers_frame

    m, said = found
    table = stragglers_frame(m, call["rank"])
    csv = call["fmt"] == "csv"
    out(render_table(table, call["fmt"], None if csv else said),
        notes(m) + ([v.text for v in said] if csv else []))


def _api(found: tuple[co.Matched, list[Verdict]], call: Call) -> pd.DataFrame:
    """Per step and rank ``step_ns``, ``collectives``, ``wait_ns`` (in collectives),
    ``straggler_count``, ``caused_wait_ns`` (the others' mean wait for it, summed);
    ``attrs["verdict"]``: per step the verdict's figures and text (``job_verdict.Verdict``),
    ``attrs["findings"]``: the texts."""
    from ..render.collectives_text import stragglers_frame

    m, said = found
    table = stragglers_frame(m, call["rank"])
    table.attrs["verdict"] = [v.row() for v in said]
    table.attrs["findings"] = [v.text for v in said]
    return with_attrs(table, m)


def _findings(found: tuple[co.Matched, list[Verdict]], call: Call) -> list[dict]:
    """``straggler.late_start`` per step (``render.findings``), verified on the straggler's own file."""
    from ..render.findings import straggler_findings

    return straggler_findings(*found, {f.rank: f.path for f in call.files()})


COMMAND = replace(declared(
    "stragglers", "Who the ranks of a job waited for: per step the verdict in plain words (the step "
    "time, the rank whose lateness sets it and why, what the others lost, what the step would take "
    "without stragglers), then per step each rank's step time and time waiting in collectives.",
    _show, _api, compute=_compute), findings=_findings)
