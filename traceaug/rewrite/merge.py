"""``traceaug diff --trace``: A and B side by side in one Perfetto file.

A's bytes are kept as they are; B's events are spliced in with their
processes relabelled (``B: <name>``, pids moved out of A's range), their flow
ids moved out of A's, and their timestamps shifted exactly so that B's first
ProfilerStep starts where A's does (the trace starts when there are none).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from .. import guard
from ..analysis.diff import Side
from ..errors import TraceaugError
from ..read import chunks, pass1, source
from ..read.rebase import Rebase, us_to_ns
from . import splice
from .events import us

PID_OFFSET = 1_000_000_000
FLOW_ID_OFFSET = 1 << 40


def _anchor(side: Side) -> int:
    """Absolute ns where a side is aligned: its first ProfilerStep, else its first event."""
    if len(side.steps["ts"]):
        return int(side.steps["ts"][0]) + side.trace.base_ns
    return side.trace.span()[0] + side.trace.base_ns  # diff saw GPU ops: there is a span


def _pid(pid) -> int | str:
    """B's pid in the merged file: numbers moved past A's, anything else (a string, even a
    list such as ``[0]``) a string, so that it can be a key."""
    if isinstance(pid, int):
        return pid + PID_OFFSET
    return f"B: {pid}"


def _flow_id(value):
    if isinstance(value, int):
        return value + FLOW_ID_OFFSET
    if isinstance(value, str):
        try:  # Perfetto reads string flow ids as hex
            return int(value, 16) + FLOW_ID_OFFSET
        except ValueError:
            return f"B:{value}"
    return value


def b_events(side: Side, shift_ns: int) -> list[bytes]:
    """B's events, relabelled and shifted by ``shift_ns`` (exact)."""
    chosen = side.trace.plan.rebase  # B's load chose it (no base when a ts lies below one)
    rebase = Rebase(chosen.prefix, chosen.sep, chosen.numeric, fixed=True)
    named: set = set()
    pids: dict = {}  # merged pid -> B's own, in order of appearance (a set's order varies)
    out: list[bytes] = []
    for item in pass1.rebased_chunks(source.iter_blocks(side.trace.file), rebase):
        if isinstance(item, chunks.Layout):
            break
        for ev in item.events:
            if not isinstance(ev, dict):
                continue
            ts = ev.get("ts")
            if isinstance(ts, (int, float)):
                ev["ts"] = orjson.Fragment(us(us_to_ns(ts) + rebase.base_ns - shift_ns))
            if "pid" in ev:
                pids.setdefault(_pid(ev["pid"]), ev["pid"])
                ev["pid"] = _pid(ev["pid"])
            if ev.get("ph") in pass1.FLOW_PHASES and "id" in ev:
                ev["id"] = _flow_id(ev["id"])
            if ev.get("ph") == "M" and ev.get("name") == "process_name":
                args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
                ev["args"] = {**args, "name": f"B: {args.get('name', '')}".rstrip()}
                named.add(ev["pid"])
            out.append(orjson.dumps(ev))
    for new, pid in pids.items():
        if new not in named:
            out.append(orjson.dumps({"ph": "M", "name": "process_name", "pid": new,
                                     "args": {"name": f"B: {pid}"}}))
    return out


def write_merged(a: Side, b: Side, out: Path) -> None:
    """Write A with B's events added, B aligned to A."""
    if a.trace.plan is None or b.trace.plan is None:
        raise TraceaugError(f"{out}: --trace needs Chrome JSON traces on both sides")
    guard.check([a.trace.path, b.trace.path], [out])
    shift = _anchor(b) - _anchor(a)
    splice.write(a.trace.file, out, a.trace.plan.layout, b_events(b, shift), "diff")
