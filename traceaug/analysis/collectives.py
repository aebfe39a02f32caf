"""Collectives across ranks (from ``collective_rank.tables``): matching, one job clock, waits, stragglers and
their causes. Arrival = GPU start; wait = last arrival − arrival; the last arrival is the straggler."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pandas as pd

from .collective_groups import group_keys, has_seqs, seq_order, stream_ids
from .collective_rank import RankTables

BUS_FACTOR = {"AllReduce": lambda n: 2 * (n - 1) / n, "AllGather": lambda n: (n - 1) / n,
              "ReduceScatter": lambda n: (n - 1) / n, "AllToAll": lambda n: (n - 1) / n}
NAMED = 3  # ops named per cause


def ranked(done: dict) -> list[RankTables]:
    """The tables of ``done`` ({file's rank: tables}, as the job runner gives them), each
    with its rank: the file's, else the trace's, else 0."""
    for r, t in done.items():
        if r is not None:
            t.rank = r
        elif t.rank is None:
            t.rank = 0
    return list(done.values())


@dataclass
class Matched:
    """A job's matched collectives (job clock): ``instances`` (iid, group, position, seq, kind, bytes, step,
    ranks), ``arrivals`` per (instance, rank) (iid, rank, row, prev_row: -1 if first, launch_ns, arrival_ns,
    end_ns), ``clock`` per rank (offset_ns, residual_ns, reference, applied), ``problems``."""

    tables: dict[int, RankTables]
    instances: pd.DataFrame
    arrivals: pd.DataFrame
    clock: pd.DataFrame
    problems: list[str] = field(default_factory=list)
    _table: pd.DataFrame | None = field(default=None, init=False, repr=False, compare=False)

    def offsets(self) -> dict:
        """Each rank's clock offset (ns): its time minus this, in the job clock."""
        return dict(zip(self.clock["rank"].tolist(), self.clock["offset_ns"].tolist()))


def _signature(kind, nbytes) -> str:
    return f"{kind} {nbytes} B" if nbytes is not None and nbytes == nbytes else str(kind)


# Kinds whose message size differs by rank (uneven all_to_all splits, a root's buffer): only
# their kind must agree.
PER_RANK_SIZES = frozenset({"AllToAll", "SendRecv", "Send", "Recv", "Gather", "Scatter"})


def _same(a: tuple, b: tuple) -> bool:
    """Kind equal, and sizes equal where both known and the kind sends the same everywhere."""
    return a[0] == b[0] and (a[0] in PER_RANK_SIZES or a[1] is None or b[1] is None
                             or a[1] == b[1])


class _Columns:
    """A rank's collective columns taken once, in table order: (kind, bytes) signatures and numpy arrays with
    a ``has_*`` mask where values may be missing (a pandas lookup per rank and position is slow)."""

    def __init__(self, colls: pd.DataFrame, ids: dict) -> None:
        kinds = colls["kind"].to_numpy(dtype=object).tolist()
        nbytes = [None if v is pd.NA else v for v in colls["bytes"].to_numpy(dtype=object).tolist()]
        self.sigs = list(zip(kinds, nbytes, strict=True))
        self.sig = np.array([ids.setdefault(s, len(ids)) for s in self.sigs], np.int64)
        self.seq = colls["seq"].to_numpy(dtype=object)
        self.step = colls["step"].to_numpy().astype(np.int64)
        self.bytes, self.has_bytes = _ints(colls["bytes"])
        self.group, self.has_group = _ints(colls["group_size"])
        self.launch, self.has_launch = _ints(colls["launch_ts"])
        self.ts = colls["ts"].to_numpy().astype(np.int64)
        self.end = colls["end"].to_numpy().astype(np.int64)


def _ints(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``values`` as int64 (as ``int()`` makes them; 0 where missing: None, NA, NaN) and
    where present."""
    if values.dtype.kind in "iuf" or isinstance(values.dtype, pd.Int64Dtype):
        has = values.notna().to_numpy()
        return values.to_numpy(np.float64 if values.dtype.kind == "f" else np.int64,
                               na_value=0).astype(np.int64), has
    values = values.tolist()
    has = np.array([v is not None and v is not pd.NA and v == v for v in values], bool)
    return np.array([int(v) if h else 0 for v, h in zip(values, has.tolist())], np.int64), has


def match(tables: list[RankTables]) -> Matched:
    """Match the collectives of every rank (recorded clocks; ``align`` moves them)."""
    by_rank = {t.rank: t for t in tables}
    same_streams = len({frozenset(stream_ids(t.colls)) for t in tables}) <= 1
    rows: dict[str, dict[int, list[int]]] = {}  # group -> rank -> row indices in GPU order
    labels: dict[str, dict[int, str]] = {}
    members: dict[str, set[int]] = {}
    ids: dict[tuple, int] = {}  # (kind, bytes) -> a number, the same on every rank
    cols = {r: _Columns(t.colls, ids) for r, t in by_rank.items()}
    listed: dict = {}  # "Process Group Ranks" text -> its ranks, parsed once
    for r, t in by_rank.items():
        keys, lab = group_keys(t.colls, same_streams)
        for k, v in lab.items():
            labels.setdefault(k, {})[r] = v
        for i, (k, text) in enumerate(zip(keys, t.colls["pg_ranks"].tolist())):
            rows.setdefault(k, {}).setdefault(r, []).append(i)
            members.setdefault(k, set()).add(r)
            if isinstance(text, str) and text not in listed:
                listed[text] = [m for m in _ranks_of(text) if m in by_rank]
            members[k].update(listed.get(text, ()))
    inst, arr, problems = [], [], []
    for key in sorted(rows, key=lambda k: (k.startswith("stream"), k)):
        distinct = set(labels[key].values())
        label = distinct.pop() if len(distinct) == 1 else key  # ranks labelling it alike, else its key
        ranks = sorted(members[key])
        per = {r: rows[key].get(r, []) for r in ranks}
        seqs = {r: cols[r].seq[per[r]] for r in ranks}
        by_seq = all(has_seqs(s) for s in seqs.values())
        if by_seq:
            for r in ranks:
                order = seq_order(seqs[r])
                per[r] = [per[r][i] for i in order]
                seqs[r] = seqs[r][order]
        m, problem = _matched(label, ranks, per, cols, seqs if by_seq else None)
        if problem:
            problems.append(problem)
        if not m:
            continue
        at = np.array([per[r][:m] for r in ranks], np.int64)  # (rank, position) -> row
        take = partial(_take, [cols[r] for r in ranks], at)
        steps, sizes, group = take("step"), _most(take("bytes"), take("has_bytes")), \
            _most(take("group"), take("has_group"))
        first = len(inst)
        for p in range(m):
            column = steps[:, p]
            step = int(column[0]) if (column == column[0]).all() else \
                Counter(column.tolist()).most_common(1)[0][0]
            inst.append({"iid": first + p, "group": label, "position": p,
                         "seq": int(seqs[ranks[0]][p]) if by_seq else None,
                         "kind": cols[ranks[0]].sigs[per[ranks[0]][p]][0],
                         "bytes": sizes[p], "step": None if step < 0 else step,
                         "ranks": len(ranks),
                         "group_size": len(ranks) if group[p] is None else group[p]})
        prev = np.concatenate([np.full((len(ranks), 1), -1, np.int64), at[:, :-1]], axis=1)
        arr.append({"iid": np.repeat(np.arange(first, first + m), len(ranks)),
                    "rank": np.tile(np.array(ranks, np.int64), m),
                    **{c: v.T.ravel() for c, v in (("row", at), ("prev_row", prev),
                                                   ("launch", take("launch")),
                                                   ("has_launch", take("has_launch")),
                                                   ("arrival_ns", take("ts")),
                                                   ("end_ns", take("end")))}})
    instances = pd.DataFrame(inst, columns=["iid", "group", "position", "seq", "kind", "bytes",
                                            "step", "ranks", "group_size"])
    instances["step"] = instances["step"].astype("Int64")
    arrivals = _arrivals(arr)
    clock = pd.DataFrame({"rank": sorted(by_rank), "offset_ns": 0, "residual_ns": 0,
                          "reference": None, "applied": False})
    return Matched(by_rank, instances, arrivals, clock, problems)


def _take(cols: list[_Columns], at: np.ndarray, name: str) -> np.ndarray:
    """Column ``name`` of each rank (``cols``) at its rows ``at`` (rank, position)."""
    return np.array([getattr(c, name)[rows] for c, rows in zip(cols, at)])


ARRIVALS = ["iid", "rank", "row", "prev_row", "launch_ns", "arrival_ns", "end_ns"]


def _arrivals(parts: list[dict]) -> pd.DataFrame:
    """``Matched.arrivals`` from each group's columns (``match``)."""
    if not parts:
        out = pd.DataFrame([], columns=ARRIVALS)
        out["launch_ns"] = out["launch_ns"].astype("Int64")
        return out
    col = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    launch, has = col.pop("launch"), col.pop("has_launch")
    launch = pd.arrays.IntegerArray(launch, ~has)
    return pd.DataFrame({c: launch if c == "launch_ns" else col[c] for c in ARRIVALS})


def _most(values: np.ndarray, has: np.ndarray) -> list[int | None]:
    """Per position (column), the largest of the ranks' values present, None if none is."""
    top = np.where(has, values, np.iinfo(np.int64).min).max(axis=0, initial=np.iinfo(np.int64).min)
    return [int(v) if h else None for v, h in zip(top.tolist(), has.any(axis=0).tolist())]


def _matched(label: str, ranks: list[int], per: dict, cols: dict, seqs: dict | None
             ) -> tuple[int, str | None]:
    """How many positions of a group match from the first (every rank has it, same kind and size where they
    must agree, same seq when ``seqs``), and the problem line at the first that does not (None if all do)."""
    sig = {r: [cols[r].sigs[i] for i in per[r]] for r in ranks}
    n = max(len(v) for v in per.values())
    shortest = min(len(v) for v in per.values())
    ids = np.array([cols[r].sig[per[r][:shortest]] for r in ranks], np.int64).reshape(
        len(ranks), shortest)
    same = (ids == ids[:1]).all(axis=0)
    if seqs is not None:
        s = np.array([[int(v) for v in seqs[r][:shortest]] for r in ranks], np.int64).reshape(
            len(ranks), shortest)
        same &= (s == s[:1]).all(axis=0)
    for p in [*np.flatnonzero(~same).tolist(), *([shortest] if shortest < n else [])]:
        have = {r: sig[r][p] for r in ranks if p < len(sig[r])}
        seq_at = {r: int(seqs[r][p]) for r in have} if seqs is not None else {}
        common = Counter(have.values()).most_common(1)[0][0]
        common_seq = Counter(seq_at.values()).most_common(1)[0][0] if seqs is not None else None
        odd = [r for r in have if (seqs is not None and seq_at[r] != common_seq)
               or not _same(have[r], common)]
        missing = [r for r in ranks if r not in have]
        if odd or missing:
            return p, _problem(label, p, common, ranks, have, odd, missing, sig,
                               seq_at if seqs is not None else None)
    return n, None


def _ranks_of(text: str) -> list[int]:
    """The ranks of a "Process Group Ranks" arg ("[0, 1]")."""
    try:
        return [int(x) for x in text.strip("[] ").split(",") if x.strip()]
    except ValueError:
        return []


def _problem(group: str, p: int, common: tuple, ranks: list[int], have: dict, odd: list,
             missing: list, sig: dict, seq_at: dict | None) -> str:
    """The line saying why position ``p`` of ``group`` is not matched."""
    head = f"group {group}, instance {p}"
    tail = "; nothing past it in this group is matched"
    parts = [f"rank {r} lacks it (has {len(sig[r])} instances of the group)" for r in missing]
    common_seq = Counter(seq_at.values()).most_common(1)[0][0] if seq_at else None
    for r in odd:
        if seq_at is not None and seq_at[r] != common_seq:
            gap = " (it lacks that one)" if seq_at[r] > common_seq else ""
            parts.append(f"rank {r} has seq {seq_at[r]} where the others have {common_seq}{gap}")
            continue
        nxt = [sig[q][p + 1] for q in ranks if q != r and p + 1 < len(sig[q])]
        if nxt and seq_at is None and _same(have[r], Counter(nxt).most_common(1)[0][0]):
            parts.append(f"rank {r} lacks it ({_signature(*common)}; its next instance is the "
                         "others' next one)")
        else:
            parts.append(f"rank {r} has {_signature(*have[r])} where the others have "
                         f"{_signature(*common)}")
    return f"{head}: {'; '.join(parts)}{tail}"


def align(matched: Matched) -> Matched:
    """Every rank's clock offset against the lowest rank (median end difference over shared instances, through
    any chain of groups), applied to ``arrivals``; ranks sharing none align on their own lowest rank."""
    a = matched.arrivals
    ranks = sorted(matched.tables)
    if not len(a) or not ranks:
        return matched
    # ends from the earliest: epoch ns as float64 (the pivot's NaN) would be 256 ns coarse
    end = a.assign(end_ns=a["end_ns"] - a["end_ns"].min()).pivot(index="iid", columns="rank",
                                                                 values="end_ns")
    offset: dict[int, float] = {ranks[0]: 0.0}
    reference: dict[int, int] = {ranks[0]: ranks[0]}
    residual: dict[int, float] = {ranks[0]: 0.0}  # of each aligned rank
    changed = True
    while changed or len(offset) < len(ranks):
        if not changed:  # a part of the job no matched instance ties to the aligned ranks
            r = next(r for r in ranks if r not in offset)
            offset[r], reference[r], residual[r] = 0.0, r, 0.0
        changed = False
        for r in ranks:
            if r in offset:
                continue
            for q in sorted(offset):  # an aligned rank sharing instances with r
                if q not in end or r not in end:
                    continue
                d = (end[r] - end[q]).dropna()
                if len(d):
                    off = float(np.median(d.to_numpy(np.float64))) + offset[q]
                    offset[r], reference[r] = off, q
                    residual[r] = float(np.abs(d.to_numpy(np.float64) + offset[q] - off).max())
                    changed = True
                    break
    offs = {r: round(offset.get(r, 0.0)) for r in ranks}
    shift = a["rank"].map(offs).astype(np.int64)
    a = a.assign(launch_ns=a["launch_ns"] - shift, arrival_ns=a["arrival_ns"] - shift,
                 end_ns=a["end_ns"] - shift)
    clock = pd.DataFrame({"rank": ranks, "offset_ns": [offs[r] for r in ranks],
                          "residual_ns": [round(residual.get(r, 0.0)) for r in ranks],
                          "reference": [reference.get(r) for r in ranks],
                          "applied": True})
    return Matched(matched.tables, matched.instances, a, clock, matched.problems)


def match_job(tables: list[RankTables], align_clocks: bool = True) -> Matched:
    """Every rank's tables (matching needs them all: ``--rank`` filters the rows shown)
    matched, and the clocks aligned unless told not to."""
    found = match(tables)
    return align(found) if align_clocks else found


def wait_table(matched: Matched) -> pd.DataFrame:
    """``matched.arrivals`` with each row's last arrival, wait and straggler of its instance."""
    a = matched.arrivals.copy()
    if not len(a):
        return a.assign(last_ns=pd.Series(dtype=np.int64), wait_ns=pd.Series(dtype=np.int64),
                        straggler=pd.Series(dtype=np.int64))
    last = a.groupby("iid")["arrival_ns"].transform("max")
    a["last_ns"] = last
    a["wait_ns"] = last - a["arrival_ns"]
    # the straggler: the last arrival (the lowest rank among equal ones)
    late = a[a["arrival_ns"] == last].sort_values(["iid", "rank"]).drop_duplicates("iid")
    a["straggler"] = a["iid"].map(late.set_index("iid")["rank"])
    alone = a.groupby("iid")["rank"].transform("count") < 2  # nobody waits for a lone rank
    a["straggler"] = a["straggler"].astype("Int64").mask(alone)
    return a


def instance_table(matched: Matched) -> pd.DataFrame:
    """Per matched instance (made once per job): step, group, position, seq, kind, bytes, ranks, skew_ns,
    straggler, mean_wait_ns (of the other ranks), max_wait_ns, transfer_ns (median end − last arrival),
    algbw_gbps, busbw_gbps, cause ("cpu" / "gpu" / None), cause_late_ns, cause_ops."""
    if matched._table is None:
        matched._table = _instance_table(matched)
    return matched._table.copy()


def _instance_table(matched: Matched) -> pd.DataFrame:
    a = wait_table(matched)
    g = a.groupby("iid")
    inst = matched.instances.set_index("iid")
    out = inst[["step", "group", "position", "seq", "kind", "bytes", "ranks"]].copy()
    out["skew_ns"] = (g["arrival_ns"].max() - g["arrival_ns"].min()).astype(np.int64)
    out["straggler"] = g["straggler"].first()
    others = a[a["rank"].ne(a["straggler"]).fillna(True).astype(bool)]
    out["mean_wait_ns"] = others.groupby("iid")["wait_ns"].mean().reindex(out.index).fillna(0.0)
    out["max_wait_ns"] = g["wait_ns"].max().astype(np.int64)
    transfer = (a["end_ns"] - a["last_ns"]).groupby(a["iid"]).median()
    out["transfer_ns"] = transfer.astype(np.float64)  # a median: half a ns between two ranks
    nbytes = out["bytes"].astype("Float64")
    algbw = nbytes / transfer.where(transfer > 0)  # bytes per ns = GB/s
    out["algbw_gbps"] = algbw.astype(np.float64)
    # nccl-tests' n: the ranks of the communicator (the args' group size; else those matched)
    factor = [BUS_FACTOR.get(k, lambda n: 1.0)(n) for k, n in zip(out["kind"],
                                                                  inst["group_size"])]
    out["busbw_gbps"] = out["algbw_gbps"] * np.array(factor, np.float64)
    why = _Causes(matched, a)
    causes = [why(iid) for iid in out.index]
    out["cause"] = [c[0] for c in causes]
    out["cause_late_ns"] = np.array([c[1] for c in causes], np.int64)
    out["cause_ops"] = ["; ".join(c[2]) if c[2] else None for c in causes]
    out = out.reset_index(drop=True)
    for col in ("seq", "bytes", "step", "straggler"):
        out[col] = out[col].astype("Int64")
    return out


class _Causes:
    """Why stragglers arrived late: from the second-latest arrival on, the time before its launch is CPU-side,
    the rest GPU-side. Lookups are made once per job: a dict lookup per window, not a table scan."""

    def __init__(self, matched: Matched, waits: pd.DataFrame) -> None:
        self.matched = matched
        iid = waits["iid"].to_numpy(np.int64)
        rank = waits["rank"].to_numpy(np.int64)
        arrival = waits["arrival_ns"].to_numpy(np.int64)
        late = waits["straggler"].astype("Int64")
        me = (rank == late.to_numpy(np.int64, na_value=-1)) & late.notna().to_numpy()
        launch = waits["launch_ns"].astype("Int64")
        has_launch = launch.notna().to_numpy()
        launch = launch.to_numpy(np.int64, na_value=0)
        # per instance: its ranks by arrival (ties in table order), the straggler's row
        order = np.lexsort((arrival, iid))
        cut = np.flatnonzero(np.r_[True, iid[order][1:] != iid[order][:-1]]) if len(iid) \
            else np.empty(0, np.int64)
        self.ranks: dict[int, list[int]] = {}
        self.late: dict[int, tuple[int, int, int, int | None]] = {}  # straggler, t1, t2, launch
        for lo, hi in zip(cut.tolist(), [*cut[1:].tolist(), len(order)]):
            at = order[lo:hi]
            i = int(iid[at[0]])
            self.ranks[i] = rank[at].tolist()
            mine = at[me[at]]
            if hi - lo < 2 or not len(mine):
                continue
            s = int(mine[0])
            self.late[i] = (int(rank[s]), int(arrival[s]), int(arrival[at[~me[at]]].max()),
                            int(launch[s]) if has_launch[s] else None)
        self.waits = waits
        self._row: dict | None = None  # (iid, rank) -> (row, prev_row): made when a cause is named
        self._entries: dict[int, dict] = {}

    @property
    def row(self) -> dict[tuple[int, int], tuple[int, int]]:
        """Each arrival's (row, previous row of its group), by (iid, rank)."""
        if self._row is None:
            w = self.waits
            self._row = {(i, r): (int(x), int(p)) for i, r, x, p in zip(
                w["iid"].tolist(), w["rank"].tolist(), w["row"].tolist(), w["prev_row"].tolist())}
        return self._row

    def __call__(self, iid: int) -> tuple[str | None, int, list[str]]:
        """("cpu" | "gpu" | None, the late time in ns that kind explains, the ops named)."""
        if iid not in self.late:
            return None, 0, []
        straggler, t1, t2, launch = self.late[iid]
        if t1 <= t2 or launch is None:
            return None, 0, []
        cpu_late = min(max(launch - t2, 0), t1 - t2)
        gpu_late = (t1 - t2) - cpu_late
        kind = "cpu" if cpu_late >= gpu_late else "gpu"
        return kind, cpu_late if kind == "cpu" else gpu_late, self.named(iid, straggler, kind)

    def totals(self, iid: int, rank: int, kind: str) -> pd.Series:
        """Per name, the time of the CPU ops (launch thread) or non-communication GPU ops (the collective's
        device) wholly inside its window on ``rank`` (``collective_windows``, made in the rank's task)."""
        windows = self.matched.tables[rank].windows
        if windows is None or (iid, rank) not in self.row:
            return pd.Series(dtype=np.float64)
        if rank not in self._entries:
            self._entries[rank] = windows.index()
        row, prev = self.row[(iid, rank)]
        return windows.totals(self._entries[rank][(kind, row, prev)])

    def named(self, iid: int, rank: int, kind: str) -> list[str]:
        """The ops that took longer on ``rank`` than the other ranks' median (largest excess
        first), with that excess."""
        mine = self.totals(iid, rank, kind)
        if not len(mine):
            return []
        others = [self.totals(iid, r, kind).reindex(mine.index).fillna(0)
                  for r in self.ranks[iid] if r != rank]
        excess = mine - pd.concat(others, axis=1).median(axis=1) if others else mine
        excess = excess[excess > 0].sort_values(ascending=False, kind="stable")
        # whole names: csv and json never cut (a terminal table cuts its cells)
        return [f"{name} +{v / 1e3:.1f} us" for name, v in excess.head(NAMED).items()]


def by_rank(matched: Matched) -> pd.DataFrame:
    """Per rank: collectives, total_wait_ns, straggler_count (instances it arrived last at),
    caused_wait_ns (the other ranks' mean wait for it, summed over those instances)."""
    a = wait_table(matched)
    inst = instance_table(matched)
    ranks = sorted(matched.tables)
    caused = inst.groupby("straggler")["mean_wait_ns"].sum()
    count = inst["straggler"].value_counts()
    wait = a.groupby("rank")["wait_ns"].sum()
    n = a.groupby("rank")["iid"].count()
    return pd.DataFrame({"rank": np.array(ranks, np.int64),
                         "collectives": np.array([n.get(r, 0) for r in ranks], np.int64),
                         "total_wait_ns": np.array([wait.get(r, 0) for r in ranks], np.int64),
                         "straggler_count": np.array([count.get(r, 0) for r in ranks], np.int64),
                         "caused_wait_ns": np.array([caused.get(r, 0.0) for r in ranks], np.float64)})


def step_table(matched: Matched) -> pd.DataFrame:
    """Per step and rank: step_ns (its ProfilerStep), collectives, wait_ns (in collectives),
    straggler_count, caused_wait_ns."""
    a = wait_table(matched)
    inst = instance_table(matched)
    a = a.merge(matched.instances[["iid", "step"]], on="iid")
    # the rows of each (rank, step) and (step, straggler), found once, not by a scan per step and rank
    # (in table order; rows with a missing key in none)
    waits, mine_at = a["wait_ns"].to_numpy(np.int64), a.groupby(["rank", "step"], sort=False).indices
    caused = inst["mean_wait_ns"].to_numpy(np.float64)
    strag_at = inst.groupby(["step", "straggler"], sort=False).indices
    none = np.empty(0, np.int64)
    records = []
    for r in sorted(matched.tables):
        st = matched.tables[r].steps
        for step, ts, end in zip(st["step"].tolist(), st["ts"].tolist(), st["end"].tolist()):
            mine = waits[mine_at.get((r, step), none)]  # numpy: a pandas take per step is slow
            strag = caused[strag_at.get((step, r), none)]
            records.append((step, r, end - ts, len(mine), mine.sum(), len(strag), strag.sum()))
    columns = ["step", "rank", "step_ns", "collectives", "wait_ns", "straggler_count", "caused_wait_ns"]
    return pd.DataFrame(records, columns=columns).astype(
        {c: np.float64 if c == "caused_wait_ns" else np.int64 for c in columns})


def from_gpu_ops(rank: int, base_ns: int, ops: dict, rows: np.ndarray) -> RankTables:
    """A rank's tables from the GPU ops the kernel analyses load (no args: each NCCL stream a
    group, kinds from kernel names), its ops ``rows`` only: enough to match and time waits."""
    from .collective_rank import COLL_COLUMNS, kind_of_name

    pick = rows & (ops["category"] == "communication")
    names = ops["name"][pick].tolist()
    colls = pd.DataFrame({c: [None] * len(names) for c in COLL_COLUMNS})
    if names:
        colls = colls.assign(
            ts=ops["ts"][pick] + base_ns, end=ops["end"][pick] + base_ns, name=names,
            device=ops["device"][pick], stream=ops["stream"][pick],
            launch_ts=np.where(ops["launched"][pick], ops["launch_ts"][pick] + base_ns, None),
            kind=[kind_of_name(n) or "Unknown" for n in names], step=-1)
    colls["bytes"] = pd.array([None] * len(names), dtype="Int64")
    colls["seq"] = pd.array([None] * len(names), dtype="Int64")
    return RankTables(path="", rank=rank, base_ns=base_ns, world_size=None, colls=colls)


def kernel_split(tables: list[RankTables]) -> dict[str, dict]:
    """Per communication kernel name, matched across ranks (job clock): ``wait`` and ``transfer`` (ns, each
    rank's total, mean over ranks), ``waited_for`` (the rank whose late arrivals cost the others most)."""
    return split_of(align(match(tables)))


def split_of(matched: Matched) -> dict[str, dict]:
    """``kernel_split`` of a matched job."""
    a = wait_table(matched)
    if not len(a):
        return {}
    a["name"] = _at_rows(matched, a, "name")
    a["transfer_ns"] = a["end_ns"] - a["last_ns"]
    per = a.groupby(["name", "rank"])[["wait_ns", "transfer_ns"]].sum().groupby("name").mean()
    others = a[a["rank"].ne(a["straggler"]).fillna(True).astype(bool)]
    caused = others.groupby(["name", "straggler"])["wait_ns"].sum()
    out = {}
    for name in per.index:
        c = caused.get(name)
        out[name] = {"wait": float(per.at[name, "wait_ns"]),
                     "transfer": float(per.at[name, "transfer_ns"]),
                     "waited_for": int(c.idxmax()) if c is not None and len(c) and c.max() > 0
                     else None}
    return out


def _at_rows(matched: Matched, a: pd.DataFrame, column: str) -> np.ndarray:
    """Each row of ``a`` (arrivals: rank, row)'s ``column`` in its rank's collectives, one
    take per rank."""
    out = np.empty(len(a), dtype=object)
    rows = a["row"].to_numpy(np.int64)
    for r, at in a.groupby("rank", sort=False).indices.items():
        out[at] = matched.tables[r].colls[column].to_numpy(dtype=object)[rows[at]]
    return out
