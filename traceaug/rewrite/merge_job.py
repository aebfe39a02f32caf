"""``traceaug merge JOB OUT``: a job's ranks in one trace on one clock, pids at ``rank × RANK_PIDS + pid``,
processes named ``rank N: <name>``, and arrows from each collective's ranks to its straggler (who waited)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import pandas as pd

from ..analysis import collectives as co
from ..read import normalize
from ..read.inputs import trace_input
from ..read.ranks import TraceFile
from ..read.rebase import Rebase
from . import splice
from .events import us
from .merge import relabelled

RANK_PIDS = 1 << 22  # above Linux's largest pid: every rank's pids stay apart
RANK_FLOWS = 1 << 40
ARROWS = (1 << 62) - (1 << 40)  # flow ids of the cross-rank arrows, above every rank's


def _pid_of(rank: int):
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
                      "pid": _pid_of(r)(int(c["device"].iat[int(row["row"])])),
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
              extra: list[bytes] | None = None) -> tuple[int, int]:
    """Write the merged trace of a job's rank ``files`` to ``out`` on its ``matched`` collectives' clock, with
    ``extra`` events (merged pids and clock, e.g. the critical path). Returns (ranks, cross-rank arrows)."""
    offset = matched.offsets()
    events: list[bytes] = []
    for f in files:  # every rank relabelled: the UI keeps a process's first name
        events += relabelled(trace_input(f.path), _rebase(f, matched), int(offset.get(f.rank, 0)),
                             _pid_of(f.rank), _flow_of(f.rank), f"rank {f.rank}")
    links = arrows(matched)
    added = list(extra or ())
    with tempfile.TemporaryDirectory(prefix="traceaug-merge-") as tmp:
        # One plain trace, then copied like any rewriter's output: what the UI would drop (ns rounding
        # of moved clocks nests slices differently) goes to overlap lanes (``rewrite.visible``).
        whole = Path(tmp) / "job.json"
        with open(whole, "wb") as f:
            f.write(b'{"schemaVersion": 1, "traceEvents": [\n')
            for i, ev in enumerate(events + links + added):
                f.write(b",\n" + ev if i else ev)
            f.write(b"\n]}\n")
        plan = normalize.plan(whole, kind="full")
        copy = splice.Copy(whole, out, "merge", keep_bytes=False)
        copy.prepare(plan)
        copy.finish(plan.layout, [])
    return len(files), len(links) // 2
