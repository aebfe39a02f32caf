"""The report's first screen: a verdict and the top findings in plain words, each computed
from the analyses the page already holds (GPU windows, idle per stream, kernel totals) and
the ops' launch times, and ranked by the share of the GPU window it concerns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..analysis.gpu_steps import GpuOps
from ..analysis.intervals import int_groups
from ..analysis.tables import Columns

MIN_IMPACT_PCT = 1  # a finding about less of the window than this is left out
FULL_QUEUE_OPS = 4  # a stream holding this many launched ops on average: the CPU runs ahead
IDLE_CAUSES = {"host_wait": "waiting for the CPU to launch work",
               "kernel_wait": "in short gaps between back-to-back ops (launch overhead)",
               "other": "in long gaps no launch explains (synchronization, data loading)"}


@dataclass
class Finding:
    """One finding: its share of the GPU window (what ranks it), its sentence, its figures."""

    impact_pct: float
    text: str
    figures: dict = field(default_factory=dict)


@dataclass
class Overview:
    """The verdict, the findings (largest first) and the figures both are made of."""

    verdict: str
    findings: list[Finding]
    figures: dict


def _window_row(t: Columns, step: int | None) -> int:
    """The temporal row of the whole window (step None), or the one step's row."""
    if step is not None:
        return 0
    return int(np.flatnonzero(np.array([s is None for s in t["step"]], bool))[0])


def queue_means(g: GpuOps, step: int | None) -> Columns:
    """Per (device, stream): the time-weighted mean number of ops launched but not yet started
    over the window (Little's law: each op's wait from its launch to its start, summed, over
    the window's length), and that window's length (ns)."""
    lo, hi, _ = g.window(step)
    ops = g.ops
    rows = g.rows(step) & ops["launched"]
    start = np.clip(ops["ts"][rows], lo, hi)
    launch = np.clip(ops["launch_ts"][rows], lo, hi)
    wait = np.maximum(start - launch, 0).astype(np.float64)
    dev, stream = ops["device"][rows], ops["stream"][rows]
    keys = sorted(set(zip(dev.tolist(), stream.tolist())))
    span = max(hi - lo, 1)
    mean = [float(wait[(dev == d) & (stream == s)].sum()) / span for d, s in keys]
    return {"device": np.array([k[0] for k in keys], np.int64),
            "stream": np.array([k[1] for k in keys], np.int64), "mean": np.array(mean)}


def main_stream(g: GpuOps, step: int | None) -> tuple[int, int]:
    """The (device, stream) whose ops run longest: the one the step's work goes through."""
    rows = g.rows(step)
    dev, stream = g.ops["device"][rows], g.ops["stream"][rows]
    if not len(dev):
        return -1, -1
    gid = int_groups(dev, stream)
    i = int(np.argmax(np.bincount(gid, g.ops["dur"][rows].astype(np.float64))))
    first = int(np.flatnonzero(gid == i)[0])
    return int(dev[first]), int(stream[first])


def _rank(rank) -> str:
    return "" if rank is None else f" (rank {rank})"


def overview(ranks: list[GpuOps], a: dict[str, list[Columns]], step: int | None,
             short=lambda n: n) -> Overview:
    """The verdict and findings from ``analyses_html.analyses``' tables (``a``); ``short``
    cuts a kernel name for the sentence."""
    rows = [(_window_row(t, step), t) for t in a["temporal"]]
    window = sum(int(t["window"][i]) for i, t in rows)
    span = max(window, 1)
    idle = sum(int(t["idle"][i]) for i, t in rows)
    comm = sum(int(t["communication"][i]) for i, t in rows)
    comm_only = sum(int(t["comm_only"][i]) for i, t in rows)
    mem_only = sum(int(t["mem_only"][i]) for i, t in rows)
    idle_pct, busy_pct = 100 * idle / span, 100 * (window - idle) / span
    where = f"ProfilerStep#{step}'s GPU window" if step is not None else "the GPU window"
    figures = {"window_ns": window, "idle_ns": idle, "idle_pct": idle_pct, "busy_pct": busy_pct,
               "comm_only_pct": 100 * comm_only / span, "mem_only_pct": 100 * mem_only / span}
    found: list[Finding] = []

    # idle, and where the busiest stream's idle time goes (HTA's idle categories; a stream that
    # runs little is idle nearly all the time, which says nothing)
    cause = ""
    by_cat: dict[str, int] = {}
    main = []
    for g, t in zip(ranks, a["idle"]):
        d, s = main_stream(g, step)
        main.append(s)
        for c, v in zip(t["category"][(t["device"] == d) & (t["stream"] == s)].tolist(),
                        t["idle"][(t["device"] == d) & (t["stream"] == s)].tolist()):
            by_cat[c] = by_cat.get(c, 0) + int(v)
    if by_cat and sum(by_cat.values()):
        top_cat = max(by_cat, key=by_cat.get)
        share = 100 * by_cat[top_cat] / sum(by_cat.values())
        figures.update(idle_cause=top_cat, idle_cause_pct=share)
        which = f"stream {main[0]}'s" if len(set(main)) == 1 else "the busiest streams'"
        cause = f"; {share:.0f} % of {which} idle time is {IDLE_CAUSES[top_cat]}"
    worst = max(rows, key=lambda r: float(r[1]["idle_pct"][r[0]]))
    spread = "" if len(rows) < 2 else \
        f" (most on rank {worst[1]['rank'][worst[0]]}: {float(worst[1]['idle_pct'][worst[0]]):.0f} %)"
    found.append(Finding(idle_pct, f"GPU idle {idle_pct:.0f} % of {where}{spread}{cause}.",
                         {"idle_pct": idle_pct}))

    # the launch queues: a full one means the CPU runs ahead of the GPU
    queues = [(g.rank, queue_means(g, step)) for g in ranks]
    best = max(((r, q["device"][i], q["stream"][i], q["mean"][i]) for r, q in queues
                for i in range(len(q["mean"]))), key=lambda x: x[3], default=None)
    if best is not None:
        r, _, s, q = best
        figures.update(queue_stream=int(s), queue_mean=float(q), queue_rank=r)
        if q >= FULL_QUEUE_OPS:
            found.append(Finding(busy_pct, f"The CPU runs ahead: stream {s}'s queue holds {q:,.0f} "
                                           f"launched ops on average{_rank(r)}; the GPU sets the pace.",
                                 {"stream": int(s), "queue_mean": float(q)}))
        elif idle_pct >= 20:
            found.append(Finding(idle_pct / 2, f"The launch queues stay nearly empty (at most "
                                               f"{q:.1f} ops waiting on average, stream {s}): the "
                                               "GPU runs what the CPU sends as soon as it arrives.",
                                 {"stream": int(s), "queue_mean": float(q)}))

    # the kernel with the most GPU time, over every rank
    totals: dict[str, list] = {}
    for t in a["kernels"]:
        for n, tot, cnt in zip(t["name"].tolist(), t["total"].tolist(), t["count"].tolist()):
            e = totals.setdefault(n, [0, 0])
            e[0] += int(tot)
            e[1] += int(cnt)
    if totals:
        name = max(totals, key=lambda n: (totals[n][0], n))
        total, count = totals[name]
        all_ops = max(sum(v[0] for v in totals.values()), 1)
        share = 100 * total / all_ops
        figures.update(top_kernel=name, top_kernel_ns=total, top_kernel_pct=share)
        found.append(Finding(100 * total / span, f"{short(name)} takes {share:.0f} % of the GPU "
                                                 f"time ({count:,} runs, {total / 1e3:,.0f} µs).",
                             {"name": name, "total_ns": total, "share_pct": share}))

    if comm:
        hidden = 100 * (comm - comm_only) / comm
        found.append(Finding(figures["comm_only_pct"], f"Communication runs alone (not hidden behind "
                             f"compute) {figures['comm_only_pct']:.0f} % of the window; "
                             f"{hidden:.0f} % of it overlaps other work.",
                             {"comm_only_pct": figures["comm_only_pct"]}))
    if mem_only:
        found.append(Finding(figures["mem_only_pct"], f"Copies and sets run alone "
                             f"{figures['mem_only_pct']:.0f} % of the window.",
                             {"mem_only_pct": figures["mem_only_pct"]}))
    if len(rows) > 1:  # compute, not busy: a collective's kernel runs while it waits for peers
        work = [(int(t["computation"][i]), t["rank"][i]) for i, t in rows]
        (lo_w, lo_r), (hi_w, hi_r) = min(work, key=lambda w: w[0]), max(work, key=lambda w: w[0])
        spread = 100 * (hi_w - lo_w) / max(span / len(rows), 1)
        found.append(Finding(spread, f"Rank {hi_r} computes {(hi_w - lo_w) / 1e3:,.0f} µs longer than "
                                     f"rank {lo_r}: the other ranks wait for it in their collectives.",
                             {"compute_spread_ns": hi_w - lo_w}))
    found.sort(key=lambda f: -f.impact_pct)
    found = [f for f in found if f.impact_pct >= MIN_IMPACT_PCT or f is found[0]]
    return Overview(_verdict(figures), found, figures)


def _verdict(f: dict) -> str:
    """One sentence: what bounds this run (the largest of busy, idle, exposed communication)."""
    queue_full = f.get("queue_mean", 0) >= FULL_QUEUE_OPS
    if f["busy_pct"] >= 80:
        return (f"GPU-bound: the GPU is busy {f['busy_pct']:.0f} % of the window"
                + (" and the CPU keeps its queue full" if queue_full else "")
                + ", so faster kernels pay off directly.")
    if f["idle_pct"] >= 50 and f["idle_pct"] >= f["comm_only_pct"]:
        why = ("though the CPU runs ahead: look for synchronizations and blocking copies"
               if queue_full else "waiting for work: the CPU side (launches, data loading, "
               "synchronization) is the bottleneck")
        return f"The GPU is starved: idle {f['idle_pct']:.0f} % of the window, {why}."
    if f["comm_only_pct"] >= 25:
        return (f"Communication-bound: communication runs alone {f['comm_only_pct']:.0f} % "
                "of the window.")
    return (f"Mixed: the GPU is busy {f['busy_pct']:.0f} % and idle {f['idle_pct']:.0f} % of "
            "the window; the findings below say where the time goes.")
