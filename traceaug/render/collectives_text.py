"""``traceaug collectives`` / ``stragglers`` as tables: matched collectives per instance or rank, stragglers'
findings with each rank's step and wait, and notes on what was not matched and how clocks were aligned."""

from __future__ import annotations

import orjson
import pandas as pd

from ..analysis import collectives as co
from ..analysis.job_verdict import Verdict
from ..analysis.tables import columns_of
from ..errors import TraceaugError
from ..output import render_columns
from .sections import shown


def collectives_frame(matched: co.Matched, by: str = "instance", rank: int | None = None) -> pd.DataFrame:
    """``by="instance"``: one row per matched instance (those ``rank`` takes part in);
    ``by="rank"``: one row per rank (``rank`` only)."""
    if by == "rank":
        out = co.by_rank(matched)
        return out[out["rank"] == rank].reset_index(drop=True) if rank is not None else out
    if by != "instance":
        raise TraceaugError(f"by must be 'instance' or 'rank', not {by!r}")
    out = co.instance_table(matched)
    if rank is not None:
        mine = matched.arrivals.loc[matched.arrivals["rank"] == rank, "iid"]
        out = out[matched.instances["iid"].isin(mine).to_numpy()].reset_index(drop=True)
    return out


def stragglers_frame(matched: co.Matched, rank: int | None = None) -> pd.DataFrame:
    """The per step and rank table (``rank``'s rows only, if given)."""
    table = co.step_table(matched)
    if rank is not None:
        table = table[table["rank"] == rank].reset_index(drop=True)
    return table


def notes(matched: co.Matched) -> list[str]:
    """Lines for stderr: what could not be matched, and the clock offsets applied."""
    out = [f"not matched: {p}" for p in matched.problems]
    clock = matched.clock
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


def render_table(df: pd.DataFrame, fmt: str, verdicts: list[Verdict] | None = None) -> str:
    """The table in ``fmt`` (csv and json in exact ns, the terminal in µs); the verdicts (``job_verdict``)
    first in a table (whole, wrapped), in json their figures and text as the object's ``verdict``."""
    if fmt == "json" and verdicts is not None:
        rows = orjson.loads(render_columns(columns_of(df), "json"))
        return orjson.dumps({"verdict": [v.row() for v in verdicts], "steps": rows},
                            option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"
    body = render_columns(shown(columns_of(df), fmt), fmt, digits=2)
    if fmt == "table" and verdicts is not None:
        return f"{verdict_text([v.text for v in verdicts])}\n\n{body}"
    return body


def verdict_text(texts: list[str], width: int = 100) -> str:
    """The verdicts' texts for the terminal: each whole, wrapped at ``width`` (never cut)."""
    import textwrap

    return "\n\n".join(textwrap.fill(t, width) for t in texts) or \
        "no step with matched collectives: no verdict"
