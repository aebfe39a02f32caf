"""``traceaug collectives`` and ``traceaug stragglers``: the tables of
``analysis.collectives`` for a job (a directory of ranks), filtered by step and rank, and
rendered; the Python API returns the same DataFrames."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from ..analysis import collectives as co
from ..analysis.steps import check_step
from ..errors import TraceaugError
from ..output import render_columns


def job_for(path: str | Path, step: int | None, rank: int | None, align: bool,
            options: dict | None = None, mapper: Callable | None = None, run=None,
            tables: list | None = None) -> co.Job:
    """The matched job of ``path`` (``tables``: its ranks' already read), only ``step``'s
    instances when given; ``rank`` must be one of its ranks (every rank is read: matching
    needs them all)."""
    job = co.load_job(path, align_clocks=align, options=options, mapper=mapper, job=run,
                      tables=tables)
    if rank is not None and rank not in job.tables:
        raise TraceaugError(f"{path}: no trace for rank {rank} "
                            f"(it has {', '.join(map(str, sorted(job.tables)))})")
    if not sum(len(t.colls) for t in job.tables.values()):
        raise TraceaugError(f"{path}: no NCCL / RCCL collective kernels to analyse")
    if step is not None:
        numbers = np.unique(np.concatenate([t.steps["step"].to_numpy(np.int64)
                                            for t in job.tables.values()]))
        check_step(path, numbers, step)
        keep = job.instances[job.instances["step"].eq(step).fillna(False).astype(bool)]
        job = co.Job(job.tables, keep, job.arrivals[job.arrivals["iid"].isin(keep["iid"])],
                     job.clock, job.problems)
    return job


def collectives_frame(job: co.Job, by: str = "instance", rank: int | None = None) -> pd.DataFrame:
    """``by="instance"``: one row per matched instance (those ``rank`` takes part in);
    ``by="rank"``: one row per rank (``rank`` only)."""
    if by == "rank":
        out = co.by_rank(job)
        return out[out["rank"] == rank].reset_index(drop=True) if rank is not None else out
    if by != "instance":
        raise TraceaugError(f"by must be 'instance' or 'rank', not {by!r}")
    out = co.instance_table(job)
    if rank is not None:
        mine = job.arrivals.loc[job.arrivals["rank"] == rank, "iid"]
        out = out[job.instances["iid"].isin(mine).to_numpy()].reset_index(drop=True)
    return out


def stragglers_frame(job: co.Job, rank: int | None = None) -> tuple[list[str], pd.DataFrame]:
    """The ranked findings and the per step and rank table."""
    table = co.step_table(job)
    if rank is not None:
        table = table[table["rank"] == rank].reset_index(drop=True)
    return co.findings(job), table


def notes(job: co.Job) -> list[str]:
    """Lines for stderr: what could not be matched, and the clock offsets applied."""
    out = [f"not matched: {p}" for p in job.problems]
    clock = job.clock
    if len(clock) > 1 and clock["applied"].any():
        ref = int(clock["rank"].iat[0])
        spread = float(clock["residual_ns"].max()) / 1e3
        # each rank against its own uncertainty: one odd rank's spread hides no other's offset
        moved = clock[clock["offset_ns"].abs() > clock["residual_ns"].clip(lower=1000)]
        shown = ", ".join(f"rank {r} {o / 1e3:+.1f} us" for r, o in
                          zip(moved["rank"].tolist(), moved["offset_ns"].tolist()))
        out.append(f"job clock: offsets vs rank {ref}: {shown or f'all within {spread:.1f} us'}"
                   f" (residual spread up to {spread:.1f} us)")
        for r in clock[(clock["reference"] == clock["rank"]) & (clock["rank"] != ref)]["rank"]:
            part = clock[clock["reference"].isin([r]) | (clock["rank"] == r)]["rank"].tolist()
            out.append(f"job clock: ranks {', '.join(map(str, part))} share no matched collective "
                       f"with rank {ref}: aligned on rank {r}, not on rank {ref}")
    return out


def columns_of(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """A DataFrame as ``render_columns`` and ``commands.analyses`` sections take it: numpy
    columns, pandas' NA as None (NaN is missing to ``render_columns`` as it is)."""
    out = {}
    for c in df.columns:
        values = df[c].to_numpy(dtype=object) if df[c].dtype == object or str(df[c].dtype) in (
            "Int64", "Float64") else df[c].to_numpy()
        if values.dtype == object:
            values = np.array([None if v is pd.NA else v for v in values.tolist()] or [],
                              dtype=object)
        out[c] = values
    return out


def render_table(df: pd.DataFrame, fmt: str, findings: list[str] | None = None) -> str:
    """The table in ``fmt``; the findings first in a table, as a key of the json object."""
    if fmt == "json" and findings is not None:
        rows = orjson.loads(render_columns(columns_of(df), "json"))
        return orjson.dumps({"findings": findings, "steps": rows},
                            option=orjson.OPT_INDENT_2).decode() + "\n"
    body = render_columns(columns_of(df), fmt, digits=2)
    if fmt == "table" and findings is not None:
        head = "\n".join(f"{i}. {f}" for i, f in enumerate(findings, 1)) or \
            "no rank held the others up"
        return f"{head}\n\n{body}"
    return body


JOB_FINDINGS = "job: findings"
JOB_STEPS = "job: step time and wait in collectives per rank"
JOB_WAITS = "job: wait per rank at "  # then which collectives, and the unit


def instance_labels(job: co.Job) -> dict[int, str]:
    """Each matched instance's name in the job section: ``kind#position`` in its group, the
    group first when the job has more than one (positions repeat across groups)."""
    inst = job.instances
    many = inst["group"].nunique() > 1
    return {i: (f"{g} " if many else "") + f"{k}#{p}"
            for i, g, k, p in zip(inst["iid"], inst["group"], inst["kind"], inst["position"])}


def kind_of_label(label: str) -> str:
    """The collective kind in an ``instance_labels`` label (kinds hold no space or ``#``)."""
    return label.rsplit("#", 1)[0].rsplit(" ", 1)[-1]


def job_sections(path: str | Path, step: int | None, top: int | None, options: dict | None = None,
                 mapper: Callable | None = None, run=None, tables: list | None = None
                 ) -> list[tuple[str, dict]]:
    """``report JOB``'s job section: the findings, per step each rank's step time and wait
    in collectives, and the wait heatmap (rank × collective: the ``top`` with the largest
    skew; ``top=None``: every matched instance in job-clock order, as the page draws it);
    none when the job has no collectives. ``tables``: the ranks' collective tables when
    already read (``analyses.load_job``: with their GPU ops, one read per rank)."""
    try:
        job = job_for(path, step, None, True, options, mapper, run, tables)
    except TraceaugError as e:
        if "no NCCL / RCCL collective kernels" in str(e):
            return []
        raise
    found, table = stragglers_frame(job)
    label = instance_labels(job)
    waits = co._wait_table(job)
    if top is None:  # in the order the collectives completed gathering (their last arrival)
        shown_iids = waits.groupby("iid")["arrival_ns"].max().sort_values(kind="stable").index
        what = "every matched collective, in job-clock order (µs)"
    else:
        inst = co.instance_table(job)
        worst = inst.sort_values("skew_us", ascending=False, kind="stable").head(top)
        shown_iids = job.instances["iid"].iloc[worst.index]
        what = "the collectives with the largest skew (µs)"
    waits = waits[waits["iid"].isin(shown_iids)]
    heat = (waits.assign(wait_us=waits["wait_ns"] / 1e3, what=waits["iid"].map(label))
            .pivot(index="rank", columns="what", values="wait_us"))
    heat = heat[[label[i] for i in shown_iids]].reset_index()
    return [(JOB_FINDINGS, {"finding": np.array(found or ["no rank held the others up"],
                                                dtype=object)}),
            (JOB_STEPS, columns_of(table)),
            (JOB_WAITS + what, columns_of(heat.rename(columns=str)))]
