"""``traceaug efficiency``: per op FLOPs and bytes from the recorded shapes, the GPU time of what it launched,
achieved TFLOP/s and TB/s, bound and % of roofline against the device's peaks, MFU per step; OUT (optional):
IN with an efficiency lane per stream and achieved-throughput counter tracks (``rewrite.efficiency``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import click

from . import rewriters
from .declare import COUNT, Call, fmt, option, rank, serving_options

if TYPE_CHECKING:
    import pandas as pd


class Efficiency(NamedTuple):
    """What ``traceaug.efficiency`` returns: per (op, shapes, dtypes) ``groups``, per op ``families``,
    per step ``steps`` (MFU), every rank's; ``notes`` (devices found by properties, devices with no
    peaks); the files written; with ``replay=True`` the ``opportunities`` (else None)."""

    groups: pd.DataFrame
    families: pd.DataFrame
    steps: pd.DataFrame
    notes: list[str]
    written: list[Path]
    opportunities: pd.DataFrame | None = None


def _api(results: list[dict], call: Call) -> Efficiency:
    """The tables of every rank with a leading ``rank`` column (``render.efficiency_text.tables``)."""
    import pandas as pd

    from ..render.efficiency_text import tables

    found = tables(results)
    frames = [pd.DataFrame(found[k]) for k in ("groups", "families", "steps")]
    notes = [n for r in results for n in r["notes"]]
    more = pd.DataFrame(found["opportunities"]) if "opportunities" in found else None
    return Efficiency(*frames, notes, [Path(r["out"]) for r in results if r["out"]], more)


def _options(call: Call) -> dict:
    return {"peaks": call["peaks_file"], "top": call["top"], "replay": call["replay"]}


_rewrite = rewriters.compute("efficiency", _options)


def compute(call: Call) -> list[dict]:
    """With OUT, the rewriter; without, the tables alone from a skimmed load (every rank's); ``--replay``
    loads the critical path's events too."""
    dst = call.get("dst")
    if dst is not None and not call.get("replay"):
        return _rewrite(call)
    from ..rewrite import efficiency, pipeline

    rewriter = efficiency.REPLAYED if call.get("replay") else efficiency.TABLES
    return pipeline.results(rewriter, pipeline.targets(call["src"], dst, call.files("src")),
                            _options(call), call.job, call.get("keep_bytes", False))


def prepare(call: Call) -> None:
    """OUT is optional (no OUT: the tables only)."""
    if call["dst"] is None:
        if call["open_ui"]:
            raise click.UsageError("--open needs OUT")
        return
    rewriters.prepare(call)


COMMAND = rewriters.command(
    "efficiency", "FLOPs, bytes, achieved TFLOP/s and TB/s, bound and % of roofline per op (from the "
    "recorded shapes), MFU per step; with OUT, a copy of IN with an efficiency lane per stream and "
    "achieved TFLOP/s and TB/s counter tracks.\n\nIN and OUT may be directories of per-rank traces.",
    (option("--peaks", "peaks_file", type=click.Path(exists=True, dir_okay=False),
            help="JSON peak table (data/peaks.json's form) whose devices override or add to the "
                 "shipped ones (e.g. measured, achievable peaks)."),
     option("--top", type=COUNT, default=15, show_default=True, help="Op groups shown in the table."),
     option("--replay", is_flag=True,
            help="Also rank the op groups by the step time they would save at their roofline, "
                 "replayed along the critical path (whatif's replay; the top 10 at most)."),
     rank(), fmt("Format of the tables printed on stdout."), *serving_options(),
     option("--keep-bytes", is_flag=True,
            help="Keep every original byte. By default events the Perfetto UI would drop "
                 "(partly overlapping, on negative thread ids) are moved so that it shows them.")),
    _options, api=_api, load_kind="efficiency", prepare=prepare, compute=compute,
    kind=lambda p: "sync_shapes" if p.get("replay") else
    "efficiency" if p.get("dst") is not None else "efficiency_tables")
