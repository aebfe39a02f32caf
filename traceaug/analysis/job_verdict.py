"""One verdict per job step, the same in ``report``, ``stragglers`` and the API: the step time, the rank
whose lateness sets it, where that lateness comes from, what the others lost, what the replay saves."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from . import collectives as co

SOURCES = ("late_start", "slow_issue", "slow_compute", "slow_transfer")


@dataclass
class Verdict:
    """One job step's answer (ns, job clock: exact integers but for averages); ``rank`` None: no rank held the
    others up. Lateness is measured at each collective ``rank`` arrived last at, behind the rank that waited
    longest there, split by ``SOURCES``; ``lost_*``: the other ranks' waits at those collectives."""

    step: int
    step_ns: int
    first_rank: int  # the rank that started the step first (the job step's start)
    last_rank: int  # the rank that ended it last
    rank: int | None
    arrived_last: int  # collectives ``rank`` arrived last at
    collectives: int  # matched collectives of the step
    started_after_ns: int  # its step start after ``first_rank``'s
    late_ns: int  # its lateness, summed over ``arrived_last``: the sum of the SOURCES
    late_start_ns: int
    slow_issue_ns: int
    slow_compute_ns: int
    slow_transfer_ns: int
    lost_total_ns: int  # every other rank's wait for it, added up (rank time)
    waiting_ranks: int
    lost_per_rank_ns: float  # lost_total_ns / waiting_ranks
    most_lost_rank: int | None
    most_lost_ns: int
    nccl_wait_ns: float  # per rank on average, the step's NCCL kernels: waiting for the last arrival
    nccl_transfer_ns: float  # ... and after it
    baseline_ns: int | None  # the job replay of the step (``whatif``), and without stragglers
    without_ns: int | None
    text: str = ""

    def row(self) -> dict:
        return asdict(self)


def verdicts(matched: co.Matched, replayed: dict | None = None) -> list[Verdict]:
    """Every step's verdict (steps in order; only steps with matched collectives). ``replayed``: per step
    (``job_replay.whatif``'s) ``(baseline_ns, no_stragglers_ns)``."""
    a = co.wait_table(matched)
    a = a.merge(matched.instances[["iid", "step"]], on="iid")
    a = a[a["step"].notna()]
    out = []
    for step, rows in a.groupby("step", sort=True):
        v = _verdict(matched, int(step), rows, (replayed or {}).get(int(step)))
        if v is not None:
            out.append(v)
    return out


def windows(matched: co.Matched, step: int) -> dict[int, tuple[int, int]]:
    """Each rank's ProfilerStep#``step`` (start, end) in the job clock."""
    off = matched.offsets()
    out = {}
    for r, t in matched.tables.items():
        s = t.steps[t.steps["step"] == step]
        if len(s):
            out[r] = (int(s["ts"].iat[0]) - int(off.get(r, 0)), int(s["end"].iat[0]) - int(off.get(r, 0)))
    return out


def _verdict(matched: co.Matched, step: int, a: pd.DataFrame, replay: tuple | None) -> Verdict | None:
    win = windows(matched, step)
    if not win:
        return None
    first = min(win, key=lambda r: (win[r][0], r))
    last = max(win, key=lambda r: (win[r][1], -r))
    others = a[a["rank"].ne(a["straggler"]).fillna(True).astype(bool)]
    caused = others.groupby("straggler")["wait_ns"].sum()
    n = int(a["iid"].nunique())
    ranks = a["rank"].nunique()
    kernel = a.groupby("rank")[["wait_ns"]].sum().assign(
        transfer_ns=(a["end_ns"] - a["last_ns"]).clip(lower=0).groupby(a["rank"]).sum())
    base = {"step": step, "step_ns": win[last][1] - win[first][0], "first_rank": first,
            "last_rank": last, "collectives": n,
            "nccl_wait_ns": float(kernel["wait_ns"].sum()) / ranks,
            "nccl_transfer_ns": float(kernel["transfer_ns"].sum()) / ranks,
            "baseline_ns": None if replay is None else int(replay[0]),
            "without_ns": None if replay is None else int(replay[1])}
    if not len(caused) or caused.max() <= 0:
        v = Verdict(rank=None, arrived_last=0, started_after_ns=0, late_ns=0, **dict.fromkeys(
            [f"{s}_ns" for s in SOURCES], 0), lost_total_ns=0, waiting_ranks=0,
            lost_per_rank_ns=0.0, most_lost_rank=None, most_lost_ns=0, **base)
        v.text = text(v)
        return v
    r = int(caused[caused == caused.max()].index.min())
    mine = a[a["straggler"] == r]
    split = dict.fromkeys(SOURCES, 0)
    for _, at in mine.groupby("iid", sort=False):
        for k, ns in _lateness(a, at, r, win).items():
            split[k] += ns
    lost = others[others["straggler"] == r].groupby("rank")["wait_ns"].sum()
    lost = lost[lost > 0]
    most = int(lost[lost == lost.max()].index.min()) if len(lost) else None
    v = Verdict(rank=r, arrived_last=int(mine["iid"].nunique()),
                started_after_ns=win[r][0] - win[first][0] if r in win else 0,
                late_ns=sum(split.values()), **{f"{k}_ns": ns for k, ns in split.items()},
                lost_total_ns=int(lost.sum()), waiting_ranks=len(lost),
                lost_per_rank_ns=float(lost.mean()) if len(lost) else 0.0,
                most_lost_rank=most, most_lost_ns=int(lost.max()) if len(lost) else 0, **base)
    v.text = text(v)
    return v


def _lateness(a: pd.DataFrame, at: pd.DataFrame, r: int, win: dict) -> dict[str, int]:
    """Rank ``r``'s lateness at one collective (``at``: its arrivals) behind the rank that waited longest
    (``q``), from the last collective both ended before it (else their step starts): its start
    (``late_start``) or that collective's end (``slow_transfer``) later, then the launch call
    (``slow_issue``), then the GPU's arrival after it (``slow_compute``; all of it without a launch)."""
    me = at[at["rank"] == r].iloc[0]
    q_row = at[at["rank"] != r].sort_values(["arrival_ns", "rank"]).iloc[0]
    q = int(q_row["rank"])
    prev = {}
    for who, row in ((r, me), (q, q_row)):
        before = a[(a["rank"] == who) & (a["end_ns"] <= row["arrival_ns"]) & (a["iid"] != row["iid"])]
        prev[who] = before.set_index("iid")["end_ns"]
    shared = prev[r].index.intersection(prev[q].index)
    out = dict.fromkeys(SOURCES, 0)
    if len(shared):
        last = max(shared, key=lambda i: (prev[r][i], prev[q][i]))
        start = {r: int(prev[r][last]), q: int(prev[q][last])}
        out["slow_transfer"] = start[r] - start[q]
    elif r in win and q in win:
        start = {r: win[r][0], q: win[q][0]}
        out["late_start"] = start[r] - start[q]
    else:  # a rank without the step: its arrival alone
        start = {r: int(me["arrival_ns"]), q: int(q_row["arrival_ns"])}
        out["slow_compute"] = start[r] - start[q]
    launch = {who: row["launch_ns"] for who, row in ((r, me), (q, q_row))}
    arrival = {r: int(me["arrival_ns"]), q: int(q_row["arrival_ns"])}
    if all(x is not pd.NA and x == x for x in launch.values()):
        out["slow_issue"] = (int(launch[r]) - start[r]) - (int(launch[q]) - start[q])
        out["slow_compute"] += (arrival[r] - int(launch[r])) - (arrival[q] - int(launch[q]))
    else:
        out["slow_compute"] += (arrival[r] - start[r]) - (arrival[q] - start[q])
    return out


def _us(ns: float) -> str:
    """A time in ns as people read it, in µs."""
    return f"{ns / 1e3:,.1f} µs"


def text(v: Verdict) -> str:
    """The verdict in plain words, whole (never cut)."""
    head = (f"Step {v.step} took {_us(v.step_ns)} (job clock: rank {v.first_rank}'s step start to rank "
            f"{v.last_rank}'s step end).")
    nccl = (f" The step's NCCL kernels ran {_us(v.nccl_wait_ns + v.nccl_transfer_ns)} per rank on average: "
            f"{_us(v.nccl_wait_ns)} waiting for the last rank to arrive, {_us(v.nccl_transfer_ns)} "
            "transferring.")
    if v.rank is None:
        return head + " No rank held the others up: every collective's ranks arrived together." + nccl
    names = {"late_start": "late step start", "slow_issue": "slow issue (its CPU launched the "
             "collective later)", "slow_compute": "slow compute (its GPU reached it later after the "
             "launch)", "slow_transfer": "slow transfer (its previous collective ended later there)"}
    where = "; ".join(f"{names[k]} {_us(getattr(v, f'{k}_ns'))}" for k in SOURCES)
    neg = " (a negative part: earlier there than that rank)" if min(
        getattr(v, f"{k}_ns") for k in SOURCES) < 0 else ""
    started = f", having started the step {_us(v.started_after_ns)} after rank {v.first_rank}" \
        if v.started_after_ns > 0 else ""
    out = (f"{head} Rank {v.rank} sets it: it arrived last at {v.arrived_last} of {v.collectives} "
           f"collectives{started}. Its lateness there, behind the rank that waited longest at each, "
           f"is {_us(v.late_ns)}: {where}{neg}. The other "
           f"ranks lost {_us(v.lost_total_ns)} waiting for it in total (each waiting rank's wait at "
           f"those collectives, added up over the {v.waiting_ranks} ranks that waited), "
           f"{_us(v.lost_per_rank_ns)} per waiting rank on average, the most rank "
           f"{v.most_lost_rank} ({_us(v.most_lost_ns)}).{nccl}")
    if v.without_ns is None:
        return out
    saved = v.baseline_ns - v.without_ns
    pct = 100 * saved / v.baseline_ns if v.baseline_ns else 0.0
    return out + (
        f" Replayed with every rank at each collective's median arrival (whatif --no-stragglers), "
        f"the step would take {_us(v.without_ns)}, {_us(saved)} ({pct:.1f} %) less. Lost and "
        f"saveable differ: the lost time is rank time, added up over ranks that waited side by side "
        f"(the same wall time counted once per rank), while the replay gives the step's wall time; "
        f"and the replay moves only the collectives' arrivals, keeping every rank's step start and "
        f"its own work" + (f", so rank {v.rank}'s {_us(v.started_after_ns)} late start stays in "
                           "the step." if v.started_after_ns > 0 else "."))
