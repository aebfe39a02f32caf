"""``traceaug collectives``: every rank's collectives matched across the job
(``analysis.collectives``), filtered by step and rank; what ``stragglers`` builds on."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

import traceaug.paths as paths

from ..errors import TraceaugError
from ..job import parts
from ..job.run import Work
from .declare import JOB, Call, Command, argument, echo, fmt, option, rank, step

if TYPE_CHECKING:
    import pandas as pd

    from ..analysis import collectives as co


def rank_tables(trace):
    """A rank's collective tables (``analysis.collective_rank.tables``)."""
    from ..analysis.collective_rank import tables

    return tables(trace)


TABLES = Work("collectives", parts.apply, {"fn": rank_tables})


def matched(call: Call, align: bool = True, done: dict | None = None,
            whole: co.Matched | None = None) -> co.Matched:
    """The matched collectives of the job (every rank read: matching needs them all; ``done``: their
    tables by rank, if read already; ``whole``: them matched, if done already), only ``--step``'s
    instances when given; ``--rank`` must be one of its ranks."""
    from ..analysis import collectives as co

    where = call["trace"]
    found = whole or co.match_job(co.ranked(call.run(TABLES, "collectives") if done is None else done),
                                  align)
    rank = call.get("rank")
    if rank is not None and rank not in found.tables:
        raise TraceaugError(f"{where}: no trace for rank {rank} "
                            f"(it has {', '.join(map(str, sorted(found.tables)))})")
    if not sum(len(t.colls) for t in found.tables.values()):
        raise TraceaugError(f"{where}: no NCCL / RCCL collective kernels to analyse")
    return by_step(found, call.get("step"), where)


def by_step(found: co.Matched, step: int | None, where) -> co.Matched:
    """Only ``step``'s instances (None: all), the step checked against the ranks' steps."""
    if step is None:
        return found
    import numpy as np

    from ..analysis import collectives as co
    from ..analysis.steps import check_step

    numbers = np.unique(np.concatenate([t.steps["step"].to_numpy(np.int64)
                                        for t in found.tables.values()]))
    check_step(where, numbers, step)
    keep = found.instances[found.instances["step"].eq(step).fillna(False).astype(bool)]
    return co.Matched(found.tables, keep, found.arrivals[found.arrivals["iid"].isin(keep["iid"])],
                      found.clock, found.problems)


def out(text: str, lines: list[str]) -> None:
    """The job's notes (and findings) on stderr, then ``text``: said together once every
    figure is computed, so a run stopped before says nothing but that it was."""
    for line in lines:
        echo(f"traceaug: {line}\n", err=True)
    echo(text)


def _collectives(m: co.Matched, call: Call) -> None:
    from ..render.collectives_text import collectives_frame, notes, render_table

    out(render_table(collectives_frame(m, call["by"], call["rank"]), call["fmt"]), notes(m))


def with_attrs(out: pd.DataFrame, m: co.Matched) -> pd.DataFrame:
    out.attrs.update(problems=list(m.problems), clock=m.clock.to_dict("list"))
    return out


def _api_collectives(m: co.Matched, call: Call) -> pd.DataFrame:
    """``by="instance"``: one row per matched instance (those ``rank`` takes part in): ``step``,
    ``group``, ``position``, ``seq``, ``kind``, ``bytes``, ``ranks``, ``skew_ns``, ``straggler``
    (the last arrival), ``mean_wait_ns`` (of the other ranks), ``max_wait_ns``, ``transfer_ns``
    (median over ranks), ``algbw_gbps``, ``busbw_gbps``, ``cause`` ("cpu" / "gpu"),
    ``cause_late_ns``, ``cause_ops``. ``by="rank"``: ``rank``, ``collectives``,
    ``total_wait_ns``, ``straggler_count``, ``caused_wait_ns``. ``attrs``: ``problems`` (what was
    not matched) and ``clock`` (per rank ``offset_ns``, ``residual_ns``)."""
    from ..render.collectives_text import collectives_frame

    return with_attrs(collectives_frame(m, call["by"], call["rank"]), m)


def _params(extra: tuple = ()) -> tuple:
    return (option("--no-align", "align", is_flag=True, flag_value=False, default=True,
                   help="Keep each rank's recorded clock (default: align the ranks' clocks on "
                        "the ends of matched collectives)."),
            argument("trace", type=paths.Input()), JOB, rank(), step(), fmt(), *extra)


def declared(name: str, help: str, show, api, extra: tuple = (), compute=None) -> Command:
    return Command(name, help, _params(extra), compute or (lambda call: matched(call, call["align"])),
                   show, api, inputs=("trace",), rank_selects=False)


COMMAND = declared(
    "collectives", "Collectives matched across the ranks of a job: per instance its skew, "
    "straggler, waits, transfer time and bandwidth (--by rank: each rank's wait and the wait "
    "it caused).", _collectives, _api_collectives,
    (option("--by", type=click.Choice(["instance", "rank"]), default="instance", show_default=True,
            help="One row per matched collective, or per rank."),))
