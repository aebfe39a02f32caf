"""``traceaug merge JOB OUT``: a job's ranks in one trace on one clock, pids at ``rank × RANK_PIDS + pid``,
processes named by rank and role (``relabel_text.RankRelabel``), arrows from each collective's ranks to its
straggler (who waited), each step's last rank to start marked; written rank by rank, so memory follows the
largest rank."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pandas as pd

from ..analysis import collectives as co
from ..atomic import scratch
from ..read import chunks, normalize, source
from ..read.inputs import trace_input
from ..read.marker import UI_ORDER, UI_WINDOW
from ..read.ranks import TraceFile
from ..read.rebase import Rebase
from . import splice, visible
from .events import us
from .merge import Relabel
from .relabel_text import RANK_PIDS, RankRelabel, pid_of, spliced

ARROWS = (1 << 62) - (1 << 40)  # flow ids of the cross-rank arrows, above every rank's


def late_starts(steps: dict[int, dict]) -> list[bytes]:
    """Per step two ranks or more have (``RankRelabel.steps`` per rank), an instant where the last rank to
    start it started (the others wait for it at their first collective), saying how late, after which rank."""
    out = []
    names = {n for rank in steps.values() for n in rank}
    for name in sorted(names):
        starts = sorted((at[0], r, at) for r, rank in steps.items() if (at := rank.get(name)))
        if len(starts) < 2 or starts[-1][0] == starts[0][0]:
            continue
        (first, r0, _), (last, r, (_ts, pid, tid, _end)) = starts[0], starts[-1]
        late_us = (last - first) / 1000
        out.append(orjson.dumps({
            "ph": "i", "s": "t", "cat": "straggler", "pid": pid, "tid": tid, "ts": orjson.Fragment(us(last)),
            "name": f"rank {r} starts {name} {late_us:.1f} us after rank {r0}",
            "args": {"step": name, "rank": r, "late_us": late_us, "first_rank": r0}}))
    return out


def last_step(steps: dict[int, dict]) -> tuple[int, int] | None:
    """The window (ns) of the last ProfilerStep every rank has, from its first start to its last end."""
    common = set.intersection(*(set(rank) for rank in steps.values())) if steps else set()
    numbered = [n for n in common if n[len("ProfilerStep#"):].isdigit()]
    if not numbered:
        return None
    name = max(numbered, key=lambda n: int(n[len("ProfilerStep#"):]))
    return (min(rank[name][0] for rank in steps.values()), max(rank[name][3] for rank in steps.values()))


def ui_order(ranks: list[int]) -> list[str]:
    """Regexes of the UI's process groups (``<name> <pid>``) in rank and role order (``sort_index``'s:
    the v52 UI orders processes by slice count, so ``open`` copies them to a workspace in this order)."""
    return [rx for r in sorted(ranks) for rx in (rf"^rank {r} Critical path \d+$", rf"^rank {r} CPU \d+$",
                                                 rf"^rank {r} GPU \d+ \d+$", rf"^rank {r}: ")]


def arrows(matched: co.Matched) -> list[bytes]:
    """Flow events from each rank's kernel of a matched instance to its straggler's (forward
    in time: from where the rank started waiting to the arrival it waited for)."""
    waits = co.wait_table(matched)
    out = []
    fid = ARROWS
    for iid, rows in waits.groupby("iid", sort=True):
        s = rows["straggler"].iat[0]
        if pd.isna(s):  # a collective of one rank only: no one waited
            continue
        first = rows[rows["rank"] == s].iloc[0]
        inst = matched.instances.set_index("iid").loc[iid]
        name = f"{inst['kind']} #{inst['position']} ({inst['group']})"
        for _, w in rows[rows["rank"] != s].iterrows():
            fid += 1
            for ph, r, row in (("s", int(w["rank"]), w), ("f", int(s), first)):
                c = matched.tables[r].colls
                ev = {"ph": ph, "id": fid, "cat": "collective", "name": name,
                      "pid": pid_of(r)(int(c["device"].iat[int(row["row"])])),
                      "tid": int(c["stream"].iat[int(row["row"])]),
                      "ts": orjson.Fragment(us(int(row["arrival_ns"])))}
                if ph == "f":
                    ev["bp"] = "e"
                out.append(orjson.dumps(ev))
    return out


def _rebase(f: TraceFile, matched: co.Matched) -> Rebase:
    """The text rebase of rank file ``f``: the one its read chose (a full plan of the file
    chooses the same prefix and spacing), else from a plan of its own."""
    t = matched.tables.get(f.rank)
    if t is not None and t.text_base is not None:
        return Rebase(*t.text_base, fixed=True)
    return normalize.plan(trace_input(f.path), kind="full").rebase


def write_job(files: list[TraceFile], out: Path, matched: co.Matched,
              extra: list[bytes] | None = None, window: tuple[int, int] | None = None) -> tuple[int, int]:
    """Write the merged trace of a job's rank ``files`` to ``out`` on its ``matched`` collectives' clock, with
    ``extra`` events (merged pids and clock, e.g. the critical path) and ``window`` (ns, that clock; else the
    last step every rank has) for the UI to show first. Returns (ranks, cross-rank arrows)."""
    offset = matched.offsets()
    links = arrows(matched)
    added = _by_rank(links + list(extra or ()))
    moves = visible.Edits()  # every part's, indexes in the whole event array
    done = 0  # events written
    steps: dict[int, dict] = {}  # per rank: its ProfilerSteps' starts
    with scratch("traceaug-merge-") as tmp:
        # Rank by rank (one rank's text and plan in memory at a time): its events spliced, with the
        # added events on its pids, planned on their own (no thread spans two ranks) for what the UI
        # would drop (ns rounding of moved clocks nests slices differently), moved as rewriters move them.
        whole, part = tmp / "job.json", tmp / "part.json"
        with open(whole, "wb") as w:
            w.write(_HEAD)
            for f in files:
                chosen = _rebase(f, matched)
                relabel = RankRelabel(f.rank, chosen, int(offset.get(f.rank, 0)))
                _write_part(part, _rank_events(trace_input(f.path), chosen, relabel,
                                               added.pop(f.rank, [])))
                done += _append(part, w, done, moves)
                steps[f.rank] = relabel.steps
            rest = late_starts(steps) + [e for rest in added.values() for e in rest]
            if rest:  # added events on no rank's pid, and the marks of late step starts
                _write_part(part, iter(rest))
                done += _append(part, w, done, moves)
            w.write(_TAIL)
        # Copied like any rewriter's output, the moves already made (the marker says which).
        options = {UI_ORDER: ui_order([f.rank for f in files])}
        window = window or last_step(steps)
        if window is not None:
            options[UI_WINDOW] = [int(window[0]), int(window[1])]
        copy = splice.Copy(whole, out, splice.entry("merge", options), keep_bytes=False)
        copy.edits = moves
        layout = chunks.split_header(source.iter_blocks(whole))[0]
        layout.has_events = done > 0
        copy.finish(layout, [])
    return len(files), len(links) // 2


_HEAD = b'{"schemaVersion": 1, "traceEvents": [\n'
_TAIL = b"\n]}\n"


def _by_rank(events: list[bytes]) -> dict:
    """Added events by the rank of their pid (None: no rank's), in their order."""
    out: dict = {}
    for e in events:
        pid = orjson.loads(e).get("pid")
        rank = pid // RANK_PIDS if isinstance(pid, int) and pid >= 0 else None
        out.setdefault(rank, []).append(e)
    return out


def _rank_events(file: Path, chosen: Rebase, relabel: Relabel, added: list[bytes]) -> Iterator[bytes]:
    """A rank's events spliced, the names its processes lacked, then the ``added`` events on its pids."""
    yield from spliced(file, chosen, relabel)
    yield from relabel.metadata()
    yield from added


def _write_part(path: Path, pieces: Iterator[bytes]) -> None:
    """A plain trace of the events in ``pieces`` (texts of events separated by commas)."""
    with open(path, "wb") as f:
        f.write(_HEAD)
        first = True
        for piece in pieces:
            if piece:
                f.write(piece if first else b",\n" + piece)
                first = False
        f.write(_TAIL)


def _append(part: Path, w, done: int, moves: visible.Edits) -> int:
    """Append ``part``'s events, moved where the UI would drop them, to ``w`` (holding ``done`` events);
    the moves noted in ``moves``. Returns how many events were appended."""
    plan = normalize.plan(part, kind="full")
    if not plan.ui.events:
        return 0
    e = visible.edits(plan)
    if done:
        w.write(b",\n")
    _layout, _head, rest = chunks.split_header(source.iter_blocks(part))
    for text in splice._edited(rest, plan.layout.events_start, e):
        w.write(text)
    w.seek(w.tell() - len(_TAIL))  # the part's own end
    w.truncate()
    moves.metadata += e.metadata
    moves.slices += e.slices
    moves.flows += e.flows
    moves.moved += [[i + done, lane] for i, lane in e.moved]
    moves.negative_tid_threads += e.negative_tid_threads
    return plan.ui.events
