"""The report's first screen: a verdict and the top findings in plain words, from the analyses the page holds
and the ops' launch times, ranked by the share of the GPU window each concerns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..analysis.gpu_steps import GpuOps
from ..analysis.intervals import int_groups
from ..analysis.tables import Columns

# The titles of two of report JOB's job sections (``job_sections``) that the verdict reads: here, so that one
# trace's report imports no collective analysis
JOB_VERDICT = "job: verdict"
JOB_NCCL = "job: NCCL kernels, wait vs transfer (per rank, mean over ranks)"

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
    """Per (device, stream): ``mean``, the time-weighted mean number of ops launched but not yet started over
    the window (Little's law: each op's launch-to-start wait, summed, over the window's length)."""
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


def rank_figures(g: GpuOps, step: int | None) -> dict:
    """What ``overview`` needs of a rank's ops, computed where they are: its ``main_stream``
    (``main``) and its ``queue_means`` (``queue``)."""
    return {"main": main_stream(g, step), "queue": queue_means(g, step)}


def overview_part(g: GpuOps, step: int | None, made: dict | None = None) -> dict:
    """What ``overview`` needs of one rank (its kernel, temporal and idle tables and
    ``rank_figures``), computed where the rank is read; ``made``: the rank's ``analysis.report.part``,
    whose tables are these (held once)."""
    from ..analysis import breakdown as bd
    from ..analysis import kernels as kn

    if made is not None:
        return {"rank": g.rank, "kernels": made["kernels"]["kernels"], **made["breakdown"],
                **rank_figures(g, step)}
    return {"rank": g.rank, "kernels": kn.kernel_table(g, step), "temporal": bd.temporal(g, step),
            "idle": bd.idle_by_stream(g, step), **rank_figures(g, step)}


def overview_table(o: Overview, top: int = 3) -> dict[str, np.ndarray]:
    """The verdict, then the ``top`` findings, as a table (``kind``, ``text``): what the terminal
    and the page show first."""
    texts = [o.verdict] + [x.text for x in o.findings[:top]]
    return {"kind": np.array(["verdict"] + ["finding"] * (len(texts) - 1), dtype=object),
            "text": np.array(texts, dtype=object)}


def _rank(rank) -> str:
    return "" if rank is None else f" (rank {rank})"


def overview(a: dict[str, list], step: int | None, short: Callable[[str], str] = str,
             job: list[tuple[str, Columns]] | None = None) -> Overview:
    """The verdict and findings from the ranks' ``analyses_html.analyses`` (``a``: each name's values in rank
    order, with ``rank_figures``'); ``short`` cuts a kernel name for the sentence. ``job``: a job's section
    (``job_sections``): its verdict is the page's, its NCCL kernels' time split into wait and transfer."""
    rows = [(_window_row(t, step), t) for t in a["temporal"]]
    f = _figures(rows)
    job = dict(job or [])
    nccl = job.get(JOB_NCCL)
    split = {} if nccl is None else {
        n: (w * len(rows), t * len(rows), r) for n, w, t, r in zip(
            nccl["name"].tolist(), nccl["wait_ns"].tolist(), nccl["transfer_ns"].tolist(),
            nccl["waited_for_rank"].tolist())}  # over every rank (ns)
    found = (_idle(a["main"], a["idle"], step, rows, f) + _queues(a["rank"], a["queue"], f)
             + _top_kernel(a["kernels"], f, short, split) + _alone(f, split) + _imbalance(rows, f))
    found.sort(key=lambda x: -x.impact_pct)
    found = [x for x in found if x.impact_pct >= MIN_IMPACT_PCT or x is found[0]]
    said = job.get(JOB_VERDICT)
    verdict = " ".join(said["verdict"].tolist()) if said is not None and len(said["verdict"]) \
        else _verdict(f)
    return Overview(verdict, found, f)


def _figures(rows: list[tuple[int, Columns]]) -> dict:
    """The window's totals over every rank (ns) and their shares of it (percent)."""
    total = {c: sum(int(t[c][i]) for i, t in rows)
             for c in ("window", "idle", "communication", "comm_only", "mem_only")}
    span = max(total["window"], 1)
    return {"window_ns": total["window"], "idle_ns": total["idle"], "span_ns": span,
            "communication_ns": total["communication"], "comm_only_ns": total["comm_only"],
            "idle_pct": 100 * total["idle"] / span,
            "busy_pct": 100 * (total["window"] - total["idle"]) / span,
            "comm_only_pct": 100 * total["comm_only"] / span,
            "mem_only_pct": 100 * total["mem_only"] / span}


def _idle(streams: list[tuple[int, int]], idle: list[Columns], step: int | None,
          rows: list[tuple[int, Columns]], f: dict) -> list[Finding]:
    """The GPU's idle share and where the busiest stream's idle time goes (HTA's categories;
    a stream that runs little is idle nearly all the time, which says nothing)."""
    cause = ""
    by_cat: dict[str, int] = {}
    main = []
    for (d, s), t in zip(streams, idle):
        main.append(s)
        mine = (t["device"] == d) & (t["stream"] == s)
        for c, v in zip(t["category"][mine].tolist(), t["idle"][mine].tolist()):
            by_cat[c] = by_cat.get(c, 0) + int(v)
    if sum(by_cat.values()):
        top = max(by_cat, key=by_cat.get)
        share = 100 * by_cat[top] / sum(by_cat.values())
        f.update(idle_cause=top, idle_cause_pct=share)
        which = f"stream {main[0]}'s" if len(set(main)) == 1 else "the busiest streams'"
        cause = f"; {share:.0f} % of {which} idle time is {IDLE_CAUSES[top]}"
    i, worst = max(rows, key=lambda r: float(r[1]["idle_pct"][r[0]]))
    most = "" if len(rows) < 2 else \
        f" (most on rank {worst['rank'][i]}: {float(worst['idle_pct'][i]):.0f} %)"
    where = f"ProfilerStep#{step}'s GPU window" if step is not None else "the GPU window"
    return [Finding(f["idle_pct"], f"GPU idle {f['idle_pct']:.0f} % of {where}{most}{cause}.",
                    {"idle_pct": f["idle_pct"]})]


def _queues(ranks: list, queues: list[Columns], f: dict) -> list[Finding]:
    """The fullest launch queue (each rank's ``queue_means``): a full one means the CPU runs
    ahead of the GPU."""
    best = None
    for r, q in zip(ranks, queues):
        for s, m in zip(q["stream"].tolist(), q["mean"].tolist()):
            if best is None or m > best[2]:
                best = (r, s, m)
    if best is None:
        return []
    rank, s, q = best
    f.update(queue_stream=s, queue_mean=q, queue_rank=rank)
    if q >= FULL_QUEUE_OPS:
        return [Finding(f["busy_pct"], f"The CPU runs ahead: stream {s}'s queue holds {q:,.0f} "
                                       f"launched ops on average{_rank(rank)}; the GPU sets the pace.",
                        {"stream": s, "queue_mean": q})]
    if f["idle_pct"] >= 20:
        return [Finding(f["idle_pct"] / 2, f"The launch queues stay nearly empty (at most {q:.1f} "
                                           f"ops waiting on average, stream {s}): the GPU runs what "
                                           "the CPU sends as soon as it arrives.",
                        {"stream": s, "queue_mean": q})]
    return []


def _top_kernel(kernels: list[Columns], f: dict, short: Callable[[str], str], split: dict
                ) -> list[Finding]:
    """The GPU op name with the most GPU time over every rank, and its share of it; an NCCL kernel's time
    (``split``: its wait and transfer over every rank, ns) ranked by its transfer, the wait not work."""
    totals: dict[str, list[int]] = {}
    for t in kernels:
        for n, tot, cnt in zip(t["name"].tolist(), t["total"].tolist(), t["count"].tolist()):
            e = totals.setdefault(n, [0, 0])
            e[0] += int(tot)
            e[1] += int(cnt)
    if not totals:
        return []
    def work(n: str) -> int:
        return totals[n][0] - int(split[n][0]) if n in split else totals[n][0]

    name = max(totals, key=lambda n: (work(n), n))
    total, count = totals[name]
    share = 100 * total / max(sum(v[0] for v in totals.values()), 1)
    f.update(top_kernel=name, top_kernel_ns=total, top_kernel_pct=share)
    text = f"{short(name)} takes {share:.0f} % of the GPU time ({count:,} runs, {total / 1e3:,.0f} µs)"
    if name in split:
        wait, transfer, late = split[name]
        text += (f": {wait / 1e3:,.0f} µs of it waiting for the last rank to arrive (rank {late} most), "
                 f"{transfer / 1e3:,.0f} µs transferring")
    return [Finding(100 * work(name) / f["span_ns"], text + ".",
                    {"name": name, "total_ns": total, "share_pct": share})]


def _alone(f: dict, split: dict) -> list[Finding]:
    """Communication, and copies and sets, running with nothing else to hide them; of the NCCL kernels'
    time (``split``), how much is waiting for other ranks."""
    out = []
    if f["communication_ns"]:
        hidden = 100 * (f["communication_ns"] - f["comm_only_ns"]) / f["communication_ns"]
        wait, transfer = (sum(v[i] for v in split.values()) for i in (0, 1))
        waits = f" Of the NCCL kernels' {(wait + transfer) / 1e3:,.0f} µs, {wait / 1e3:,.0f} µs is " \
                f"waiting for the last rank to arrive and {transfer / 1e3:,.0f} µs transferring." \
            if split else ""
        out.append(Finding(f["comm_only_pct"], f"Communication runs alone (not hidden behind "
                                               f"compute) {f['comm_only_pct']:.0f} % of the window; "
                                               f"{hidden:.0f} % of it overlaps other work.{waits}",
                           {"comm_only_pct": f["comm_only_pct"]}))
    if f["mem_only_pct"]:
        out.append(Finding(f["mem_only_pct"], f"Copies and sets run alone "
                                              f"{f['mem_only_pct']:.0f} % of the window.",
                           {"mem_only_pct": f["mem_only_pct"]}))
    return out


def _imbalance(rows: list[tuple[int, Columns]], f: dict) -> list[Finding]:
    """The spread of compute time over ranks (compute, not busy: a collective's kernel runs
    while it waits for its peers)."""
    if len(rows) < 2:
        return []
    work = [(int(t["computation"][i]), t["rank"][i]) for i, t in rows]
    (lo_w, lo_r), (hi_w, hi_r) = min(work, key=lambda w: w[0]), max(work, key=lambda w: w[0])
    spread = 100 * (hi_w - lo_w) / max(f["span_ns"] / len(rows), 1)
    return [Finding(spread, f"Rank {hi_r} computes {(hi_w - lo_w) / 1e3:,.0f} µs longer than "
                            f"rank {lo_r}: the other ranks wait for it in their collectives.",
                    {"compute_spread_ns": hi_w - lo_w})]


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


# Findings with evidence (``--format json``'s ``findings``): a stable ``id``, ``impact_ns``, ``confidence``,
# ``evidence`` (rank, step, events with their timestamps, a ``traceaug open`` command that shows it) and a
# ``verify``: a ``traceaug query`` whose ``column`` returns ``expect``, the claimed figure.

# Kineto's CPU-side ProfilerStep. Not ``category <> 'gpu_user_annotation'``: the v52 engine answers
# ``name = 'ProfilerStep#10' AND depth = 0 AND category <> '...'`` with a row of another name.
STEP_CATEGORY = "user_annotation"


def _folder(path) -> str:
    """The directory of a rank's file (or object URL): the job a ``--rank`` query reads."""
    import posixpath

    return posixpath.dirname(str(path))


def _sql_text(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def verify(trace, rank: int | None, sql: str, column: str, expect: float) -> dict:
    """A ``traceaug query`` on ``trace`` (``--rank`` of a directory) whose ``column`` returns ``expect``."""
    import shlex

    argv = ["traceaug", "query", str(trace), *(["--rank", str(rank)] if rank is not None else []),
            "--format", "json", sql]
    return {"command": shlex.join(argv), "trace": str(trace), "rank": rank, "sql": sql, "column": column,
            "expect": expect}


def evidence_finding(id: str, text: str, impact_ns: float, confidence: str, **proof: dict) -> dict:
    """One finding as ``--format json`` gives it; ``proof``: its ``evidence`` and ``verify``."""
    return {"id": id, "text": text, "impact_ns": impact_ns, "confidence": confidence,
            "evidence": proof["evidence"], "verify": proof["verify"]}


def straggler_findings(matched, verdicts: list, files: dict) -> list[dict]:
    """``straggler.late_start`` of each step whose straggler started it late: its ProfilerStep start in its
    own file, less the first rank's start in the job clock and its clock offset (``files``: rank -> path)."""
    from ..analysis.job_verdict import windows

    out = []
    off = matched.offsets()
    for v in verdicts:
        if v.rank is None or v.started_after_ns <= 0 or v.rank not in files:
            continue
        win = windows(matched, v.step)
        own = {r: win[r][0] + int(off.get(r, 0)) for r in (v.rank, v.first_rank)}  # each file's clock
        base = own[v.rank] - v.started_after_ns  # the first rank's start, in this rank's clock
        sql = (f"SELECT ts + (SELECT time_base_ns FROM traceaug_meta) - {base} AS late_start_ns FROM slice "
               f"WHERE name = 'ProfilerStep#{v.step}' AND category = '{STEP_CATEGORY}' ORDER BY ts LIMIT 1")
        step_name = f"ProfilerStep#{v.step}"
        out.append(evidence_finding(
            "straggler.late_start",
            f"Rank {v.rank} started step {v.step} {v.started_after_ns / 1e3:,.1f} µs after rank "
            f"{v.first_rank} (job clock) and arrived last at {v.arrived_last} of {v.collectives} "
            f"collectives; the late start is {v.late_start_ns / 1e3:,.1f} µs of its lateness.",
            v.late_start_ns, "high",
            evidence={"rank": v.rank, "step": v.step, "first_rank": v.first_rank,
             "events": [{"rank": r, "name": step_name, "ts_ns": own[r],
                         "clock_offset_ns": int(off.get(r, 0))} for r in (v.rank, v.first_rank)],
             "open": f"traceaug open {files[v.rank]}"},
            verify=verify(_folder(files[v.rank]), v.rank, sql, "late_start_ns", v.started_after_ns)))
    return out


def top_kernel_finding(kernels: dict, files: dict, step: int | None) -> list[dict]:
    """``report.top_kernel``: the kernel with the most GPU time on one rank (the ``kernels`` table, ns), and
    its total, which the rank's ``traceaug_gpu_op`` adds up alike (the whole trace; none for ``--step``)."""
    if step is not None or not len(kernels.get("name", ())):
        return []
    i = max(range(len(kernels["name"])), key=lambda k: int(kernels["total"][k]))
    rank, name, total = kernels["rank"][i], str(kernels["name"][i]), int(kernels["total"][i])
    rank = None if rank is None else int(rank)
    path = files.get(rank, next(iter(files.values())))
    sql = f"SELECT SUM(dur) AS total_ns FROM traceaug_gpu_op WHERE name = {_sql_text(name)}"
    many = len(files) > 1
    return [evidence_finding(
        "report.top_kernel", f"{name} takes the most GPU time: {total / 1e3:,.1f} µs in "
                             f"{int(kernels['count'][i]):,} runs{_rank(rank if many else None)}.",
        total, "high", evidence={"rank": rank, "step": step, "open": f"traceaug open {path}",
                        "events": [{"name": name, "count": int(kernels["count"][i])}]},
        verify=verify(_folder(path) if many else path, rank if many else None, sql, "total_ns", total))]


def diff_findings(ranks: list) -> list[dict]:
    """``diff.step_time``: per compared rank the change of the mean step time (B - A, ns), which the mean
    ProfilerStep of B less A's returns (only when every step is compared; not of serving traces, whose steps
    are other annotations: their ``phases`` say it per phase)."""
    out = []
    for r in ranks:
        a, b = r.result["a"], r.result["b"]
        if a.get("step") is not None or not a["steps"] or not b["steps"] or r.result.get("phases"):
            continue
        mean_a, mean_b = (s["step_ns"] for s in (a, b))
        delta = mean_b - mean_a
        sql = (f"SELECT AVG(dur) - {mean_a!r} AS delta_ns FROM slice WHERE name GLOB 'ProfilerStep#*' "
               f"AND category = '{STEP_CATEGORY}'")
        few = min(a["steps"], b["steps"]) < 4  # 3 vs 3 steps cannot reach p < 0.1
        out.append(evidence_finding(
            "diff.step_time", f"The step takes {abs(delta) / 1e3:,.1f} µs ("
                              f"{100 * delta / mean_a if mean_a else 0:+.1f} %) "
                              f"{'longer' if delta > 0 else 'less'} in B ({b['steps']} steps) than in A "
                              f"({a['steps']} steps).",
            delta, "low" if few else "high",
            evidence={"rank": r.rank, "step": None,
                      "open": f"traceaug diff {r.a} {r.b} --trace ab.json.gz --open",
                      "events": [{"side": side, "name": "ProfilerStep#*", "mean_ns": m}
                                 for side, m in (("a", mean_a), ("b", mean_b))]},
            verify=verify(r.b, None, sql, "delta_ns", delta)))
    return out


def blocked_findings(summaries: list[dict]) -> list[dict]:
    """``critical_path.blocked_call``: per path the call that held the CPU longest waiting for the GPU, its
    time on the path (the call's own duration, which the trace's slice gives) and how much was blocked."""
    out = []
    for s in summaries:
        b = s.get("blocked") or {}
        if not b.get("call") or s.get("file") is None:
            continue
        call, ts, wait = b["call"][0], int(b["start_ns"][0]), int(b["wait_ns"][0])
        sql = f"SELECT dur AS wait_ns FROM slice WHERE name = {_sql_text(call)} AND ts = {ts}"
        step = s["window"].removeprefix("ProfilerStep#") if s["window"].startswith("ProfilerStep#") else None
        out.append(evidence_finding(
            "critical_path.blocked_call",
            f"{call} on the critical path of {s['window']} waited {wait / 1e3:,.1f} µs for "
            f"{b['waited_for'][0]}; GPU work covers {b['gpu_ns'][0] / 1e3:,.1f} µs of it, "
            f"{b['blocked_ns'][0] / 1e3:,.1f} µs is blocked.",
            int(b["blocked_ns"][0]), "high",
            evidence={"rank": s.get("rank"), "step": None if step is None else int(step),
             "events": [{"name": call, "ts_ns": ts, "dur_ns": wait, "streams": b["streams"][0]},
                        {"name": b["waited_for"][0]}],
             "open": f"traceaug critical-path {s['file']} cp.json.gz "
                     + (f"--step {step} " if step else "") + "--open"},
            verify=verify(s["file"], None, sql, "wait_ns", wait)))
    return out
