"""``traceaug serving``: a copy of IN with a serving trace's phase lane and its graph-replayed kernels'
ops lanes (``rewrite.serving``), and the steps and replays summarised."""

from __future__ import annotations

from . import rewriters
from .declare import fmt, rank, serving_options

COMMAND = rewriters.command(
    "serving", "Write OUT: IN with a \"Serving phases\" lane (a slice per serving step: phase, batch, tokens "
    "in args) and per GPU stream a lane of the graph-replayed kernels named after the ops that captured "
    "them (--capture).\n\nIN and OUT may be directories of per-rank traces (one output per rank, same "
    "names).",
    (*serving_options(), rank(), fmt("The summary: steps per phase, graph-replayed kernels attributed.")),
    lambda call: {}, load_kind="gpu")
