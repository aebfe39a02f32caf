"""traceaug: GPU profiler traces through Perfetto's own trace_processor.

The Python API mirrors the CLI::

    import traceaug
    with traceaug.load("trace.json.gz") as t:
        t.query("SELECT COUNT(*) FROM slice")
    traceaug.query("trace.json.gz", "SELECT ...")   # -> DataFrame
    traceaug.info("traces/")                         # -> list of dicts, one per rank
    steps, changes = traceaug.whatif("t.json.gz", scale=["comp=0.5"])  # -> two DataFrames
    summary, ops = traceaug.diff("a.json.gz", "b.json.gz")  # -> two DataFrames
"""

from __future__ import annotations

import sys

if sys.argv[:1] == ["-m"] or sys.argv[0].endswith(("/traceaug", "\\traceaug.exe")):
    from .startup import early  # the command line starting: Ctrl-C ends it cleanly

    early()

from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, NamedTuple  # noqa: E402

from .errors import TraceaugError  # noqa: E402

if TYPE_CHECKING:
    import pandas as pd

    from .commands.diff import Comparison
    from .job.api import Job
    from .trace import Trace

__version__ = "0.1.0"
__all__ = ["Counters", "KernelPatterns", "Trace", "TraceaugError", "collectives", "counters",
           "critical_path", "diff", "info", "load", "load_job", "load_ranks", "patterns", "query",
           "stragglers", "whatif", "__version__"]


def __getattr__(name: str):
    # The engine and pandas load on first use, so pass-1 worker processes start light.
    if name == "Trace":
        from .trace import Trace

        return Trace
    raise AttributeError(f"module 'traceaug' has no attribute {name!r}")


def load(path: str | Path, kind: str | None = None, **options) -> Trace:
    """Load one trace file (options: tp_bin, memory64, progress).

    ``kind`` (``traceaug.read.kinds.KINDS``) says what is kept. By default ("analysis") only
    the args traceaug's analyses use, and no flow events (as HTA's parser keeps a minimal arg
    set); "full" keeps everything for your SQL; "gpu" (GPU ops, launches, steps), "gpu_steps"
    (the same, the other events cut unparsed: ``read.skim``), "gpu_ops" (the GPU ops alone,
    skimmed: ``kernels`` without a step), "ops" (CPU ops too), "patterns"
    (as "ops", fewer calls and args), "sync" (annotations, every runtime call and
    ``cuda_sync`` events too) and "collectives" (GPU ops, launches, CPU ops and annotations,
    the NCCL args; skimmed) keep less. ``full=True`` and
    ``only="gpu"|"ops"`` are the older names of "full", "gpu", "ops"."""
    from .trace import Trace

    return Trace(path, kind=kind, **options)


def load_ranks(path: str | Path, rank: int | None = None, then=None, **options) -> dict:
    """Load a file or every rank of a directory; keyed by rank. With ``then``, each trace goes
    to ``then(rank, trace)`` (in a pool process when it pickles; else, as a lambda, in a
    thread here) and is closed right after; its result is kept instead of the trace (a result holding the
    trace gets it detached: ``job.tasks.Detached``). Without, the traces stay loaded (in
    this process, a few at a time)."""
    import pickle
    from functools import partial

    from .job.api import gather
    from .job.executor import LocalPool, pool_size, rank_peak
    from .job.ranks import select
    from .job.run import JobOptions
    from .job.tasks import then_rank
    from .trace import Trace

    kind = options.get("kind") or "analysis"
    if then is not None:
        job = JobOptions(progress=False)
        try:
            pickle.dumps(then)
        except (pickle.PicklingError, AttributeError, TypeError):  # a lambda: threads here
            files = select(path, rank)
            job.executor = LocalPool(pool_size(len(files), rank_peak(0, kind)), processes=False)
        try:
            return gather(path, partial(then_rank, then=then), kind, rank, job, options)
        finally:
            if job.executor is not None:
                job.executor.close()
    files = select(path, rank)
    if len(files) == 1:
        return {files[0].rank: Trace(files[0].path, **options)}
    options = {**options, "progress": False, "workers": 1}
    size = pool_size(len(files), rank_peak(0, kind))
    with LocalPool(size, processes=False) as pool:
        traces = list(pool.map(lambda f: Trace(f.path, **options), files))
    return {f.rank: t for f, t in zip(files, traces)}


def query(path: str | Path, sql: str, rank: int | None = None, **options) -> pd.DataFrame:
    """Run PerfettoSQL on one trace (a file, or ``rank`` of a directory) and return a DataFrame,
    as ``traceaug query`` does: the traceaug modules the SQL names (``traceaug_gpu_op``...) are
    included, and SQL reading args or flows gets a full load unless a ``kind`` is given
    (``Trace.query`` gives the types)."""
    with load_for_query(path, sql, rank, **options) as trace:
        return trace.query(sql)


def load_for_query(path: str | Path, sql: str, rank: int | None = None, **options) -> Trace:
    """The one trace ``sql`` runs on, loaded as that SQL needs (``sql_modules``) with the
    modules it names included: ``traceaug query`` and ``traceaug.query`` both load this way."""
    from .job.ranks import select
    from .sql_modules import needs_full_load
    from .trace import Trace

    files = select(path, rank)
    if len(files) > 1:
        raise TraceaugError(f"{path}: holds {len(files)} ranks; choose one with --rank "
                            "(rank= in Python)")
    if not options.keys() & {"kind", "full", "only"}:
        options["kind"] = "full" if needs_full_load(sql) else "analysis"
    trace = Trace(files[0].path, **options)
    try:
        trace.include_for(sql)
    except BaseException:
        trace.close()
        raise
    return trace


def info(path: str | Path, rank: int | None = None, **options) -> list[dict]:
    """``traceaug info`` as data: one dict per trace (rank), in rank order."""
    from .job.api import gather
    from .job.run import JobOptions
    from .job.tasks import info_rank

    job = options.pop("job", None) or JobOptions(progress=False)
    return list(gather(path, info_rank, "analysis", rank, job, options).values())


def load_job(path: str | Path, rank: int | None = None, scheduler: str | None = None,
             **options) -> Job:
    """Every rank of a job (a directory, or one trace), each read once and kept as tables:
    pass the ``Job`` to any function of ``traceaug.analyses``. ``scheduler``: a Dask
    scheduler's address (also ``scheduler_file``, ``workers`` for a local cluster of N
    processes, ``retries``, ``fail_fast``, ``skip_bad_ranks``: ``job.api.load_job``)."""
    from .job.api import load_job as load

    return load(path, rank, scheduler, **options)


class Counters(NamedTuple):
    """What ``counters`` returns: its two summary tables and the files it wrote."""

    queue: pd.DataFrame
    bandwidth: pd.DataFrame
    written: list[Path]


def counters(src: str | Path, dst: str | Path | None = None, *, series: tuple[str, ...] = (
        "bandwidth", "queue"), style: str = "traceaug", rank: int | None = None,
             tp_bin: str | None = None, progress: bool | None = None) -> Counters:
    """``traceaug counters`` as data: write ``dst`` (a file, or a directory for a directory
    ``src`` or when it ends with ``/``) with the counter tracks, unless None, and return
    the summaries, one row per rank and stream / copy kind:

    - ``queue``: ``rank, device, stream`` (int), ``mean_queued`` (time-weighted queue length
      over the trace), ``max_queued``, ``empty_pct`` (percent of the time with nothing
      queued), ``full_ms`` (time at >= 1024 queued).
    - ``bandwidth``: ``rank, device, kind`` (HtoD, DtoH, DtoD, PtoP, HtoH, Memset),
      ``bytes``, ``busy_ms`` (time with a copy running), ``mean_gbps_busy``, ``peak_gbps``.
    - ``written``: the paths written.

    ``progress``: show progress lines on stderr (default: when it is a terminal)."""
    import pandas as pd

    from .analysis.counters import QUEUE_COLUMNS
    from .analysis.tables import frame
    from .commands.counters import COUNTERS, with_rank
    from .rewrite import pipeline

    results = with_rank(pipeline.results(
        COUNTERS, src, dst, {"series": list(series), "style": style}, rank=rank, tp_bin=tp_bin,
        progress=progress))
    tables = []
    for key, columns in (("queue_summary", ("rank", *QUEUE_COLUMNS)),
                         ("bandwidth_summary", ("rank", "device", "kind", "bytes", "busy_ms",
                                                "mean_gbps_busy", "peak_gbps"))):
        parts = [frame(r[key]).infer_objects() for r in results if key in r]
        tables.append(pd.concat(parts, ignore_index=True) if parts
                      else pd.DataFrame({c: [] for c in columns}))
    return Counters(tables[0], tables[1], [Path(r["out"]) for r in results if r["out"]])


def diff(a: str | Path, b: str | Path, by: str = "name", device: str = "all",
         step: int | None = None, step_a: int | None = None, step_b: int | None = None,
         step_index: int | None = None, threshold: float = 5.0, rank: int | None = None,
         **options) -> Comparison:
    """``traceaug diff`` as data: two traces (or rank directories) compared, per step.

    Returns ``(summary, ops)``, two DataFrames (also ``.summary`` / ``.ops``):

    - ``summary``, one row per (rank, side): ``rank``, ``side`` ("a" / "b"), ``path``,
      ``steps`` (ProfilerSteps compared), ``step`` (the one compared, else None), and per step in
      ms: ``step_ms``, ``gpu_busy_ms``, ``gpu_idle_ms``, ``computation_ms``,
      ``communication_ms``, ``memory_ms``.
    - ``ops``, one row per (rank, device, key), largest |delta| first: ``rank``, ``device``
      ("cpu" / "gpu"), ``key`` (name, short name or category, per ``by``), ``status`` (added,
      removed, increased, decreased, unchanged: beyond ``threshold`` percent), ``count_a``,
      ``count_b``, ``delta_count`` (per step), ``total_a_ms``, ``total_b_ms``, ``delta_ms``,
      ``delta_pct`` (NaN when A has none), ``mean_a_ms``, ``mean_b_ms`` (NaN without calls):
      the rows ``traceaug diff --format csv`` prints.

    ``step`` / ``step_a`` / ``step_b`` / ``step_index`` choose the steps as the command's options
    do; ``options``: ``tp_bin``, ``progress`` (progress lines on stderr; default: when it is
    a terminal)."""
    from .analysis.tables import frame
    from .commands import diff as cmd

    result = cmd.run(Path(a), Path(b), by, device, step, threshold, rank, step_a=step_a,
                     step_b=step_b, step_index=step_index, **options)
    try:
        return cmd.Comparison(frame(cmd.summary_rows(result)).infer_objects(),
                              frame(cmd.all_rows(result)).infer_objects())
    finally:
        cmd.close(result)


class KernelPatterns(NamedTuple):
    """What ``patterns`` returns: every pattern, every counted occurrence, the files written."""

    patterns: pd.DataFrame
    occurrences: pd.DataFrame
    written: list[Path]


# An occurrence's engine-ns times (``analysis.patterns``), named with their unit in the API.
OCCURRENCE_TIMES = {c: f"{c}_ns" for c in ("gpu_ts", "gpu_end", "cpu_ts", "cpu_end")}


def patterns(src: str | Path, dst: str | Path | None = None, *, operator: str | None = None,
             min_len: int = 3, top_k: int = 5, rank: int | None = None,
             tp_bin: str | None = None, progress: bool | None = None) -> KernelPatterns:
    """``traceaug patterns`` as data: write ``dst`` (a file, or a directory for a directory
    ``src`` or when it ends with ``/``) with the top-k patterns of each scope overlaid,
    unless None, and return every pattern and occurrence, with a leading ``rank`` column
    (columns: ``traceaug.analysis.patterns.compute``, an occurrence's times named with their
    unit: ``gpu_ts_ns``, ``gpu_end_ns``, ``cpu_ts_ns``, ``cpu_end_ns``; ``pattern`` is n of
    ``P<n>``)."""
    import pandas as pd

    from .analysis.tables import frame
    from .commands.patterns import PATTERNS
    from .rewrite import pipeline

    results = pipeline.results(PATTERNS, src, dst, {"operator": operator, "min_len": min_len,
                                                    "top_k": top_k}, rank=rank, tp_bin=tp_bin,
                               progress=progress)
    tables = []
    for key in ("patterns", "occurrences"):
        parts = [frame(r[key]).infer_objects().rename(columns=OCCURRENCE_TIMES) for r in results]
        for r, part in zip(results, parts, strict=True):
            part.insert(0, "rank", r["rank"])
        tables.append(pd.concat(parts, ignore_index=True))
    return KernelPatterns(tables[0], tables[1], [Path(r["out"]) for r in results if r["out"]])


def critical_path(path: str | Path, step: int | None = None, annotation: str | None = None,
                  instance: int = 0, *, hta_weights: bool = False, max_gap_us: float = 1500,
                  top: int = 10, dst: str | Path | None = None, all_edges: bool = False,
                  rank: int | None = None, job: bool = False, **options
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``traceaug critical-path`` as data, with the command's options: (path, summary)
    DataFrames for one trace file (or ``rank`` of a directory): the window cut along the path,
    one row per piece, and time per category (``analysis.critical_path.frames``; the whole
    summary in ``summary.attrs["summary"]``). ``dst``: also write the command's output there
    (``all_edges`` as its ``--all-edges``). ``job``: ``--job`` (``_job_critical_path``).
    ``options``: ``tp_bin``, ``progress``."""
    from .analysis.critical_path import frames
    from .job.ranks import select
    from .trace import Trace

    if step is not None and annotation is not None:
        raise TraceaugError("choose step or annotation, not both")
    if job:
        return _job_critical_path(path, step, dst, hta_weights, tp_bin=options.get("tp_bin"))
    files = select(path, rank)
    if len(files) != 1:
        raise TraceaugError(f"{path}: {len(files)} ranks: choose one with rank=")
    gap_ns = round(max_gap_us * 1000) if max_gap_us else None
    with Trace(files[0].path, kind="sync", **options) as trace:
        out = frames(trace, step, annotation, instance, not hta_weights, gap_ns, top)
    if dst is not None:
        from .commands.critical_path import CRITICAL_PATH
        from .rewrite import pipeline

        pipeline.results(CRITICAL_PATH, files[0].path, dst,
                         {"step": step, "annotation": annotation, "instance": instance,
                          "all_edges": all_edges, "hta_weights": hta_weights,
                          "max_gap_us": max_gap_us, "top": top},
                         tp_bin=options.get("tp_bin"), progress=options.get("progress"))
    return out


def _job_critical_path(path: str | Path, step: int | None = None, dst: str | Path | None = None,
                       hta_weights: bool = False, **options) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``traceaug critical-path JOB --job`` as data: (segments: per step the job's step cut
    along its timing path across ranks (``hta_weights``: the longest path by weight), ``step,
    rank, ts_ns, end_ns, weight_ns, kind, category, event``, summing to the step; summary: per
    step and category ``step, category, ns, share_pct``, per rank in
    ``summary.attrs["ranks"]``). ``dst``: also write the merged job trace with the path
    drawn. ``options``: ``tp_bin``."""
    import pandas as pd

    from .analysis import job_path as jp
    from .commands.critical_path import job_paths
    from .job.run import JobOptions

    found = job_paths(path, dst, step, options, JobOptions(progress=False), hta_weights)
    segments = pd.concat([jp.segments(p) for p in found], ignore_index=True)
    cats, ranks = [], []
    for p in found:
        s = jp.summary(p)
        cats.append(pd.DataFrame({"step": p.step, **s["categories"]}))
        ranks.append(pd.DataFrame({"step": p.step, **s["ranks"]}))
    summary = pd.concat(cats, ignore_index=True)
    summary.attrs["ranks"] = pd.concat(ranks, ignore_index=True)
    return segments, summary


class WhatIf(NamedTuple):
    """``traceaug.whatif``'s result: per step the measured and replayed baseline times, and
    per (step, change) the predicted step time."""

    steps: pd.DataFrame
    changes: pd.DataFrame


def whatif(path: str | Path, step: int | None = None, scale: list[str] | tuple[str, ...] = (),
           no_launch_delay: bool = False, rank: int | None = None, no_stragglers: bool = False,
           **options) -> WhatIf:
    """``traceaug whatif`` as data: ``steps`` (``step, measured_ns, baseline_ns,
    baseline_error_pct, unexplained_pct``) and ``changes`` (``step, change, predicted_ns,
    speedup, saving_pct``; one row per ``scale`` entry ``"SELECTOR=FACTOR"``, for
    ``no_launch_delay``, ``no_stragglers`` (a job: every rank at each collective's median
    arrival), and ``all`` of them when more than one). A directory of ranks without ``rank``:
    the whole job, its ranks' graphs joined at every collective. ``options``: ``tp_bin``,
    ``progress``."""
    from .analysis.tables import frame
    from .commands.whatif import compute

    if isinstance(scale, str):
        scale = (scale,)
    steps, changes = compute(path, step, tuple(scale), no_launch_delay, rank,
                             tp_bin=options.get("tp_bin"), progress=options.get("progress"),
                             no_stragglers=no_stragglers)
    return WhatIf(frame(steps), frame(changes))


def collectives(path: str | Path, by: str = "instance", step: int | None = None,
                rank: int | None = None, align: bool = True, mapper=None, **options
                ) -> pd.DataFrame:
    """``traceaug collectives`` as data: the collectives of every rank of a job matched.

    ``by="instance"``: one row per matched instance (those ``rank`` takes part in): ``step``,
    ``group``, ``position``, ``seq``, ``kind``, ``bytes``, ``ranks``, ``skew_us``,
    ``straggler`` (the last arrival), ``mean_wait_us`` (of the other ranks), ``max_wait_us``,
    ``transfer_us``, ``algbw_gbps``, ``busbw_gbps``, ``cause`` ("cpu" / "gpu"),
    ``cause_late_us``, ``cause_ops``. ``by="rank"``: ``rank``, ``collectives``,
    ``total_wait_us``, ``straggler_count``, ``caused_wait_us``. ``attrs``: ``problems`` (what
    was not matched) and ``clock`` (per rank ``offset_ns``, ``residual_ns``). ``align=False``
    keeps the recorded clocks; the ranks are read as ``traceaug.load_job`` reads them (a local
    pool), or by ``mapper``, a ``map``-like callable over their paths; ``options``: tp_bin."""
    from .commands import collectives as cmd

    job = cmd.job_for(path, step, rank, align, options, mapper)
    out = cmd.collectives_frame(job, by, rank)
    out.attrs.update(problems=list(job.problems), clock=job.clock.to_dict("list"))
    return out


def stragglers(path: str | Path, step: int | None = None, rank: int | None = None,
               align: bool = True, mapper=None, **options) -> pd.DataFrame:
    """``traceaug stragglers`` as data: per step and rank ``step_us``, ``collectives``,
    ``wait_us`` (in collectives), ``straggler_count``, ``caused_wait_us`` (the others' mean
    wait for it, summed); ``attrs["findings"]``: the ranked findings in plain words,
    ``attrs["problems"]``, ``attrs["clock"]`` as ``collectives``."""
    from .commands import collectives as cmd

    job = cmd.job_for(path, step, rank, align, options, mapper)
    found, out = cmd.stragglers_frame(job, rank)
    out.attrs.update(findings=found, problems=list(job.problems), clock=job.clock.to_dict("list"))
    return out
