"""Run ``traceaug whatif`` on one trace and format the replay (``analysis.replay``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..analysis import replay
from ..errors import TraceaugError
from ..output import render_columns
from ..trace import Trace

if TYPE_CHECKING:
    from ..job.run import JobOptions
    from ..read.prefetch import Prefetched


def compute(path: str | Path, step: int | None = None, scales: tuple[str, ...] = (),
            no_launch_delay: bool = False, rank: int | None = None, tp_bin: str | None = None,
            prefetched: Prefetched | None = None, progress: bool | None = None,
            no_stragglers: bool = False, job: JobOptions | None = None) -> tuple[dict, dict]:
    """``replay.tables`` of one trace file (or ``rank`` of a directory), or of a whole job
    (a directory of ranks without ``rank``: ``analysis.job_replay``)."""
    from ..job.run import JobOptions

    parsed = [replay.parse_scale(s) for s in scales]  # bad input refused before any load
    job = job or JobOptions(progress=progress)
    files = job.select(path, rank)
    if len(files) > 1:
        from ..analysis import job_replay

        if prefetched is not None:
            prefetched.close()
        return replay.tables(job_replay.whatif(path, step, parsed, no_launch_delay,
                                               no_stragglers, {"tp_bin": tp_bin}, job,
                                               files))
    if no_stragglers:
        raise TraceaugError(f"{path}: --no-stragglers needs a job (a directory of ranks)")
    with Trace(files[0].path, kind="sync", tp_bin=tp_bin, prefetched=prefetched,
               progress=progress) as trace:
        return replay.tables(replay.whatif(trace, step, parsed, no_launch_delay))


def flat(steps: dict, changes: dict) -> dict:
    """One row per (step, change), the step's figures repeated (csv / json); a step without
    changes keeps one row with an empty change."""
    per_change = ("change", "predicted_ns", "speedup", "saving_pct")
    rows = {k: [] for k in (*steps, *per_change)}
    st = {k: v.tolist() for k, v in steps.items()}  # Python numbers: json writes them
    ch = {k: v.tolist() for k, v in changes.items()}
    for i, s in enumerate(st["step"]):
        mine = [j for j, c in enumerate(ch["step"]) if c == s] or [None]
        for j in mine:
            for k in steps:
                rows[k].append(st[k][i])
            for k in per_change:
                rows[k].append(None if j is None else ch[k][j])
    return {k: np.array(v, dtype=object) for k, v in rows.items()}


def render(steps: dict, changes: dict, fmt: str) -> str:
    """The baseline per step first (its replay error says how far to trust the rest), then
    each change's predicted step time and speedup."""
    if fmt != "table":
        text = render_columns(flat(steps, changes), fmt)
        return text if text.endswith("\n") else text + "\n"
    out = render_columns({"step": steps["step"], "measured_us": steps["measured_ns"] / 1e3,
                          "baseline_us": steps["baseline_ns"] / 1e3,
                          "baseline_error_pct": steps["baseline_error_pct"],
                          "unexplained_pct": steps["unexplained_pct"]}, "table")
    if len(changes["step"]):
        out += "\n" + render_columns({"step": changes["step"], "change": changes["change"],
                                      "predicted_us": changes["predicted_ns"] / 1e3,
                                      "speedup": changes["speedup"],
                                      "saving_pct": changes["saving_pct"]}, "table")
    return out
