"""``traceaug info``: what a trace holds, and what Perfetto says it lost."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..read import ui_import
from .steps import steps as step_numbers

if TYPE_CHECKING:
    from ..trace import Trace

KIND_COUNTS = {
    "cpu_ops": "cpu_op",
    "runtime_calls": "runtime",
    "kernels": "kernel",
    "memcpys": "memcpy",
    "memsets": "memset",
}


def warnings(trace: Trace) -> list[str]:
    """Every non-zero error / data-loss row of Perfetto's ``stats`` table."""
    c = trace.columns(
        "SELECT name, idx, severity, source, value FROM stats "
        "WHERE value > 0 AND severity IN ('error', 'data_loss') ORDER BY name, idx"
    )
    rows = zip(*(c[k].tolist() for k in ("name", "idx", "severity", "source", "value")))
    return [f"{severity}: {name}{'' if idx is None or idx != idx else f'[{int(idx)}]'}"
            f" = {int(value)} ({source})" for name, idx, severity, source, value in rows]


def step_warnings(trace: Trace) -> list[str]:
    """The GPU-side ProfilerStep annotations the step windows set aside (``gpu_steps``); the
    GPU ops are read only when the trace has such annotations."""
    from .gpu_steps import gpu_ops

    have = trace.columns("SELECT COUNT(*) AS n FROM slice WHERE category = 'gpu_user_annotation' "
                         "AND name GLOB 'ProfilerStep#*'")["n"][0]
    return gpu_ops(trace).warnings if have else []


def ui_warnings(trace: Trace) -> list[str]:
    """What the Perfetto UI loses opening the file as it is (``read.ui_import.as_is``; traceaug's loads keep
    those events); none known when pass 1 skimmed the events it drops (``kinds.LoadKind.skim``)."""
    if trace.plan is None or trace.plan.ui is None:
        return []
    lost = ui_import.as_is(trace.plan.ui, trace.plan.base_ns)
    out = []
    if lost["dropped"]:
        out.append(f"data_loss: slice_drop_overlapping_complete_event = {lost['dropped']} "
                   "(complete events partly overlapping on their thread)")
    if lost["negative_tid_slices"]:
        out.append(f"{lost['negative_tid_slices']} complete events on "
                   f"{lost['negative_tid_threads']} negative thread ids folded into their "
                   "process's main thread")
    return out


def ranges(numbers: list[int]) -> str:
    """Sorted distinct ``numbers`` as runs, ``5-12, 20`` (what ``--step`` takes, compactly); ``none``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def serving_fields(trace: Trace) -> dict:
    """A serving trace's steps (phase, batch size) and how many graph-replayed kernels were attributed to
    their ops (``analysis.serving``, ``analysis.graph_replay``); none of either: no fields."""
    from . import graph_replay, serving

    out: dict = {}
    if serving.found(trace):
        out["serving_steps"] = serving.lines(trace)
    replays = graph_replay.attribute(trace, serving.batch_at(serving.steps(trace)))
    if replays.replayed:
        out["graph_replays"] = replays.line()
    return out


def info(trace: Trace) -> dict:
    """Devices, rank, steps, span, event counts, streams, engine warnings and what the
    Perfetto UI loses opening the file as it is."""
    trace.include("traceaug.kineto")
    # GPU ops typed as every analysis types them (traceaug_gpu_op: MTIA's DMA ops are copies)
    kinds = trace.columns("SELECT kind, COUNT(*) AS n FROM traceaug_event "
                          "WHERE kind NOT IN ('kernel', 'memcpy', 'memset') GROUP BY kind "
                          "UNION ALL SELECT kind, COUNT(*) AS n FROM traceaug_gpu_op GROUP BY kind")
    by_kind = dict(zip(kinds["kind"].tolist(), kinds["n"].tolist()))
    streams = trace.columns(
        "SELECT device, stream, COUNT(*) AS ops FROM traceaug_gpu_op "
        "GROUP BY device, stream ORDER BY device, stream"
    )
    pairs = list(zip(streams["device"].tolist(), streams["stream"].tolist()))
    steps = trace.columns("SELECT COUNT(DISTINCT name) AS n FROM traceaug_step")["n"][0]
    numbers = sorted(set(step_numbers(trace)["step"].tolist()))
    span = trace.span()
    start, end = (None, None) if span is None else (int(trace.absolute(t)) for t in span)
    names = {p.get("id"): p.get("name") for p in trace.device_properties}
    devices = sorted({int(d) for d, _ in pairs if d is not None and d == d})
    return {
        "file": str(trace.path),
        "rank": trace.rank,
        "world_size": trace.world_size,
        "devices": [f"{d}: {names.get(d, 'unknown')}" for d in devices],
        "profiler_steps": int(steps),
        "steps": ranges(numbers),
        "start_ns": start,
        "end_ns": end,
        "duration_ns": None if start is None else end - start,
        **{key: int(by_kind.get(kind, 0)) for key, kind in KIND_COUNTS.items()},
        "streams": [f"{int(d)}:{s}" for d, s in pairs],
        **serving_fields(trace),
        "warnings": warnings(trace) + step_warnings(trace),
        "perfetto_ui": ui_warnings(trace),
    }
