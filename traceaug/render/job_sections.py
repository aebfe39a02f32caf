"""``report JOB``'s job section as titled tables: the verdict per step (``job_verdict``), the NCCL kernels'
wait vs transfer, each rank's step time and wait in collectives per step, and the wait per rank at each
collective (the page's heatmap)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis import collectives as co
from ..analysis.job_verdict import Verdict
from ..analysis.tables import columns_of
from .findings import JOB_NCCL, JOB_VERDICT

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


def verdict_table(found: list[Verdict]) -> dict[str, np.ndarray]:
    """The verdicts as a table: their figures, then the text (``verdict``)."""
    rows = [{**{k: v for k, v in x.row().items() if k != "text"}, "verdict": x.text} for x in found]
    return columns_of(pd.DataFrame(rows, columns=[*Verdict.__dataclass_fields__, "verdict"])
                      .drop(columns="text"))


def nccl_table(matched: co.Matched) -> dict[str, np.ndarray]:
    """Per NCCL kernel name: its time per rank split into the wait for the last arrival and the
    transfer after it (``collectives.split_of``), and the rank it waited for most."""
    split = co.split_of(matched)
    names = sorted(split, key=lambda n: -(split[n]["wait"] + split[n]["transfer"]))
    return {"name": np.array(names, dtype=object),
            "wait_ns": np.array([split[n]["wait"] for n in names], np.float64),
            "transfer_ns": np.array([split[n]["transfer"] for n in names], np.float64),
            "waited_for_rank": np.array([split[n]["waited_for"] for n in names], dtype=object)}


def job_sections(matched: co.Matched, top: int | None, verdicts: list[Verdict]
                 ) -> list[tuple[str, dict]]:
    """The verdicts, the NCCL kernels' wait vs transfer, per step each rank's step time and collective wait,
    and the wait heatmap (rank × collective: the ``top`` with the largest skew; ``top=None``: all, in
    job-clock order)."""
    table = co.step_table(matched)
    label = instance_labels(matched)
    waits = co.wait_table(matched)
    if top is None:  # in the order the collectives completed gathering (their last arrival)
        shown_iids = waits.groupby("iid")["arrival_ns"].max().sort_values(kind="stable").index
        what = "every matched collective, in job-clock order (µs)"
    else:
        inst = co.instance_table(matched)
        worst = inst.sort_values("skew_ns", ascending=False, kind="stable").head(top)
        shown_iids = matched.instances["iid"].iloc[worst.index]
        what = "the collectives with the largest skew (µs)"
    waits = waits[waits["iid"].isin(shown_iids)]
    heat = (waits.assign(wait_us=waits["wait_ns"] / 1e3, what=waits["iid"].map(label))
            .pivot(index="rank", columns="what", values="wait_us"))
    heat = heat[[label[i] for i in shown_iids]].reset_index()
    return [(JOB_VERDICT, verdict_table(verdicts)), (JOB_NCCL, nccl_table(matched)),
            (JOB_STEPS, columns_of(table)),
            (JOB_WAITS + what, columns_of(heat.rename(columns=str)))]

