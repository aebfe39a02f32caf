"""``traceaug stragglers``: per step the job's verdict (``analysis.job_verdict``: the rank whose lateness sets
the step, where it comes from, what the others lost, what the replay saves without it), then per step each
rank's step time and wait in collectives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .collectives import declared, matched, out, with_attrs
from .declare import Call

if TYPE_CHECKING:
    import pandas as pd

    from ..analysis import collectives as co
    from ..analysis.job_verdict import Verdict


def verdicts(call: Call, found: co.Matched, paths: dict | None = None) -> list[Verdict]:
    """Every step's verdict of the job ``found`` (``--step``'s only, if given), with the job replay's step
    time without stragglers (``job_replay.whatif`` of ``paths``, the ranks' ``job_path.RankPart``s; None:
    each rank read once more for them)."""
    from ..analysis import job_path as jp
    from ..analysis import job_replay
    from ..analysis.job_verdict import verdicts as made
    from ..job import parts
    from ..job.run import Work

    steps = {int(s) for s in found.instances["step"].dropna()}
    if len(found.tables) < 2 or not steps:
        return made(found)
    done = paths or jp.keyed(call.run(Work("job_path", parts.job_path, {"scales": ()}), "job_path"))
    replays = [r for s in sorted(steps)
               for r in job_replay.whatif(done, s, (), no_stragglers=True)]
    return made(found, {r.step: (r.baseline_ns, r.predicted_ns[job_replay.NO_STRAGGLERS])
                        for r in replays})


def _compute(call: Call) -> tuple[co.Matched, list[Verdict]]:
    found = matched(call, call["align"])
    return found, verdicts(call, found)


def _show(found: tuple[co.Matched, list[Verdict]], call: Call) -> None:
    from ..report.collectives_text import notes, render_table, stragglers_frame

    m, said = found
    table = stragglers_frame(m, call["rank"])
    csv = call["fmt"] == "csv"
    out(render_table(table, call["fmt"], None if csv else said),
        notes(m) + ([v.text for v in said] if csv else []))


def _api(found: tuple[co.Matched, list[Verdict]], call: Call) -> pd.DataFrame:
    """Per step and rank ``step_us``, ``collectives``, ``wait_us`` (in collectives),
    ``straggler_count``, ``caused_wait_us`` (the others' mean wait for it, summed);
    ``attrs["verdict"]``: per step the verdict's figures and text (``job_verdict.Verdict``),
    ``attrs["findings"]``: the texts."""
    from ..report.collectives_text import stragglers_frame

    m, said = found
    table = stragglers_frame(m, call["rank"])
    table.attrs["verdict"] = [v.row() for v in said]
    table.attrs["findings"] = [v.text for v in said]
    return with_attrs(table, m)


COMMAND = declared(
    "stragglers", "Who the ranks of a job waited for: per step the verdict in plain words (the step "
    "time, the rank whose lateness sets it and why, what the others lost, what the step would take "
    "without stragglers), then per step each rank's step time and time waiting in collectives.",
    _show, _api, compute=_compute)
