"""``diff --trace`` / ``--open``: the merged A/B trace ready to read in the Perfetto UI: A's and B's processes
labelled, the compared step of each at one origin and shown first, an arrow from each op of a top change in
A to the same op in B, and a pinned Δ counter per top change (its per-step time B − A, ``--format csv``'s)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..analysis import critical_path as cp
from ..analysis.diff import Side, Steps, clip
from ..analysis.explain import explain
from ..analysis.steps import category, shorten, step_of, step_table
from ..analysis.tables import Columns, codes, objects
from ..read import chunks, pass1, source
from ..read.marker import UI_ORDER, UI_PINS, UI_WINDOW
from ..read.rebase import Rebase, unsigned_tid, us_to_ns
from ..render.diff_text import top_changes
from . import critical_path as cp_lane
from . import merge
from .events import counter_events, flow_events, flow_ids, process_name_events

if TYPE_CHECKING:
    from ..trace import Trace

ARROW_CATEGORY = "traceaug_diff"
ARROW_NAME = "A → B"
BACK_NAME = "A ← B"  # an arrow from B's op, which starts first, to A's
DELTA_PID = 2 * merge.PID_OFFSET  # the Δ counters' process: past A's pids and below B's moved ones
DELTA_PROCESS = "Δ per step (B − A)"
DELTA_COUNTER = "Δ ns/step"  # a counter's track is "Δ ns/step <n> <device> <key>" (Perfetto adds the arg)
PATH_COUNTER = "Δ path ns/step"  # per category of the critical paths (``diff --explain``), then the category
PATH_LANES = f"^[AB]: {cp_lane.LANE_NAME}$"  # each side's critical path, pinned
NEXT_NS = 500  # an arrow's end this far before its op binds to it if no slice begins between (UI: doubles)
LANE = " [overlap lane "  # a lane thread's name holds this (``ui_import.moves``): its tid in the file


def write(sides: tuple[Side, Side], res: dict, view: dict, out: Path,
          paths: tuple[Trace, Trace] | None = None) -> None:
    """Write the merged trace of one rank's comparison ``res`` of A and B (``sides``): B's step
    ``view["steps"][1]`` (else its first) moved onto A's ``[0]``, shown first; ``view``: also ``top``, the
    largest regressions and improvements linked and counted, and ``by``, the diff's keys; ``paths``: A and B
    loaded for their critical paths (``kind="sync"``), each step's path a pinned lane."""
    a, b = sides
    steps = view["steps"]
    (step_a, at_a, dur_a), (step_b, at_b, dur_b) = _shown(a, steps[0]), _shown(b, steps[1])
    shift = at_b - at_a
    rows = np.r_[top_changes(res["ops"], view["top"])].astype(np.int64)
    ops = {c: v[rows] for c, v in res["ops"].items()}
    added = (process_name_events([DELTA_PID], DELTA_PROCESS, sort_index=-2)
             + _deltas(ops, at_a, at_a + max(dur_a, dur_b))
             + _arrows(a, b, ops, (step_a, step_b), view["by"], shift))
    if paths is not None:
        split = explain(*paths, step_a, step_b)["categories"]
        added += (_lanes(paths[0], step_a, "A", 0) + _lanes(paths[1], step_b, "B", shift)
                  + _explained(split, at_a, at_a + max(dur_a, dur_b)))
    options = {UI_ORDER: merge.ui_order(f"^{re.escape(DELTA_PROCESS)}"),
               UI_PINS: [f"^{DELTA_COUNTER} ", f"^{PATH_COUNTER} ", PATH_LANES],
               UI_WINDOW: [at_a, at_a + max(dur_a, dur_b, 1)]}
    merge.write_merged([(a, "A", 0), (b, "B", shift)], added, options, out)


def write_pair(a: Side, b: Side, steps: Steps, outs: tuple[Path, Path]) -> None:
    """``--side-by-side``: A and B each in a trace of its own (``outs``), labelled, B's step ``steps[1]``
    moved onto A's ``steps[0]`` as in ``write``, each shown first on the same window."""
    (_, at_a, dur_a), (_, at_b, dur_b) = _shown(a, steps[0]), _shown(b, steps[1])
    options = {UI_WINDOW: [at_a, at_a + max(dur_a, dur_b, 1)]}
    for side, label, shift, out in ((a, "A", 0, outs[0]), (b, "B", at_b - at_a, outs[1])):
        merge.write_merged([(side, label, shift)], [], options, out)


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


def _arrows(a: Side, b: Side, ops: Columns, steps: Steps, by: str, shift: int) -> list[bytes]:
    """An arrow from the i-th op of each top change (device and key) in A's step shown to the i-th in B's
    (in start order), each end bound where Perfetto has that op on top of its thread's stack."""
    found = [_instances(side, step, by) for side, step in ((a, steps[0]), (b, steps[1]))]
    keep = (ops["count_a"] > 0) & (ops["count_b"] > 0)
    pairs: list[tuple[int, int]] = []
    for device, key in zip(ops["device"][keep].tolist(), ops["key"][keep].tolist()):
        mine = [np.flatnonzero((f["device"] == device) & (f["key"] == key)) for f in found]
        pairs += zip(mine[0].tolist(), mine[1].tolist())
    if not pairs:
        return []
    ia, ib = (np.array(p, np.int64) for p in zip(*pairs))
    ea, eb = _ends(a, found[0], ia), _ends(b, found[1], ib)
    eb["pid"] = objects([merge.b_pid(p) for p in eb["pid"]])
    for col in ("at", "next"):
        eb[col] = np.where(eb[col] < 0, -1, eb[col] - shift)
    ids = flow_ids(a.trace, len(ia))
    out = []
    for name, src, dst in ((ARROW_NAME, ea, eb), (BACK_NAME, eb, ea)):
        # Perfetto binds an arrow's end only after its start: from the side whose op is on top first
        starts = src["at"] >= 0
        inside = starts & (dst["at"] >= src["at"])
        before = starts & ~inside & (dst["next"] >= src["at"])
        for m, end, enclosing in ((inside, dst["at"], True), (before, dst["next"], False)):
            if m.any():
                out += flow_events(src["pid"][m], src["tid"][m], src["at"][m], dst["pid"][m],
                                   dst["tid"][m], end[m], ids[m], ARROW_CATEGORY, name,
                                   enclosing=enclosing)
        for c in (ea, eb):  # each pair once
            c["at"] = np.where(inside | before, -1, c["at"])
            c["next"] = np.where(inside | before, -1, c["next"])
    return out


def _instants(side: Side) -> dict[tuple, np.ndarray]:
    """Per (pid, tid), the sorted engine ns of the file's thread-scoped instant events."""
    rebase = side.trace.plan.rebase
    found: dict[tuple, list] = {}
    fixed = Rebase(rebase.prefix, rebase.sep, rebase.numeric, fixed=True)
    for item in pass1.rebased_chunks(source.iter_blocks(side.trace.file), fixed):
        if isinstance(item, chunks.Layout):
            break
        for ev in item.events:
            if ev.__class__ is dict and ev.get("ph") in ("i", "I") and ev.get("s", "t") == "t" and isinstance(
                    ev.get("ts"), (int, float)):
                tid = ev.get("tid")
                found.setdefault((ev.get("pid"), unsigned_tid(tid) if tid.__class__ is int and tid < 0
                                  else tid), []).append(us_to_ns(ev["ts"]))
    return {k: np.sort(np.array(v, np.int64)) for k, v in found.items()}


def _instances(side: Side, step: int | None, by: str) -> Columns:
    """The CPU and GPU ops ``diff`` compares, one row each, of ProfilerStep ``step`` (None: every op), in
    start order: ``id, ts, dur, pid, tid`` (a lane thread's name), ``device``, ``key`` (as ``diff --by``)."""
    trace = side.trace
    trace.include("traceaug.gpu")
    table = step_table(trace, side.steps)
    c = trace.columns(
        f"WITH op AS (SELECT id, 'gpu' AS device, kind, {step_of('launch_ts', table)} AS step "
        "FROM traceaug_gpu_op_launch UNION ALL "
        f"SELECT s.id, 'cpu', 'cpu_op', {step_of('s.ts', table)} FROM slice s "
        "JOIN _traceaug_kind k USING (category) "
        "WHERE k.kind = 'cpu_op' AND s.name NOT GLOB 'ProfilerStep#*') "
        "SELECT o.id, o.device, o.kind, s.ts, s.dur, s.name, p.pid, t.tid, t.name AS thread FROM op o "
        "JOIN slice s USING (id) JOIN thread_track tt ON tt.id = s.track_id JOIN thread t USING (utid) "
        f"LEFT JOIN process p USING (upid) WHERE s.dur > 0{'' if step is None else f' AND o.step = {step}'} "
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
    lane = [isinstance(t, str) and LANE in t for t in c["thread"].tolist()]
    tid = objects([t if on else int(i) for t, i, on in zip(c["thread"].tolist(), c["tid"].tolist(), lane)])
    return {**c, "device": c["device"].astype(object), "key": key, "tid": tid}


def _ends(side: Side, ops: Columns, rows: np.ndarray) -> Columns:
    """Where arrows can end on ``ops``' ``rows``: ``pid``, ``tid``, ``at`` (absolute ns) before the first
    child or instant event inside the op (the load has no instants; a zero-length slice stays on top of its
    thread's stack until the next slice begins), and ``next``, NEXT_NS before the op where it is the next
    slice to begin on its thread (an arrow's end without ``bp`` binds to it); -1 where there is none."""
    ts = ops["ts"][rows].astype(np.int64)
    end = ts + ops["dur"][rows].astype(np.int64)
    ids = ops["id"][rows].astype(np.int64)
    c = side.trace.columns(
        "SELECT s.id, (SELECT MAX(x.ts) FROM slice x WHERE x.track_id = s.track_id AND x.ts < s.ts) AS prev, "
        "(SELECT COUNT(*) FROM slice x WHERE x.track_id = s.track_id AND x.ts = s.ts AND x.dur > s.dur) "
        f"AS outer FROM slice s WHERE s.id IN ({', '.join(map(str, sorted(set(ids.tolist()))))})")
    found = dict(zip(c["id"].tolist(), zip(c["prev"].tolist(), c["outer"].tolist())))
    prev = np.array([found[i][0] if found[i][0] is not None and found[i][0] == found[i][0] else -2**62
                     for i in ids.tolist()], np.int64)
    first = np.array([found[i][1] == 0 for i in ids.tolist()], bool) & (prev < ts - NEXT_NS)
    instants = _instants(side)
    for i, key in enumerate(zip(ops["pid"][rows].tolist(), ops["tid"][rows].tolist())):
        at = instants.get(key)
        if at is not None:
            after = at[np.searchsorted(at, ts[i] - NEXT_NS):]
            first[i] &= not (len(after) and after[0] < ts[i])
            after = after[np.searchsorted(after, ts[i]):]
            end[i] = min(end[i], after[0]) if len(after) else end[i]
    at = cp.slice_bind_points(side.trace, ids, ts, end, np.ones(len(rows), bool))
    base = side.trace.base_ns
    return {"pid": ops["pid"][rows].astype(object), "tid": ops["tid"][rows],
            "at": np.where(at <= ts, -1, at + base), "next": np.where(first, ts - NEXT_NS + base, -1)}
