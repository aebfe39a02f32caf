"""``report JOB``'s job section as titled tables: who waited for whom (findings), each rank's step time and
wait in collectives per step, and the wait per rank at each collective (the page's heatmap)."""

from __future__ import annotations

import numpy as np

from ..analysis import collectives as co
from ..analysis.tables import columns_of

JOB_FINDINGS = "job: findings"
JOB_STEPS = "job: step time and wait in collectives per rank"
JOB_WAITS = "job: wait per rank at "  # then which collectives, and the unit


def instance_labels(matched: co.Matched) -> dict[int, str]:
    """Each matched instance's name in the job section: ``kind#position`` in its group, the
    group first when the job has more than one (positions repeat across groups)."""
    inst = matched.instances
    many = inst["group"].nunique() > 1
    return {i: (f"{g} " if many else "") + f"{k}#{p}"
            for i, g, k, p in zip(inst["iid"], inst["group"], inst["kind"], inst["position"])}


def kind_of_label(label: str) -> str:
    """The collective kind in an ``instance_labels`` label (kinds hold no space or ``#``)."""
    return label.rsplit("#", 1)[0].rsplit(" ", 1)[-1]


def job_sections(matched: co.Matched, top: int | None) -> list[tuple[str, dict]]:
    """The findings, per step each rank's step time and collective wait, and the wait heatmap (rank ×
    collective: the ``top`` with the largest skew; ``top=None``: all, in job-clock order)."""
    found, table = co.findings(matched), co.step_table(matched)
    label = instance_labels(matched)
    waits = co.wait_table(matched)
    if top is None:  # in the order the collectives completed gathering (their last arrival)
        shown_iids = waits.groupby("iid")["arrival_ns"].max().sort_values(kind="stable").index
        what = "every matched collective, in job-clock order (µs)"
    else:
        inst = co.instance_table(matched)
        worst = inst.sort_values("skew_us", ascending=False, kind="stable").head(top)
        shown_iids = matched.instances["iid"].iloc[worst.index]
        what = "the collectives with the largest skew (µs)"
    waits = waits[waits["iid"].isin(shown_iids)]
    heat = (waits.assign(wait_us=waits["wait_ns"] / 1e3, what=waits["iid"].map(label))
            .pivot(index="rank", columns="what", values="wait_us"))
    heat = heat[[label[i] for i in shown_iids]].reset_index()
    return [(JOB_FINDINGS, {"finding": np.array(found or ["no rank held the others up"],
                                                dtype=object)}),
            (JOB_STEPS, columns_of(table)),
            (JOB_WAITS + what, columns_of(heat.rename(columns=str)))]

