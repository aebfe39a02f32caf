"""A rank's events relabelled onto its job (``RankRelabel``: the job's clock, the rank's pid and flow id
ranges, processes named by rank and role) on their own text: the new ts, pids and flow ids put in place of
the old, as the rewriters splice (never the events written again, but for process metadata and global
instants), checked against the relabelled events; one chunk in memory at a time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import orjson

from ..read import chunks, pass1, source
from ..read.rebase import Rebase, fix_negative_tids, us_to_ns
from . import visible
from .merge import Relabel, _hashable

RANK_PIDS = 1 << 22  # above Linux's largest pid: every rank's pids stay apart
RANK_FLOWS = 1 << 40


def pid_of(rank: int):
    """Rank ``rank``'s pid for a pid of its file: moved into the rank's range, or (a pid that
    is no number in 0 .. RANK_PIDS - 1: text, -5, 2^40) named by the rank, as the UI shows it."""
    def pid(p):
        if isinstance(p, int) and 0 <= p < RANK_PIDS:
            return rank * RANK_PIDS + p
        return f"rank {rank}: {p if isinstance(p, str) else orjson.dumps(p).decode()}"
    return pid


def _flow_of(rank: int):
    """Rank ``rank``'s flow id for a flow id of its file."""
    def flow(v):
        if isinstance(v, int):
            return rank * RANK_FLOWS + v
        if isinstance(v, str):
            try:  # Perfetto reads string flow ids as hex
                return rank * RANK_FLOWS + int(v, 16)
            except ValueError:
                return f"rank {rank}:{v}"
        return v
    return flow


class RankRelabel(Relabel):
    """A rank's events on the job's clock and pids (``Relabel``), its processes named by rank and role
    (``rank 3 CPU``, ``rank 3 GPU 0``: Kineto's ``process_labels``) and sorted by rank then role, its
    global instants (a track of no process, "Unnamed SliceTrack" in the UI) put on their thread of its
    CPU process (a process-scoped one would be a track named as its process)."""

    def __init__(self, rank: int, rebase: Rebase, shift_ns: int) -> None:
        super().__init__(rebase, shift_ns, pid_of(rank), _flow_of(rank), f"rank {rank}")
        self.rank = rank
        self.labels: dict = {}  # pid (as in the file) -> its process_labels
        self.steps: dict = {}  # ProfilerStep name -> (start ns on the job's clock, new pid, tid, end ns)

    def learn(self, events: list) -> None:
        """Note the ``process_labels`` of ``events`` (before their processes are named)."""
        for ev in events:
            if ev.get("ph") == "M" and ev.get("name") == "process_labels" and "pid" in ev:
                args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
                if isinstance(args.get("labels"), str):
                    self.labels[_hashable(ev["pid"])] = args["labels"]

    def name(self, name, pid) -> str:
        role = self.labels.get(_hashable(pid))
        return f"{self.label} {role}" if role else super().name(name, pid)

    def event(self, ev: dict) -> bytes | None:
        if ev.get("ph") in ("i", "I") and ev.get("s") == "g":  # on its thread of the rank's CPU process
            ev["s"] = "t"
            ev["pid"] = next((p for p, role in self.labels.items() if role == "CPU"), ev.get("pid"))
        pid = ev.get("pid")
        ts = ev.get("ts")
        text = super().event(ev)
        if text is not None and ev.get("ph") == "X" and str(ev.get("name")).startswith("ProfilerStep#"):
            dur = ev.get("dur") if isinstance(ev.get("dur"), (int, float)) else 0
            self.steps.setdefault(ev["name"], (self.ns(ts), ev.get("pid"), ev.get("tid"),
                                               self.ns(ts) + us_to_ns(dur)))
        if ev.get("ph") == "M" and ev.get("name") == "process_sort_index":
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            ev["args"] = {**args, "sort_index": sort_index(self.rank, self.labels.get(_hashable(pid)))}
        return text


def sort_index(rank: int, role: str | None) -> int:
    """A process's ``process_sort_index``: ranks in order; in each, the critical path's lane (``role``
    "path"), CPU, GPU 0, 1, ..., then the rest."""
    if role == "path":
        return rank * RANK_SORT
    if role == "CPU":
        return rank * RANK_SORT + 1
    gpu = re.fullmatch(r"GPU (\d+)", role or "")
    return rank * RANK_SORT + (2 + min(int(gpu[1]), RANK_SORT - 4) if gpu else RANK_SORT - 1)


RANK_SORT = 1 << 16  # process_sort_index values per rank


def spliced(file: Path, chosen: Rebase, relabel: RankRelabel) -> Iterator[bytes]:
    """``file``'s events (read with the rebase ``chosen``) ``relabel``-ed, chunk by chunk: their own text
    with the new values spliced in (``RankRelabel``: it learns process labels first)."""
    rebase = Rebase(chosen.prefix, chosen.sep, chosen.numeric, fixed=True)
    for item in pass1.rebased_chunks(source.iter_blocks(file), rebase):
        if isinstance(item, chunks.Layout):
            return
        if item.events:
            yield _chunk(item.text, item.events, item.last, relabel)


_VALUE = rb'(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|"(?:[^"\\]|\\.)*")'
_KEYS = {k: re.compile(rb'("%b"\s*:\s*)' % k.encode() + _VALUE) for k in ("ts", "pid", "id")}


def _chunk(text: bytes, events: list, last: bool, relabel: RankRelabel) -> bytes:
    """A chunk's events relabelled: its ``text`` (``last``: with the array's end and trailer) with each
    event's new ts, pid and flow id put in place of the old, tids unsigned, process metadata and global
    instants written again; re-serialized only if that text does not parse to the relabelled events."""
    relabel.learn(events)
    if not all(ev.__class__ is dict for ev in events):
        relabelled = [ev for ev in events if ev.__class__ is dict]
        for ev in relabelled:
            relabel.event(ev)
        return orjson.dumps(relabelled)[1:-1]
    if last:  # the events' text, without what follows the array
        text = _events_text(text)
    values: dict[str, list] = {"ts": [], "pid": [], "id": []}
    named = []
    for i, ev in enumerate(events):
        had = "ts" in ev, ev.get("id"), _rewritten(ev)
        ts = relabel.event(ev)
        if had[0]:
            values["ts"].append(ts)
        if "pid" in ev:
            values["pid"].append(_text(ev["pid"]))
        if "id" in ev:
            values["id"].append(None if ev["id"] is had[1] else _text(ev["id"]))
        if had[2]:
            named.append(i)
    out: bytes | None = text
    for key, new in values.items():
        out = _put(out, key, new) if out is not None else None
    if out is not None:
        out = fix_negative_tids(out)
        out = _renamed(out, [events[i] for i in named]) if named else out
    if out is not None and _same(_parsed(out), events, values["ts"]):
        return out
    return orjson.dumps(events)[1:-1]


def _same(parsed: list | None, events: list, ts: list) -> bool:
    """Whether ``parsed`` are the relabelled ``events``: their new ts (``ts``, the texts of those with a ts,
    None: kept) read as numbers for the comparison (``float`` and orjson both round correctly), then put
    back as the texts unless they are the same."""
    if parsed is None:
        return False
    timed = [(ev, t) for ev, t in zip((ev for ev in events if "ts" in ev), ts) if t is not None]
    for ev, t in timed:
        ev["ts"] = float(t) if b"." in t else int(t)
    if parsed == events:
        return True
    for ev, t in timed:
        ev["ts"] = orjson.Fragment(t)
    return False


def _parsed(text: bytes) -> list | None:
    """The events of a text of events (None: not JSON)."""
    try:
        return orjson.loads(b"".join((b"[", text, b"]")))
    except orjson.JSONDecodeError:
        return None


def _rewritten(ev: dict) -> bool:
    """Whether ``_chunk`` writes the event again (process metadata, a global instant)."""
    return (ev.get("ph") == "M" and ev.get("name") in ("process_name", "process_sort_index")) or (
        ev.get("ph") in ("i", "I") and ev.get("s") == "g")


def _renamed(text: bytes, named: list[dict]) -> bytes | None:
    """``text`` with its ``_rewritten`` events (``named``, relabelled, in order) written again; None
    unless there are as many as found."""
    pieces, pos, k = [], 0, 0
    for m in _REWRITTEN.finditer(text):
        if m.start() < pos:  # inside the one just written
            continue
        start = _event_start(text, pos, m.start())
        end = visible._object_end(text, start)
        if k == len(named) or not _rewritten(orjson.loads(text[start:end])):
            return None
        pieces += [text[pos:start], orjson.dumps(named[k])]
        pos, k = end, k + 1
    return b"".join([*pieces, text[pos:]]) if k == len(named) else None


def _event_start(text: bytes, lo: int, at: int) -> int:
    """Where the event holding ``at`` starts: after the last ``},{`` in ``text[lo:at]`` (else the first
    ``{`` from ``lo``); a ``},{`` in its args fails the caller's check."""
    bounds = list(chunks._BOUNDARY.finditer(text, lo, at))
    return bounds[-1].end() - 1 if bounds else text.index(b"{", lo)


_REWRITTEN = re.compile(rb'"name"\s*:\s*"process_(?:name|sort_index)"|"s"\s*:\s*"g"')


def _events_text(tail: bytes) -> bytes:
    """The text of the events that start the last chunk ``tail``: up to the last ``}`` closing an array
    after which the rest of the object parses (the caller's check confirms it)."""
    for m in reversed(list(_ARRAY_END.finditer(tail))):
        rest = tail[m.end():]
        try:
            if not rest.strip() or isinstance(orjson.loads(b'{"":0' + rest), dict):
                return tail[: m.start() + 1]
        except orjson.JSONDecodeError:
            continue
    return b""  # not found: the caller's check fails, and the events are written again


_ARRAY_END = re.compile(rb"\}\s*\]")


def _text(value) -> bytes:
    """A JSON value's text (an int without ``orjson.dumps``, whose result keeps a 4 KB buffer)."""
    return b"%d" % value if value.__class__ is int else orjson.dumps(value)


def _put(text: bytes, key: str, values: list) -> bytes | None:
    """``text`` with the value of each ``"key": value`` replaced by the next of ``values`` (None: kept);
    None unless there are as many as values."""
    it = iter(values)

    def put(m: re.Match) -> bytes:
        new = next(it, None)
        return m.group(0) if new is None else m.group(1) + new

    out, n = _KEYS[key].subn(put, text)
    return out if n == len(values) else None
