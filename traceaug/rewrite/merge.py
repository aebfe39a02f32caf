"""``traceaug diff --trace``: A's and B's events relabelled (``A: <name>``, ``B: <name>``; B's pids and flow
ids moved past A's, sorted after A, shifted as ``diff_view`` aligns), as the Perfetto UI shows them whole."""

from __future__ import annotations

from pathlib import Path

import orjson

import traceaug.guard as guard

from ..analysis.diff import Side
from ..atomic import scratch
from ..errors import TraceaugError
from ..read import chunks, pass1, source, ui_import
from ..read.rebase import Rebase, unsigned_tid, us_to_ns
from . import splice
from .events import us

PID_OFFSET = 1_000_000_000
FLOW_ID_OFFSET = 1 << 40
SORT_B = 1 << 30  # B's process_sort_index values start here
GLOBAL_TRACK = "^Unnamed SliceTrack$"  # the UI's name for the track of global instant events


def b_pid(pid) -> int | str:
    """B's pid in the merged file: numbers moved past A's, anything else (a string, even a
    list such as ``[0]``) a string, so that it can be a key (``a_pid``)."""
    return pid + PID_OFFSET if isinstance(pid, int) else a_pid(pid, "B")


def a_pid(pid, label: str = "A") -> int | str:
    """A's pid in the merged file: a number as it is, anything else a labelled string (the UI names a
    process of a string pid by the string)."""
    if isinstance(pid, int):
        return pid
    return f"{label}: {pid if isinstance(pid, str) else orjson.dumps(pid).decode()}"


def _flow_id(value):
    if isinstance(value, int):
        return value + FLOW_ID_OFFSET
    if isinstance(value, str):
        try:  # Perfetto reads string flow ids as hex
            return int(value, 16) + FLOW_ID_OFFSET
        except ValueError:
            return f"B:{value}"
    return value


def _sort_index(side_index, pid, order: int, base: int = SORT_B) -> int:
    """A side's ``process_sort_index``: B's (``base`` ``SORT_B``) after every A process (Kineto's run
    below ``SORT_B``: pids, GPUs at 2^24 + device), each in its own order."""
    own = side_index if isinstance(side_index, int) and 0 <= side_index < SORT_B else (
        pid if isinstance(pid, int) and 0 <= pid < SORT_B else order)
    return base + min(own, SORT_B - 1)


def _move(ev: dict, move: tuple, is_slice: bool) -> None:
    """Put an event on its overlap lane thread, as ``visible.move_event`` does in text."""
    lane, tid, thread = move
    ev["tid"] = thread
    if is_slice:
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        ev["args"] = {"traceaug_lane": lane, "traceaug_tid": tid, **args}


class Relabel:
    """One file's events relabelled in place: ts ``shift_ns`` earlier (from ``rebase``'s text), tids unsigned,
    pids ``pid_of(pid)``, flow ids ``flow_id_of(id)``, processes ``<label>: <name>``."""

    def __init__(self, rebase: Rebase, shift_ns: int, pid_of, flow_id_of, label: str) -> None:
        self.base_ns, self.shift_ns = rebase.base_ns, shift_ns
        self.pid_of, self.flow_id_of, self.label = pid_of, flow_id_of, label
        self.named: set = set()  # new pids given a name
        self.pids: dict = {}  # in order of appearance (a set's order of strings varies by run)

    def event(self, ev: dict) -> bytes | None:
        """Relabel ``ev`` (``seen`` its pid); the text of its new ts (None: not a number, kept)."""
        ts = ev.get("ts")
        text = None
        if isinstance(ts, (int, float)):
            text = us(self.ns(ts)).encode()
            ev["ts"] = orjson.Fragment(text)
        tid = ev.get("tid")
        if tid.__class__ is int and tid < 0:
            ev["tid"] = unsigned_tid(tid)
        pid = ev.get("pid")
        if "pid" in ev:
            ev["pid"] = self.seen(pid)
        if ev.get("ph") in pass1.FLOW_PHASES and "id" in ev:
            ev["id"] = self.flow_id_of(ev["id"])
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            ev["args"] = {**args, "name": self.name(args.get("name", ""), pid)}
            self.named.add(ev["pid"])
        return text

    def ns(self, ts: int | float) -> int:
        """A ts of the file (µs, as read with the rebase) in ns on the output's clock."""
        return us_to_ns(ts) + self.base_ns - self.shift_ns

    def seen(self, pid):
        """The new pid of ``pid``, noted for ``unnamed``."""
        self.pids.setdefault(_hashable(pid), pid)
        return self.pid_of(pid)

    def name(self, name, pid) -> str:
        """The name of process ``pid`` (as in the file), which the file names ``name``."""
        return f"{self.label}: {name}".rstrip()

    def metadata(self, sort_index=None) -> list[bytes]:
        """Per process: a ``process_name`` event if the file gave it none, and with ``sort_index``
        a ``process_sort_index`` event of ``sort_index(key, pid, order)``."""
        out = []
        for order, (key, pid) in enumerate(self.pids.items()):
            if self.pid_of(pid) not in self.named:
                out.append(orjson.dumps({"ph": "M", "name": "process_name", "pid": self.pid_of(pid),
                                         "args": {"name": f"{self.label}: {pid}"}}))
            if sort_index is not None:
                out.append(orjson.dumps({"ph": "M", "name": "process_sort_index", "pid": self.pid_of(pid),
                                         "args": {"sort_index": sort_index(key, pid, order)}}))
        return out


def relabelled(file: Path, chosen: Rebase, shift_ns: int, pid_of, flow_id_of, label: str,
               plan=None, sort_base: int = SORT_B, binds: dict | None = None) -> list[bytes]:
    """``file``'s events ``Relabel``-ed; with ``plan``, UI-visible, processes sorted from ``sort_base``;
    ``binds``: fields to add to complete events (``bind``)."""
    rebase = Rebase(chosen.prefix, chosen.sep, chosen.numeric, fixed=True)
    moves = (ui_import.moves(plan.ui, plan.base_ns - shift_ns, plan.thread_names)
             if plan is not None else None)
    relabel = Relabel(rebase, shift_ns, pid_of, flow_id_of, label)
    sort_index: dict = {}  # the file's own process_sort_index per pid
    out: list[bytes] = []
    index = -1  # the event's position in the file's event array (ui_import's index)
    for item in pass1.rebased_chunks(source.iter_blocks(file), rebase):
        if isinstance(item, chunks.Layout):
            break
        for ev in item.events:
            index += 1
            if not isinstance(ev, dict):
                continue
            if binds and ev.get("ph") == "X":
                bind(ev, binds)
            if moves is not None and index in moves.slices:
                _move(ev, moves.slices[index], True)
            elif moves is not None and index in moves.flows:
                _move(ev, moves.flows[index], False)
            if plan is not None and ev.get("ph") == "M" and ev.get("name") == "process_sort_index":
                args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
                if "pid" in ev:
                    relabel.seen(ev["pid"])
                sort_index[_hashable(ev.get("pid"))] = args.get("sort_index")
                continue  # written below, after the other side's
            relabel.event(ev)
            out.append(orjson.dumps(ev))
    out += relabel.metadata(None if plan is None else
                            lambda key, pid, order: _sort_index(sort_index.get(key), pid, order, sort_base))
    for (pid, _tid, _lane), name in (moves.lane_threads.items() if moves is not None else ()):
        out.append(orjson.dumps({"ph": "M", "name": "thread_name", "pid": pid_of(pid), "tid": name,
                                 "args": {"name": name}}))
    return out


def bind(ev: dict, binds: dict) -> None:
    """Add to complete event ``ev`` (as read, rebased) the fields an entry of ``binds`` for it holds:
    ``binds[(ts ns, dur ns, name)]``, a list of (pid, tid, fields), the pid checked where the file has a
    number (the engine numbers a string its own way), the first of the same tid (unsigned) taken, else the
    first (the engine reads tid 0 as the pid); the entry used is removed."""
    ts, dur = ev.get("ts"), ev.get("dur", 0)
    if ts.__class__ not in (int, float) or dur.__class__ not in (int, float) or "bind_id" in ev:
        return  # (an event's own v2 flow is kept: it has no arrow then)
    found = binds.get((us_to_ns(ts), us_to_ns(dur), ev.get("name")))
    pid, tid = ev.get("pid"), ev.get("tid")
    tid = unsigned_tid(tid) if tid.__class__ is int and tid < 0 else tid
    fits = [i for i, (want, _, _) in enumerate(found or ()) if pid.__class__ is not int or pid == want]
    if fits:
        i = next((i for i in fits if found[i][1] == tid), fits[0])
        ev.update(found.pop(i)[2])


def _hashable(value):
    """A pid as a dict key (a pid written as a list or object is its JSON text)."""
    try:
        hash(value)
        return value
    except TypeError:
        return orjson.dumps(value)


def side_events(side: Side, label: str, shift_ns: int = 0, binds: dict | None = None) -> list[bytes]:
    """A side's events as the Perfetto UI shows them whole, processes labelled ``<label>: <name>``: A's
    (``label`` "A") as they are, B's ``shift_ns`` earlier, pids and flow ids moved past A's, sorted after;
    ``binds`` as ``relabelled``'s."""
    # each side's load chose its rebase (no base when a ts lies below one)
    a = label == "A"
    return relabelled(side.trace.file, side.trace.plan.rebase, shift_ns, a_pid if a else b_pid,
                      _same if a else _flow_id, label, plan=side.trace.plan, sort_base=0 if a else SORT_B,
                      binds=binds)


def _same(value):
    return value


def ui_order(*first: str) -> list[str]:
    """Regexes of the UI's top-level tracks: the global one, ``first``, A's process groups (``<name> <pid>``;
    a track of a group may be named ``A: …`` too), then B's; the v52 UI orders processes by slice count,
    not ``process_sort_index``, so ``open`` puts them in a workspace."""
    return [GLOBAL_TRACK, *first, r"^A: .* \d+$", r"^B: .* \d+$"]


def write_merged(sides: list[tuple[Side, str, int]], added: list[bytes], options: dict, out: Path,
                 binds: tuple[dict, ...] = ()) -> None:
    """Write each (side, label, shift ns) of ``sides`` (``side_events``, with the ``binds`` of the same
    index) into one trace, ``added`` after the ``[``, the marker's ``diff`` entry carrying ``options``
    (for ``traceaug open``)."""
    if any(side.trace.plan is None for side, _, _ in sides):
        raise TraceaugError(f"{out}: --trace needs Chrome JSON traces on both sides")
    guard.check([side.trace.path for side, _, _ in sides], [out])
    with scratch("traceaug-diff-") as tmp:
        body = tmp / "merged.json"
        with open(body, "wb") as w:
            w.write(b'{"traceEvents":[\n')
            w.write(b",\n".join([e for i, (side, label, shift) in enumerate(sides)
                                  for e in side_events(side, label, shift, binds[i] if binds else None)]))
            w.write(b"\n]}\n")
        layout = chunks.split_header(source.iter_blocks(body))[0]
        layout.has_events = True
        splice.Copy(body, out, splice.entry("diff", options)).finish(layout, added)
