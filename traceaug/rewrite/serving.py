"""``traceaug serving``: a serving trace's phase lane (a slice per step, its phase, batch size and tokens in
args) in the process that annotated the steps, and per GPU stream a lane of the graph-replayed kernels named
after the ops that captured them (``analysis.graph_replay``), each with its kernel in args."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np
import orjson

from ..analysis.gpu_steps import gpu_ops
from ..analysis.graph_replay import UNKNOWN
from .events import slice_events
from .pipeline import Rewriter

if TYPE_CHECKING:
    from ..trace import Trace

CATEGORY = "traceaug_serving"  # never a Kineto category: a reload counts no lane as work
PHASE_LANE = "Serving phases"  # a string tid: the UI names the thread by it
OPS_LANE = "stream {} graph ops"


def rewrite(trace: Trace, options: dict) -> tuple[dict, list[bytes]]:
    """The phase lane and the graph-op lanes (``CATEGORY`` slices), and what they hold: steps per phase,
    graph-replayed kernels and how many were attributed."""
    g = gpu_ops(trace)
    st, r = g.serving, g.replays
    events: list[bytes] = []
    if len(st["step"]):  # clipped to the next step's start: slices of one lane never partly overlap
        end = np.minimum(st["ts"] + st["dur"], np.r_[st["ts"][1:], np.iinfo(np.int64).max])
        names = [f"{p} bs={b}" if b >= 0 else p for p, b in zip(st["phase"].tolist(), st["batch"].tolist())]
        args = [orjson.dumps({"step": i, "phase": p, "batch": b, "tokens": t, "context": c, "steady": s})
                for i, p, b, t, c, s in zip(*(st[k].tolist() for k in ("step", "phase", "batch", "tokens",
                                                                       "context", "steady")))]
        events += slice_events(st["pid"], PHASE_LANE, st["ts"], end - st["ts"], names, CATEGORY, args,
                               base_ns=trace.base_ns)
    if r is not None and r.replayed:
        o = r.ops
        args = [orjson.dumps({"kernel": k, "graph_launch_correlation": c, "attributed": op != UNKNOWN})
                for k, c, op in zip(o["name"].tolist(), o["correlation"].tolist(), o["op"].tolist())]
        events += slice_events(o["pid"], [OPS_LANE.format(s) for s in o["stream"].tolist()], o["ts"],
                               o["dur"], o["op"], CATEGORY, args, base_ns=trace.base_ns)
    return {"steps": len(st["step"]), "phases": dict(Counter(st["phase"].tolist())),
            "graph_replayed": 0 if r is None else int(r.replayed),
            "attributed": 0 if r is None else int(r.attributed),
            "replays": "" if r is None else r.line()}, events


REWRITER = Rewriter("serving", "gpu", rewrite)
