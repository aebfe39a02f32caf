"""``diff --trace`` / ``--open``: the merged A/B trace ready to read in the Perfetto UI: A's and B's processes
labelled, the compared step of each at one origin and shown first, an arrow from each op of a top change in
A to the same op in B, and a pinned Δ counter per top change (its per-step time B − A, ``--format csv``'s)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..analysis import critical_path as cp
from ..analysis import serving
from ..analysis.diff import Side, Steps, clip
from ..analysis.explain import explain
from ..analysis.steps import category, shorten, step_of, step_table
from ..analysis.tables import Columns, codes, objects
from ..read.marker import UI_ORDER, UI_PINS, UI_WINDOW
from ..read.ui_import import ui_ns
from ..render.diff_text import top_changes
from . import critical_path as cp_lane
from . import merge
from .events import counter_events, flow_ids, process_name_events

if TYPE_CHECKING:
    from ..trace import Trace

BIND_ID_START = 1 << 48  # the arrows' v2 flow ids: past any id Perfetto gives a v1 flow (a counter from 0)
DELTA_PID = 2 * merge.PID_OFFSET  # the Δ counters' process: past A's pids and below B's moved ones
DELTA_PROCESS = "Δ per step (B − A)"
DELTA_COUNTER = "Δ ns/step"  # a counter's track is "Δ ns/step <n> <device> <key>" (Perfetto adds the arg)
PATH_COUNTER = "Δ path ns/step"  # per category of the critical paths (``diff --explain``), then the category
PATH_LANES = f"^[AB]: {cp_lane.LANE_NAME}$"  # each side's critical path, pinned


def write(sides: tuple[Side, Side], res: dict, view: dict, out: Path,
          paths: tuple[Trace, Trace] | None = None) -> None:
    """Write the merged trace of one rank's comparison ``res`` of A and B (``sides``): B's step
    ``view["steps"][1]`` (else its first) moved onto A's ``[0]``, shown first; ``view``: also ``top``, the
    largest regressions and improvements linked and counted, and ``by``, the diff's keys; ``paths``: A and B
    loaded for their critical paths (``kind="sync"``), each step's path a pinned lane."""
    a, b = sides
    steps = view["steps"]
    (step_a, at_a, dur_a), (step_b, at_b, dur_b) = _pair_shown(a, b, steps)
    shift = at_b - at_a
    rows = np.r_[top_changes(res["ops"], view["top"])].astype(np.int64)
    ops = {c: v[rows] for c, v in res["ops"].items()}
    added = (process_name_events([DELTA_PID], DELTA_PROCESS, sort_index=-2)
             + _deltas(ops, at_a, at_a + max(dur_a, dur_b)))
    if paths is not None:
        split = explain(*paths, step_a, step_b)["categories"]
        added += (_lanes(paths[0], step_a, "A", 0) + _lanes(paths[1], step_b, "B", shift)
                  + _explained(split, at_a, at_a + max(dur_a, dur_b)))
    options = {UI_ORDER: merge.ui_order(f"^{re.escape(DELTA_PROCESS)}"),
               UI_PINS: [f"^{DELTA_COUNTER} ", f"^{PATH_COUNTER} ", PATH_LANES],
               UI_WINDOW: [at_a, at_a + max(dur_a, dur_b, 1)]}
    merge.write_merged([(a, "A", 0), (b, "B", shift)], added, options, out,
                       _arrows(a, b, ops, (step_a, step_b), view["by"], shift))


def write_pair(a: Side, b: Side, steps: Steps, outs: tuple[Path, Path]) -> None:
    """``--side-by-side``: A and B each in a trace of its own (``outs``), labelled, B's step ``steps[1]``
    moved onto A's ``steps[0]`` as in ``write``, each shown first on the same window."""
    (_, at_a, dur_a), (_, at_b, dur_b) = _pair_shown(a, b, steps)
    options = {UI_WINDOW: [at_a, at_a + max(dur_a, dur_b, 1)]}
    for side, label, shift, out in ((a, "A", 0, outs[0]), (b, "B", at_b - at_a, outs[1])):
        merge.write_merged([(side, label, shift)], [], options, out)


def _pair_shown(a: Side, b: Side, steps: Steps) -> list[tuple[int | None, int, int]]:
    """``_shown`` of each side's step of ``steps``; of two serving traces (``analysis.serving``: their steps
    are numbered 0, 1, … in start order) phase-aware, so decode meets decode: A's (else its first steady
    one), and B's if of the same phase, else B's k-th step of that phase where A's is A's k-th (else B's last
    of it)."""
    sa, sb = serving.steps(a.trace), serving.steps(b.trace)
    if len(sa["step"]) and len(sb["step"]):
        i = steps[0] if steps[0] is not None else int(np.argmax(sa["steady"]))
        same = np.flatnonzero(sb["phase"] == sa["phase"][i])
        if len(same) and (steps[1] is None or sb["phase"][steps[1]] != sa["phase"][i]):
            steps = (i, int(same[min(int((sa["phase"][:i] == sa["phase"][i]).sum()), len(same) - 1)]))
    return [_shown(a, steps[0]), _shown(b, steps[1])]


def _shown(side: Side, step: int | None) -> tuple[int | None, int, int]:
    """(step number, absolute start ns, dur ns) of the step shown: ``step``, else the first; with no
    ProfilerStep, the trace's span."""
    st = side.steps
    base = side.trace.base_ns
    if not len(st["step"]):
        start, end = side.trace.span()
        return None, start + base, end - start
    i = int(np.argmax(st["step"] == step)) if step is not None else int(np.argmin(st["ts"]))
    return int(st["step"][i]), int(st["ts"][i]) + base, int(st["dur"][i])


def labels(ops: Columns) -> list[str]:
    """The Δ counter's arg per top change: its rank among them, device and (short) key."""
    return [f"{i:02d} {d} {clip(shorten(k) if isinstance(k, str) else str(k), 60)}"
            for i, (d, k) in enumerate(zip(ops["device"].tolist(), ops["key"].tolist()), 1)]


def _lanes(trace: Trace, step: int | None, label: str, shift: int) -> list[bytes]:
    """``label``'s critical path of ``step`` as ``critical-path`` draws it, in a process of its own (past
    the Δ process's pid), ``shift`` ns earlier."""
    seg = cp_lane.segments(cp.analyse(trace, step))
    return cp_lane.lane(seg, DELTA_PID + (label == "B") + 1, f"{label}: {cp_lane.LANE_NAME}",
                        trace.base_ns - shift)


def _deltas(ops: Columns, start: int, end: int) -> list[bytes]:
    """One counter track per top change in the Δ process, its per-step Δ (ns) over the step shown."""
    return _counters(labels(ops), ops["delta_ns"], DELTA_COUNTER, (start, end))


def _explained(categories: Columns, start: int, end: int) -> list[bytes]:
    """One counter track per category of time on either critical path (``diff --explain``'s split of the
    step shown), its Δ (ns) over the step."""
    on = (categories["a_ns"] > 0) | (categories["b_ns"] > 0)
    return _counters(categories["category"][on].tolist(), categories["delta_ns"][on], PATH_COUNTER,
                     (start, end))


def _counters(keys: list, values: np.ndarray, name: str, span: tuple[int, int]) -> list[bytes]:
    """A counter track ``<name> <key>`` per key in the Δ process, its value over ``span`` (absolute ns)."""
    n = len(keys)
    series = {"pid": np.full(2 * n, DELTA_PID), "key": objects(keys * 2),
              "ts": np.repeat(span, n), "value": np.tile(values.astype(np.float64), 2)}
    return counter_events(series, 0, name, lambda key: key, hta=False)


def _arrows(a: Side, b: Side, ops: Columns, steps: Steps, by: str, shift: int) -> tuple[dict, dict]:
    """An arrow from the i-th op of each top change (device and key) in A's step shown to the i-th in B's
    (in start order): per side, the v2 flow fields ``merge.write_merged`` puts on the op's own event
    (``bind_id``, ``flow_out`` on the one the UI reads first, ``flow_in`` on the other), which Perfetto binds
    to that very slice whatever else its thread has open (a v1 flow event binds to the deepest one)."""
    found = [_instances(side, step, by) for side, step in ((a, steps[0]), (b, steps[1]))]
    keep = (ops["count_a"] > 0) & (ops["count_b"] > 0)
    pairs: list[tuple[int, int]] = []
    for device, key in zip(ops["device"][keep].tolist(), ops["key"][keep].tolist()):
        mine = [np.flatnonzero((f["device"] == device) & (f["key"] == key)) for f in found]
        pairs += zip(mine[0].tolist(), mine[1].tolist())
    binds: tuple[dict, dict] = ({}, {})
    if not pairs:
        return binds
    rows = [np.array(p, np.int64) for p in zip(*pairs)]
    # the first one the UI reads starts the flow: in ts order (its doubles), at one ts the longest first
    ts_a, ts_b = (ui_ns(f["ts"][r] + base) for f, r, base in zip(found, rows, (a.trace.base_ns,
                                                                         b.trace.base_ns - shift)))
    a_first = (ts_a < ts_b) | (ts_a == ts_b) & (found[0]["dur"][rows[0]] >= found[1]["dur"][rows[1]])
    ids = flow_ids(a.trace, len(pairs), BIND_ID_START, b.trace).tolist()
    for f, r, out, bound in zip(found, rows, (a_first, ~a_first), binds):
        for i, row, first in zip(ids, r.tolist(), out.tolist()):
            key = (int(f["ts"][row]), int(f["dur"][row]), f["name"][row])
            bound.setdefault(key, []).append((f["pid"][row], f["tid"][row],
                                               {"bind_id": i, "flow_out" if first else "flow_in": True}))
    return binds


def _instances(side: Side, step: int | None, by: str) -> Columns:
    """The CPU and GPU ops ``diff`` compares, one row each, of ProfilerStep ``step`` (None: every op), in
    start order: ``id, ts, dur, pid, tid`` (the file's, not a lane's), ``device``, ``key`` (``--by``)."""
    trace = side.trace
    trace.include("traceaug.gpu")
    table = step_table(trace, side.steps)
    c = trace.columns(
        f"WITH op AS (SELECT id, 'gpu' AS device, kind, {step_of('launch_ts', table)} AS step "
        "FROM traceaug_gpu_op_launch UNION ALL "
        f"SELECT s.id, 'cpu', 'cpu_op', {step_of('s.ts', table)} FROM slice s "
        "JOIN _traceaug_kind k USING (category) "
        "WHERE k.kind = 'cpu_op' AND s.name NOT GLOB 'ProfilerStep#*') "
        "SELECT o.id, o.device, o.kind, s.ts, s.dur, s.name, tr.pid, tr.tid FROM op o "
        "JOIN slice s USING (id) JOIN _traceaug_track tr USING (track_id) "
        f"WHERE s.dur >= 0{'' if step is None else f' AND o.step = {step}'} "
        "ORDER BY s.ts, s.id")
    names = c["name"].tolist()
    if by == "category":
        code, distinct = codes(objects(names))
        key = category(c["kind"].astype(object), code, distinct)
    else:
        key = objects([shorten(n) if by == "short-name" and isinstance(n, str) else n for n in names])
    if by == "op":  # a GPU op's key: its launching op (``Side.launchers``; GPU rows last, in id order)
        gpu = c["device"] == "gpu"
        launcher = side.launchers()[-len(side.gpu["id"]):] if len(side.gpu["id"]) else objects([])
        at = np.searchsorted(side.gpu["id"].astype(np.int64), c["id"][gpu].astype(np.int64))
        key[gpu] = launcher[at]
    return {**c, "device": c["device"].astype(object), "key": key}
