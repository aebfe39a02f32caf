"""Run ``traceaug diff`` over two files or two rank directories, and format the result."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import orjson

from ..analysis.diff import Side, compute, pick_steps
from ..analysis.tables import Columns, objects
from ..job.executor import LocalPool
from ..job.ranks import pair
from ..job.run import JobOptions
from ..job.storage import is_url
from ..output import cut, json_text, render_columns
from ..trace import Trace

if TYPE_CHECKING:
    import pandas as pd

    from ..read.prefetch import Prefetched

HEADLINE = (("step_ms", "step time"), ("gpu_busy_ms", "GPU busy"), ("gpu_idle_ms", "GPU idle"),
            ("computation_ms", "computation"), ("communication_ms", "communication"),
            ("memory_ms", "memory"))


@dataclass
class RankDiff:
    """The comparison of one rank."""

    rank: int | None
    a: Path
    b: Path
    result: dict


@dataclass
class DiffResult:
    ranks: list[RankDiff]
    unmatched: dict[str, list] = field(default_factory=dict)
    sides: list[tuple[Side, Side]] = field(default_factory=list)


class Comparison(NamedTuple):
    """``traceaug.diff``'s result: the headline per (rank, side) and the op rows."""

    summary: pd.DataFrame
    ops: pd.DataFrame


def run(a: Path, b: Path, by: str, device: str, step: int | None, threshold: float,
        rank: int | None = None, tp_bin: str | None = None,
        prefetched: Prefetched | None = None, step_a: int | None = None,
        step_b: int | None = None, step_index: int | None = None,
        progress: bool | None = None, job: JobOptions | None = None) -> DiffResult:
    """Compare each rank of A with the same rank of B (``job.ranks.pair``); the steps compared
    are chosen per side by ``analysis.diff.pick_steps``. One pair loads here, both sides at
    once, and keeps its sides (``--trace`` merges them); more run one task per rank on the
    job's executor (``job.tasks.diff_rank``). ``progress``: progress lines on stderr
    (default: for one pair, when it is a terminal)."""
    job = job or JobOptions()
    pairs, unmatched = pair(a, b, (job.select(a, rank), job.select(b, rank)))
    if len(pairs) > 1 or any(is_url(f.path) for f in pairs[0]):  # URLs: the task fetches them
        from ..job.api import gather
        from ..job.run import stored_size
        from ..job.tasks import diff_rank

        compare = {"by": by, "device": device, "step": step, "step_a": step_a, "step_b": step_b,
                   "step_index": step_index, "threshold": threshold}
        task = partial(diff_rank, b={fa.rank: fb for fa, fb in pairs}, compare=compare)
        sizes = {fa.rank: stored_size(fa.path, job.storage) + stored_size(fb.path, job.storage)
                 for fa, fb in pairs}  # each task reads both sides
        done = gather(a, task, "ops", job=job, options={"tp_bin": tp_bin},
                      files=[fa for fa, _ in pairs], sizes=sizes)  # (URL storage options: job.storage)
        return DiffResult(ranks=list(done.values()), unmatched=unmatched)
    (fa, fb), = pairs

    def load(path: Path) -> Side:  # both sides at once: one pass-1 worker process each
        return Side.of(Trace(path, tp_bin=tp_bin, progress=progress, workers=1, only="ops",
                             prefetched=prefetched))

    with LocalPool(2, processes=False) as pool:  # live sides: in this process
        sa, sb = pool.map(load, (fa.path, fb.path))
    out = DiffResult(ranks=[], unmatched=unmatched, sides=[(sa, sb)])
    try:
        steps = pick_steps(sa, sb, step, step_a, step_b, step_index)
        r = sa.trace.rank if sa.trace.rank is not None else fa.rank
        out.ranks.append(RankDiff(r, fa.path, fb.path, compute(sa, sb, by, device, steps, threshold)))
    except BaseException:
        close(out)
        raise
    return out


def close(result: DiffResult) -> None:
    for sa, sb in result.sides:
        sa.trace.close()
        sb.trace.close()


def headline_table(res: dict) -> Columns:
    """The headline of one rank: A, B and their difference per step."""
    rows = []
    for key, label in HEADLINE:
        va, vb = res["a"][key], res["b"][key]
        rows.append((label, round(va, 3), round(vb, 3), round(vb - va, 3),
                     round(100 * (vb - va) / va, 1) if va else None))
    names = ("per step (ms)", "A", "B", "Δ", "Δ %")
    return {n: objects([r[i] for r in rows]) for i, n in enumerate(names)}


def ops_ms(ops: Columns) -> Columns:
    """The op table with its times in ms."""
    renamed = {"total_a": "total_a_ms", "total_b": "total_b_ms", "delta": "delta_ms",
               "mean_a": "mean_a_ms", "mean_b": "mean_b_ms"}
    return {renamed.get(c, c): v / 1e6 if c in renamed else v for c, v in ops.items()}


MIN_DELTA_SHARE_PCT = 1.0  # default --min-delta: this share of A's step time


def min_delta_ns(res: dict, min_delta_us: float | None) -> float:
    """The floor an op's per-step growth must pass to count as a regression: ``min_delta_us``,
    else ``MIN_DELTA_SHARE_PCT`` % of A's step time (a change too small to move the step is noise)."""
    if min_delta_us is not None:
        return min_delta_us * 1e3
    return res["a"]["step_ms"] * 1e6 * MIN_DELTA_SHARE_PCT / 100


def regressions(result: DiffResult, pct: float, min_delta_us: float | None = None,
                gate: str = "all") -> list[str]:
    """What regressed by more than ``pct`` percent, per step, for ``--fail-on-regression``:
    a rank's step time, or (``gate`` "all") an op present on both sides whose time per step
    also grew by more than the floor (``min_delta_ns``)."""
    out = []
    for r in result.ranks:
        where = f"rank {r.rank}: " if len(result.ranks) > 1 else ""
        va, vb = r.result["a"]["step_ms"], r.result["b"]["step_ms"]
        if va > 0 and 100 * (vb - va) / va > pct:
            out.append(f"{where}step time {va:.3f} -> {vb:.3f} ms (+{100 * (vb - va) / va:.1f}%)")
        if gate == "step":
            continue
        ops = r.result["ops"]
        floor = min_delta_ns(r.result, min_delta_us)
        both = (ops["count_a"] > 0) & (ops["count_b"] > 0)
        with np.errstate(invalid="ignore"):
            worse = np.flatnonzero(both & (ops["delta_pct"] > pct) & (ops["delta"] > floor))
        if len(worse):
            i = worse[np.argmax(ops["delta_pct"][worse])]
            out.append(f"{where}{len(worse)} op(s) grew by over {floor / 1e3:g} us per step, the most "
                       f"{ops['device'][i]} {clip(ops['key'][i])} (+{ops['delta_pct'][i]:.1f}%, "
                       f"+{ops['delta'][i] / 1e3:.1f} us)")
    return out


def clip(name, width: int = 70):
    """A long key shortened to ``width`` characters (``output.cut``); a key that is not text
    (NULL) as it is."""
    return cut(name, width) if isinstance(name, str) else name


def all_rows(result: DiffResult) -> Columns:
    """Every rank's op rows with times in ms, a ``rank`` column first (``--format csv``)."""
    tables = [{"rank": np.full(len(r.result["ops"]["key"]), r.rank, dtype=object),
               **ops_ms(r.result["ops"])} for r in result.ranks]
    return {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}


def summary_rows(result: DiffResult) -> Columns:
    """The headline of every rank, one row per (rank, side): ``rank``, ``side`` (a / b),
    ``path``, ``steps``, ``step`` and the ``*_ms`` times per step."""
    rows = [{"rank": r.rank, "side": side, "path": str(getattr(r, side)), **r.result[side]}
            for r in result.ranks for side in ("a", "b")]
    return {c: objects([row[c] for row in rows]) for c in rows[0]}


def top_changes(ops: Columns, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the ``top`` largest regressions and improvements of an ``ops_ms`` table, largest
    first (it is ordered by |delta|); rows whose status is ``unchanged`` are never among them."""
    changed = ops["status"] != "unchanged"
    delta = ops["delta_ms"]
    return (np.flatnonzero(changed & (delta > 0))[:top], np.flatnonzero(changed & (delta < 0))[:top])


def render(result: DiffResult, fmt: str, top: int = 10) -> str:
    """Headline first, then the top regressions and improvements (table); everything (csv/json)."""
    if fmt == "csv":
        return render_columns(all_rows(result), "csv")
    if fmt == "json":
        data = {"ranks": [{"rank": r.rank, "a": str(r.a), "b": str(r.b),
                           "summary": {"a": r.result["a"], "b": r.result["b"]},
                           "ops": orjson.loads(render_columns(ops_ms(r.result["ops"]), "json"))}
                          for r in result.ranks],
                "unmatched_ranks": result.unmatched}
        return json_text(data)
    parts = []
    for side, ranks in result.unmatched.items():
        if ranks:
            parts.append(f"only in {side.upper()}: rank(s) {', '.join(map(str, ranks))}\n")
    cols = ["device", "key", "status", "count_a", "count_b", "total_a_ms", "total_b_ms", "delta_ms",
            "delta_pct"]
    for r in result.ranks:
        ops = ops_ms(r.result["ops"])
        ops["key"] = objects([clip(k) for k in ops["key"].tolist()])
        steps = " vs ".join(f"ProfilerStep#{h['step']}" if h["step"] is not None
                            else f"{h['steps']} ProfilerSteps" for h in (r.result["a"], r.result["b"]))
        parts.append(f"rank {r.rank}: A = {r.a}\n{' ' * len(f'rank {r.rank}: ')}B = {r.b}  ({steps})\n")
        parts.append(render_columns(headline_table(r.result), "table"))
        worse, better = top_changes(ops, top)
        counts = Counter(ops["status"].tolist())
        parts.append("status: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                                   or "no ops in the compared steps") + "\n")
        for title, rows in (("Top regressions", worse), ("Top improvements", better)):
            table = render_columns({c: ops[c][rows] for c in cols}, "table")
            parts.append(f"\n{title} (per step)\n{table}")
    return "\n".join(parts)


def explain(a: Path, b: Path, step: int | None = None, step_a: int | None = None,
            step_b: int | None = None, rank: int | None = None, tp_bin: str | None = None,
            progress: bool | None = None, job: JobOptions | None = None) -> dict:
    """``analysis.explain`` of one pair of traces (``rank`` of directories), loaded with the
    runtime calls and syncs the critical path needs; of two jobs (directories of ranks
    without ``rank``): along the jobs' paths (``explain_jobs``). Each side's ranks are
    found once, with the job's options (``--skip-bad-ranks``, storage), as its tasks read them."""
    from ..analysis.explain import explain as split

    job = job or JobOptions(progress=progress)
    files = (job.select(a, rank), job.select(b, rank))
    pairs, _ = pair(Path(a), Path(b), files)
    if step is not None:
        step_a = step_b = step
    if len(pairs) != 1:
        return explain_jobs(a, b, step_a, step_b, tp_bin, job, files)
    with Trace(pairs[0][0].path, kind="sync", tp_bin=tp_bin, progress=progress) as ta, \
            Trace(pairs[0][1].path, kind="sync", tp_bin=tp_bin, progress=progress) as tb:
        return split(ta, tb, step_a, step_b)


def explain_jobs(a: Path, b: Path, step_a: int | None, step_b: int | None,
                 tp_bin: str | None = None, job: JobOptions | None = None,
                 files: tuple[list, list] = (None, None)) -> dict:
    """``analysis.explain.split`` along the two jobs' critical paths (``analysis.job_path``;
    the steps of ``step_a`` / ``step_b``, else every step of each job; ``files``: each
    side's ranks, already selected)."""
    from ..analysis import explain as ex
    from ..analysis import job_path as jp

    sides = []
    for path, step, chosen in ((a, step_a, files[0]), (b, step_b, files[1])):
        _, found = jp.paths(jp.read(path, {"tp_bin": tp_bin}, job, files=chosen), step)
        sides.append(ex.job_path_times(found))
    return ex.split(*sides)


def render_explain(res: dict, fmt: str, top: int = 10) -> str:
    """The step-time change per category, then the ``top`` events that moved most (table);
    both tables in full, one long table with a ``section`` column (csv / json)."""
    cats, events = res["categories"], res["events"]
    if fmt != "table":
        n, m = len(cats["category"]), len(events["event"])
        rows = {"section": objects(["category"] * n + ["event"] * m),
                "category": np.r_[cats["category"], events["category"]],
                "event": objects([None] * n + events["event"].tolist()),
                "a_ns": np.r_[cats["a_ns"], events["a_ns"]],
                "b_ns": np.r_[cats["b_ns"], events["b_ns"]],
                "delta_ns": np.r_[cats["delta_ns"], events["delta_ns"]]}
        text = render_columns(rows, fmt)
        return text if text.endswith("\n") else text + "\n"
    head = (f"\nstep time along the critical paths: {res['step_a_ns'] / 1e3:,.3f} -> "
            f"{res['step_b_ns'] / 1e3:,.3f} us ({res['delta_ns'] / 1e3:+,.3f} us; the rows below "
            "sum to it, idle included)\n")
    table = render_columns({"category": cats["category"], "a_us": cats["a_ns"] / 1e3,
                            "b_us": cats["b_ns"] / 1e3, "delta_us": cats["delta_ns"] / 1e3,
                            "share_of_change_pct": cats["share_of_change_pct"]}, "table")
    k = slice(0, top)
    ev = render_columns({"event": objects([clip(e) for e in events["event"][k].tolist()]),
                         "category": events["category"][k], "a_us": events["a_ns"][k] / 1e3,
                         "b_us": events["b_ns"][k] / 1e3, "delta_us": events["delta_ns"][k] / 1e3},
                        "table")
    return head + table + f"\nEvents that moved most along the paths (per step)\n{ev}"
