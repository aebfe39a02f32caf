"""Memory over time from Kineto's ``[memory]`` events (``profile_memory=True``): allocated and reserved bytes
per device, each step's peak, and what holds memory at the peak (allocations not yet freed, replayed by
address, attributed to the CPU op and user annotation around the allocation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .tables import Columns, take

if TYPE_CHECKING:
    from ..trace import Trace

# c10::DeviceType numbers Kineto writes in "Device Type"
DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 8: "xpu", 9: "mps", 13: "meta", 20: "privateuse1"}
BEFORE = "(allocated before the trace)"  # a holder: what the first event says was already allocated
UNEXPLAINED = "(not explained by the events)"  # a holder: allocated, but no event's bytes add up to it
NO_OP = "(no CPU op)"
NONE_TEXT = "no [memory] events in the trace (profile_memory=True records them)"
STEP_COLUMNS = ("device", "step", "peak_allocated_bytes", "peak_reserved_bytes", "peak_at_ns",
                "events")
HOLDER_COLUMNS = ("device", "step", "annotation", "op", "allocations", "bytes", "of_peak_pct")

_EVENTS = """
SELECT s.id, s.ts, s.parent_id, tr.pid,
  extract_arg(s.arg_set_id, 'args.Bytes') AS bytes,
  extract_arg(s.arg_set_id, 'args.Total Allocated') AS allocated,
  extract_arg(s.arg_set_id, 'args.Total Reserved') AS reserved,
  extract_arg(s.arg_set_id, 'args.Device Type') AS device_type,
  extract_arg(s.arg_set_id, 'args.Device Id') AS device_id,
  extract_arg(s.arg_set_id, 'args.Addr') AS addr
FROM slice s JOIN _traceaug_track tr USING (track_id)
WHERE s.name = '[memory]' AND s.category = 'cpu_instant_event'
ORDER BY s.ts, s.id"""


def _ints(column: np.ndarray) -> np.ndarray:
    """int64 of an engine column (a missing value 0)."""
    if column.dtype.kind in "iu":
        return column.astype(np.int64)
    return np.array([0 if v is None or v != v else int(v) for v in column.tolist()], np.int64)


def events(trace: Trace) -> Columns:
    """Every ``[memory]`` event in time order: ``ts`` (engine ns), ``pid``, ``device`` ("cuda:0", "cpu"),
    ``bytes`` (negative on a free), ``allocated`` and ``reserved`` (the totals after it), ``addr``, ``parent``
    (the slice around it on its thread, -1: none)."""
    trace.include("traceaug.base")
    c = trace.columns(_EVENTS)
    kind = _ints(c["device_type"]).tolist()
    number = _ints(c["device_id"]).tolist()
    device = np.array([DEVICE_TYPES.get(k, f"device type {k}") if k == 0 or n < 0 else
                       f"{DEVICE_TYPES.get(k, f'device type {k}')}:{n}" for k, n in zip(kind, number)],
                      dtype=object)
    parent = c["parent_id"]
    return {"ts": _ints(c["ts"]), "pid": _ints(c["pid"]), "device": device,
            "bytes": _ints(c["bytes"]), "allocated": _ints(c["allocated"]),
            "reserved": _ints(c["reserved"]), "addr": _ints(c["addr"]),
            "parent": np.array([-1 if v is None or v != v else int(v) for v in parent.tolist()],
                               np.int64)}


def tracks(ev: Columns) -> Columns:
    """The counter series (``pid, device, key, ts, value``): per device, ``allocated`` and ``reserved``
    bytes after each event, the value after the last event at a timestamp."""
    out: dict[str, list] = {k: [] for k in ("pid", "device", "key", "ts", "value")}
    for device in dict.fromkeys(ev["device"].tolist()):
        rows = np.flatnonzero(ev["device"] == device)
        ts = ev["ts"][rows]
        last = rows[np.r_[ts[1:] != ts[:-1], True]]  # the value after every change at a timestamp
        for key in ("allocated", "reserved"):
            out["pid"].append(ev["pid"][last])
            out["device"].append(np.full(len(last), device, dtype=object))
            out["key"].append(np.full(len(last), f"{key} {device}", dtype=object))
            out["ts"].append(ev["ts"][last])
            out["value"].append(ev[key][last])
    if not out["ts"]:
        return {"pid": np.empty(0, np.int64), "device": np.empty(0, object),
                "key": np.empty(0, object), "ts": np.empty(0, np.int64), "value": np.empty(0, np.int64)}
    return {k: np.concatenate(v) for k, v in out.items()}


def _steps(trace: Trace, step: int | None) -> list[tuple[int, int, int]]:
    """(step number, start, end) of every ProfilerStep#N (``step``: that one alone)."""
    steps = trace.columns("SELECT ts, dur, name FROM traceaug_step ORDER BY ts")
    found = [(int(n), int(t), int(t) + max(int(d), 0))
             for t, d, n in zip(steps["ts"].tolist(), steps["dur"].tolist(),
                                (str(n).removeprefix("ProfilerStep#") for n in steps["name"].tolist()))
             if n.isdigit()]
    return [w for w in found if w[0] == step] if step is not None else found


def _owners(trace: Trace, parent: np.ndarray) -> tuple[list[str], list[str]]:
    """Per event, the innermost user annotation (not a ProfilerStep) and the outermost CPU op around it
    ("" / ``NO_OP`` where none; both empty when the load kept no CPU events)."""
    s = trace.columns("SELECT id, parent_id, name, category FROM slice WHERE category IN "
                      "('cpu_op', 'Operator', 'user_annotation')")
    up = dict(zip(s["id"].tolist(), (-1 if p is None or p != p else int(p)
                                     for p in s["parent_id"].tolist())))
    info = dict(zip(s["id"].tolist(), zip(s["name"].tolist(), s["category"].tolist())))
    memo: dict[int, tuple[str, str]] = {}

    def owner(i: int) -> tuple[str, str]:
        if i not in memo:
            chain, j = [], i
            while j in info:
                chain.append(info[j])
                j = up.get(j, -1)
            notes = [n for n, c in chain if c == "user_annotation" and not n.startswith("ProfilerStep#")]
            ops = [n for n, c in chain if c != "user_annotation"]
            memo[i] = (notes[0] if notes else "", ops[-1] if ops else NO_OP)
        return memo[i]

    found = [owner(p) for p in parent.tolist()]
    return [a for a, _ in found], [o for _, o in found]


def _holders(ev: Columns, rows: np.ndarray, peak: int, annotation: list, op: list) -> dict:
    """What holds the memory just after event ``peak`` of one device's events ``rows`` (in order): each
    allocation not yet freed by its address, by (annotation, op); what the first event says was allocated
    before it, less what is freed of it, is ``BEFORE``."""
    first = rows[0]
    before = int(ev["allocated"][first] - ev["bytes"][first])
    alive: dict[int, tuple[int, tuple[str, str]]] = {}
    for i in rows[: int(np.searchsorted(rows, peak)) + 1].tolist():
        b, addr = int(ev["bytes"][i]), int(ev["addr"][i])
        if b >= 0:
            alive[addr] = (alive.get(addr, (0, None))[0] + b, (annotation[i], op[i]))
        elif addr in alive:
            left = alive[addr][0] + b
            if left > 0:
                alive[addr] = (left, alive[addr][1])
            else:
                del alive[addr]
                before += left  # freed more than this address was given in the trace
        else:
            before += b  # a free of an allocation made before the trace
    held: dict[tuple[str, str], list[int]] = {}
    for b, who in alive.values():
        entry = held.setdefault(who, [0, 0])
        entry[0], entry[1] = entry[0] + 1, entry[1] + b
    if before:
        held[("", BEFORE)] = [0, before]
    rest = int(ev["allocated"][peak]) - sum(b for _, b in held.values())
    if rest:
        held[("", UNEXPLAINED)] = [0, rest]
    return held


def compute(trace: Trace, holders: bool = True, step: int | None = None, whole: bool = False) -> dict:
    """``steps``: per device and step, the peak allocated and reserved bytes, when allocated peaked (ns
    after the step's start; step None, the whole trace: after the first event), the events in the step;
    ``holders``: what held the memory at each peak; ``tracks``. Empty tables and a ``note`` for a trace
    without ``[memory]`` events. ``step``: that ProfilerStep alone; ``whole``: one window per device."""
    ev = events(trace)
    out: dict = {"tracks": tracks(ev), "note": "" if len(ev["ts"]) else NONE_TEXT}
    annotation, op = _owners(trace, ev["parent"]) if holders and len(ev["ts"]) else ([], [])
    steps: dict[str, list] = {c: [] for c in STEP_COLUMNS}
    held: dict[str, list] = {c: [] for c in HOLDER_COLUMNS}
    windows = _steps(trace, step) if step is not None or not whole else []
    for device in dict.fromkeys(ev["device"].tolist()):
        rows = np.flatnonzero(ev["device"] == device)
        ts = ev["ts"][rows]  # no steps (or ``whole``): one window over the device's events
        for name, start, end in windows if windows or step is not None else [(None, ts[0], ts[-1])]:
            # the window's events, and the one before it: what the step starts with
            lo, hi = int(np.searchsorted(ts, start, "left")), int(np.searchsorted(ts, end, "right"))
            inside = rows[max(lo - 1, 0):hi]
            if hi <= lo and lo == 0:
                continue
            peak = int(inside[np.argmax(ev["allocated"][inside])])
            for c, v in zip(STEP_COLUMNS, (device, name, int(ev["allocated"][peak]),
                                           int(ev["reserved"][inside].max()),
                                           max(int(ev["ts"][peak]) - start, 0), hi - lo)):
                steps[c].append(v)
            if holders:
                found = _holders(ev, rows, peak, annotation, op)
                total = max(int(ev["allocated"][peak]), 1)
                for (note, who), (n, b) in sorted(found.items(), key=lambda kv: -kv[1][1]):
                    for c, v in zip(HOLDER_COLUMNS, (device, name, note, who, n, b, 100 * b / total)):
                        held[c].append(v)
    out["steps"] = _columns(steps, STEP_COLUMNS)
    out["holders"] = _columns(held, HOLDER_COLUMNS)
    return out


def _columns(table: dict[str, list], names: tuple[str, ...]) -> Columns:
    return {c: np.array(table[c], dtype=object if c in ("device", "step", "annotation", "op")
                        else np.float64 if c.endswith("_pct") else np.int64) for c in names}


def top_holders(result: dict, top: int) -> Columns:
    """The ``top`` largest holders of each (device, step) peak."""
    h = result["holders"]
    key = [f"{d}\0{s}" for d, s in zip(h["device"].tolist(), h["step"].tolist())]
    rank = np.zeros(len(key), np.int64)
    seen: dict[str, int] = {}
    for i, k in enumerate(key):
        rank[i] = seen[k] = seen.get(k, -1) + 1
    return take(h, rank < top)


def recorded(trace: Trace) -> bool:
    """Whether the trace's file has ``[memory]`` events: pass 1 counts them whatever the load keeps, so a
    command reads them again only where there are some (a trace pass 1 did not plan: assumed so)."""
    plan = getattr(trace, "plan", None)
    return plan is None or plan.memory_events > 0


NO_EVENTS = {"steps": _columns({c: [] for c in STEP_COLUMNS}, STEP_COLUMNS),
             "holders": _columns({c: [] for c in HOLDER_COLUMNS}, HOLDER_COLUMNS), "note": NONE_TEXT}


def rank_part(trace: Trace, step: int | None = None, whole: bool = False, top: int = 10) -> dict:
    """A rank's memory tables for ``report`` and ``diff`` (no tracks): ``compute`` with the ``top``
    holders of each peak."""
    found = compute(trace, True, step, whole)
    return {"steps": found["steps"], "holders": top_holders(found, top), "note": found["note"]}


def every_step(trace: Trace) -> dict:
    """``compute``'s steps and holders of every step (no tracks), for ``pick`` to choose from."""
    found = compute(trace, True)
    return {"steps": found["steps"], "holders": found["holders"], "note": found["note"]}


def pick(found: dict, step: int | None = None, top: int = 10) -> dict:
    """``rank_part`` (``whole`` False) from ``every_step``'s tables: ``step``'s rows alone (None: all) and
    the ``top`` holders of each peak; a step's window is computed alone, so this is ``rank_part``'s."""
    if step is None:
        chosen = found
    else:
        chosen = {k: take(found[k], np.array([s == step for s in found[k]["step"].tolist()], dtype=bool))
                  for k in ("steps", "holders")}
    return {"steps": chosen["steps"], "holders": top_holders(chosen, top), "note": found["note"]}


def compare(a: dict, b: dict) -> tuple[Columns, Columns]:
    """Two sides' ``rank_part`` (one window each): per device the peaks of A and B, and per holder its
    bytes at A's peak and at B's, largest change first."""
    peaks: dict[str, list] = {c: [] for c in ("device", "allocated_a_bytes", "allocated_b_bytes",
                                              "delta_bytes", "reserved_a_bytes", "reserved_b_bytes")}
    side = [{d: (x, r) for d, x, r in zip(t["steps"]["device"].tolist(),
                                          t["steps"]["peak_allocated_bytes"].tolist(),
                                          t["steps"]["peak_reserved_bytes"].tolist())} for t in (a, b)]
    for d in dict.fromkeys([*side[0], *side[1]]):
        (xa, ra), (xb, rb) = side[0].get(d, (0, 0)), side[1].get(d, (0, 0))
        for c, v in zip(peaks, (d, xa, xb, xb - xa, ra, rb)):
            peaks[c].append(v)
    held: dict[tuple, list[int]] = {}
    for i, t in enumerate((a, b)):
        h = t["holders"]
        for key in zip(h["device"].tolist(), h["annotation"].tolist(), h["op"].tolist(),
                       h["bytes"].tolist()):
            held.setdefault(key[:3], [0, 0])[i] += key[3]
    rows = sorted(held.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))
    holders = {"device": [k[0] for k, _ in rows], "annotation": [k[1] for k, _ in rows],
               "op": [k[2] for k, _ in rows], "a_bytes": [v[0] for _, v in rows],
               "b_bytes": [v[1] for _, v in rows], "delta_bytes": [v[1] - v[0] for _, v in rows]}
    return ({c: np.array(v, dtype=object if c == "device" else np.int64) for c, v in peaks.items()},
            {c: np.array(v, dtype=object if c in ("device", "annotation", "op") else np.int64)
             for c, v in holders.items()})
