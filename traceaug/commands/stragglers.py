"""``traceaug stragglers``: who the ranks of a job waited for, why, and what it cost each step
(``analysis.collectives``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .collectives import declared, out, with_attrs
from .declare import Call

if TYPE_CHECKING:
    import pandas as pd

    from ..analysis import collectives as co


def _show(m: co.Matched, call: Call) -> None:
    from ..report.collectives_text import notes, render_table, stragglers_frame

    found, table = stragglers_frame(m, call["rank"])
    csv = call["fmt"] == "csv"
    out(render_table(table, call["fmt"], None if csv else found), notes(m) + (found if csv else []))


def _api(m: co.Matched, call: Call) -> pd.DataFrame:
    """Per step and rank ``step_us``, ``collectives``, ``wait_us`` (in collectives),
    ``straggler_count``, ``caused_wait_us`` (the others' mean wait for it, summed);
    ``attrs["findings"]``: the ranked findings in plain words, and as ``collectives``."""
    from ..report.collectives_text import stragglers_frame

    found, out = stragglers_frame(m, call["rank"])
    out.attrs["findings"] = found
    return with_attrs(out, m)


COMMAND = declared(
    "stragglers", "Who the ranks of a job waited for: findings in plain words (the rank the "
    "others waited for most in each step, the time lost and why), then per step each rank's "
    "step time and time waiting in collectives.", _show, _api)
