"""``traceaug patterns``: IN with its frequent GPU kernel sequences overlaid
(``rewrite.patterns``), and the patterns printed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from . import rewriters
from .declare import COUNT, POSITIVE, Call, fmt, option, rank

if TYPE_CHECKING:
    import pandas as pd

# An occurrence's engine-ns times (``analysis.patterns``), named with their unit in the API.
OCCURRENCE_TIMES = {c: f"{c}_ns" for c in ("gpu_ts", "gpu_end", "cpu_ts", "cpu_end")}


class KernelPatterns(NamedTuple):
    """What ``traceaug.patterns`` returns: every pattern, every counted occurrence, the files
    written."""

    patterns: pd.DataFrame
    occurrences: pd.DataFrame
    written: list[Path]


def _api(results: list[dict], call: Call) -> KernelPatterns:
    """Every pattern and occurrence with a leading ``rank`` column (``analysis.patterns``'
    columns, an occurrence's times named with their unit; ``pattern`` is n of ``P<n>``)."""
    import pandas as pd

    from ..analysis.tables import frame

    tables = []
    for key in ("patterns", "occurrences"):
        found = [frame(r[key]).infer_objects().rename(columns=OCCURRENCE_TIMES) for r in results]
        for r, part in zip(results, found, strict=True):
            part.insert(0, "rank", r["rank"])
        tables.append(pd.concat(found, ignore_index=True))
    return KernelPatterns(tables[0], tables[1], [Path(r["out"]) for r in results if r["out"]])


COMMAND = rewriters.command(
    "patterns", "Write OUT: IN with its frequent GPU kernel sequences overlaid (``Pattern P<n>`` "
    "slices on \"Kernel patterns\" threads, a \"Kernel-name dictionary\" thread).\n\nIN and "
    "OUT may be directories of per-rank traces (one output per rank, same names).",
    (option("--operator", help="Instances of this CPU op (a name or a glob); default: every "
            "top-level CPU op."),
     option("--min-len", type=POSITIVE, default=3, show_default=True,
            help="Shortest pattern, in GPU ops."),
     option("--top-k", type=COUNT, default=5, show_default=True,
            help="Patterns of each scope overlaid on OUT (and shown in the table)."),
     rank(), fmt("The patterns on stdout: the top k of each scope (table), or all (csv, json).")),
    lambda call: {"operator": call["operator"], "min_len": call["min_len"],
                  "top_k": call["top_k"]}, api=_api,
    load_kind="patterns")
