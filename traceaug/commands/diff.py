"""``traceaug diff``: each rank of A against the same rank of B, per step: headline, op rows, a
CI gate, and (``--explain``) the step-time change along both critical paths."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NamedTuple

import click

import traceaug.atomic as atomic
import traceaug.paths as paths

from ..job import parts
from ..job.run import Item, Work, run
from .declare import (
    COUNT,
    JOB,
    US,
    Call,
    Command,
    Finite,
    argument,
    echo,
    fmt,
    open_checks,
    open_options,
    option,
    rank,
    said,
    serve,
    step,
)

if TYPE_CHECKING:
    from ..analysis.diff import DiffResult, RankDiff

KIND = "diff"  # "ops" with the shapes and [memory] events: one read per side gives every section
COMPARE = ("by", "device", "step", "step_a", "step_b", "step_index", "threshold", "inclusive")


class Comparison(NamedTuple):
    """``traceaug.diff``'s result: the headline per (rank, side) and the op rows."""

    summary: Any
    ops: Any


def diff_rank(sides: tuple, item: Item, compare: dict, views: dict | None = None
              ) -> tuple[RankDiff, dict]:
    """One rank's comparison (``sides``: A's and B's, loaded); ``views``: ``trace``, a file to write both
    traces into, its ``top`` changes shown (``rewrite.diff_view``); ``pair``, two files, one each;
    with each side's memory and efficiency (``sides``), from the same read."""
    from ..analysis.diff import RankDiff, compute, pick_steps

    sa, sb = sides
    steps = pick_steps(sa, sb, compare["step"], compare["step_a"], compare["step_b"],
                       compare["step_index"])
    result = compute(sa, sb, compare["by"], compare["device"], steps, compare["threshold"],
                     compare["inclusive"])
    if steps == (None, None):  # every step: serving traces' phases too (``analysis.serving_phases``)
        from ..analysis import serving_phases

        phases = serving_phases.compare(sa, sb, compare)
        if phases is not None:
            result["phases"] = phases
    views = views or {}
    if views.get("trace") or views.get("pair"):
        _views(sides, item, result, views | {"steps": steps, "by": compare["by"]})
    rank = sa.trace.rank if sa.trace.rank is not None else item.rank
    return (RankDiff(rank, item.file.path, item.other.path, result),
            _sides((sa.trace, sb.trace), compare["step"], compare.get("top", 10)))


def _sides(traces: tuple, step: int | None, top: int) -> dict:
    """A's and B's memory (``--step``, else the whole trace) and efficiency (``efficiency.part``), from the
    traces ``diff`` loaded (its load kind keeps the [memory] events and the CPU ops' shapes)."""
    from ..analysis import efficiency
    from ..analysis.memory import NO_EVENTS, rank_part, recorded

    return {"memory": tuple(rank_part(t, step, True, top) if recorded(t) else NO_EVENTS for t in traces),
            "efficiency": tuple(efficiency.part(t) for t in traces)}


def _views(sides: tuple, item: Item, result: dict, views: dict) -> None:
    """``diff_rank``'s ``views`` written."""
    from ..rewrite import diff_view

    if views.get("pair") is not None:
        diff_view.write_pair(*sides, views["steps"], views["pair"])
    if views.get("trace") is not None:
        with parts.open_both(item, "sync") as paths:  # the critical paths' load
            diff_view.write(sides, result, views, views["trace"], paths)


def explain_pair(traces: tuple, item: Item, step_a: int | None, step_b: int | None) -> dict:
    """``analysis.explain`` of one pair of traces."""
    from ..analysis.explain import explain

    return explain(*traces, step_a, step_b)


def _items(call: Call) -> tuple[list[Item], dict]:
    """Each rank of A with the same rank of B (``read.ranks.pair``), and the ranks only one
    side has."""
    from ..read.ranks import pair

    pairs, unmatched = pair(call["a"], call["b"], (call.files("a"), call.files("b")))
    return [Item(fa.rank, fa, other=fb) for fa, fb in pairs], unmatched


def explain(call: Call) -> dict:
    """The step-time change along the critical paths of one pair of traces (``rank`` of
    directories), or of two jobs along the jobs' paths."""
    from ..analysis import explain as ex
    from ..analysis import job_path as jp
    from ..analysis import job_timing

    step_a, step_b = (call["step"],) * 2 if call["step"] is not None else (call["step_a"],
                                                                           call["step_b"])
    items, _ = _items(call)
    if len(items) == 1:
        work = Work("sync", explain_pair, {"step_a": step_a, "step_b": step_b}, parts.open_both)
        return run(work, items, call.job)[items[0].rank]
    sides = []
    for name, chosen in (("a", step_a), ("b", step_b)):
        done = call.run(Work("job_path", parts.job_path, {"scales": ()}), "job_path:()", name)
        sides.append(ex.job_path_times(job_timing.paths(jp.keyed(done), chosen)[1]))
    return ex.split(*sides)


def diff(call: Call) -> DiffResult:
    """Every rank's comparison (``--trace``: one pair's merged trace written too)."""
    from ..analysis.diff import DiffResult

    items, unmatched = _items(call)
    out, pair = call.get("trace_out"), call.get("pair_out")
    views = {"trace": out, "pair": pair, "top": call.get("top", 10)}
    compare = {k: call[k] for k in COMPARE} | {"top": call.get("top", 10)}
    shown = items if len(items) == 1 or out is None and pair is None else []
    done = run(Work(KIND, diff_rank, {"compare": compare, "views": views if shown else None},
                    parts.open_pair), items, call.job)
    if not shown:  # two jobs: the view shows the rank pair that matters most, compared again with it
        chosen = _rank_shown(call, items, {r: d for r, (d, _) in done.items()})
        done |= run(Work(KIND, diff_rank, {"compare": compare, "views": views}, parts.open_pair),
                    [i for i in items if i.rank == chosen], call.job)
    return DiffResult(ranks=[d for d, _ in done.values()], unmatched=unmatched,
                      memory=_memory(done),
                      efficiency=efficiency_sections(done.values(), call["by"], call.get("top", 10)))


def _rank_shown(call: Call, items: list[Item], done: dict) -> int:
    """The rank pair of two jobs a view shows without ``--rank``, said in one line on stderr: the rank that
    made the others wait longest more per step at collectives in B than in A (``stragglers``' caused wait,
    a mean over the steps), else the one whose step time changed most (``done``: each rank's ``RankDiff``)."""
    from ..analysis import collectives as co
    from .collectives import TABLES

    ranks = [i.rank for i in items]
    caused = [co.step_table(co.match_job(co.ranked(call.run(TABLES, "collectives", name))))
              .groupby("rank")["caused_wait_ns"].mean().reindex(ranks).fillna(0.0) for name in ("a", "b")]
    more = (caused[1] - caused[0]).to_numpy()
    if more.max() > 0:
        rank = ranks[int(more.argmax())]
        why = (f"it made the other ranks wait {more.max() / 1e3:,.1f} µs more per step at collectives in B "
               "than in A, the most of any rank")
    else:
        grew = [done[r].result["b"]["step_ns"] - done[r].result["a"]["step_ns"] for r in ranks]
        i = max(range(len(ranks)), key=lambda i: abs(grew[i]))
        rank = ranks[i]
        why = (f"its step time changed most ({grew[i] / 1e3:+,.1f} µs per step); no rank made the others "
               "wait more at collectives")
    click.echo(f"traceaug: showing rank {rank} of {len(ranks)}: {why} (--rank N shows another)", err=True)
    return rank


def _memory(done: dict) -> list:
    """Each pair's memory peak and holders in A and in B (``render.memory_text.diff_sections``)."""
    from ..render.memory_text import diff_sections

    return diff_sections(*({r: m["memory"][side] for r, (_, m) in done.items()} for side in (0, 1)))


def efficiency_sections(done, by: str, top: int) -> list:
    """The changed ops' efficiency in A and in B and MFU per step (``render.efficiency_text``)."""
    from ..render.efficiency_text import diff_sections

    return diff_sections({d.rank: (d.result["ops"], m["efficiency"]) for d, m in done}, by, top)


def prepare(call: Call) -> None:
    if call["side_by_side"] or call["open_ui"] and call["trace_out"] is None:  # temporary (``compute_all``)
        from ..view.server import check_port

        check_port(call["port"])
    else:
        open_checks(call["open_ui"], call["trace_out"], call["port"], "--trace FILE")
    if call["fail_pct"] is None and (call["min_delta_us"] is not None or call["gate"] != "all"):
        raise click.UsageError("--min-delta and --gate need --fail-on-regression PCT")


def compute_all(call: Call) -> tuple[DiffResult | None, dict | None]:
    """The comparison and (``--explain``) the split along the critical paths; csv / json of
    ``--explain`` print the split alone, so the comparison is made only for another output
    (``--html``, ``--trace``, the gate). ``--open`` without ``--trace``: the merged trace is written in a
    temporary directory, removed once served (``show``) or on failure; so are ``--side-by-side``'s two."""
    if call.get("side_by_side") or call.get("open_ui") and call["trace_out"] is None:
        tmp = call.params["temporary"] = atomic.scratch_dir("traceaug-diff-")
        if call.get("side_by_side"):
            call.params["pair_out"] = (tmp / "A.json.gz", tmp / "B.json.gz")
        else:
            call.params["trace_out"] = tmp / "diff.json.gz"
    try:
        return _compute(call)
    except BaseException:
        _drop_temporary(call)
        raise


def _drop_temporary(call: Call) -> None:
    if call.get("temporary") is not None:
        atomic.drop_scratch(call["temporary"])


def _compute(call: Call) -> tuple[DiffResult | None, dict | None]:
    split = None
    if call.get("explain"):
        if call["step_index"] is not None:
            raise click.UsageError("--explain takes --step or --step-a/--step-b")
        split = explain(call)
        if call["fmt"] != "table" and all(call.get(k) is None for k in
                                          ("html_out", "trace_out", "pair_out", "fail_pct")):
            return None, split
    return diff(call), split


def show(found: tuple, call: Call) -> None:
    try:
        _show(found, call)
    finally:
        _drop_temporary(call)


def _show(found: tuple, call: Call) -> None:
    from ..analysis import serving_phases
    from ..analysis.diff import check, regressions
    from ..render.diff_text import render, render_explain

    result, split = found
    pct = call["fail_pct"]
    if pct is not None and result is not None:
        check(result, pct, call["min_delta_us"])
        serving_phases.check(result, pct, call["min_delta_us"])
    to_stderr = paths.is_stdout(call["html_out"]) or paths.is_stdout(call["trace_out"])
    top = call["top"]
    if split is not None and call["fmt"] != "table":
        echo(render_explain(split, call["fmt"]), err=to_stderr)
        if result is None:
            return
    else:
        echo(render(result, call["fmt"], top), err=to_stderr)
        if split is not None:
            echo(render_explain(split, call["fmt"], top), err=to_stderr)
    written = []  # said once every output is done: Ctrl-C before then removes them all
    if call["html_out"] is not None:
        from ..render.diff_html import write_report

        write_report(result, call["html_out"], top, split)
        written.append(call["html_out"])
    if call["trace_out"] is not None and (call.get("temporary") is None or call["side_by_side"]):
        written.append(call["trace_out"])
    atomic.commit()  # every output in place: the gate's exit below keeps them
    for path in written:
        said(f"wrote {path}")
    regressed, notes = regressions(result, call["gate"]) if pct is not None else ([], [])
    if pct is not None:
        phased = serving_phases.regressions(result, call["gate"])
        regressed, notes = regressed + phased[0], notes + phased[1]
    for line in notes:
        click.echo(f"traceaug: note: {line}", err=True)
    if call["side_by_side"]:
        serve(*call["pair_out"][:1], port=call["port"], browser=not call["no_browser"],
              pair=call["pair_out"][1])
    elif call["open_ui"]:
        serve(call["trace_out"], port=call["port"], browser=not call["no_browser"])
    if regressed:
        for line in regressed:
            click.echo(f"traceaug: regression over {pct:g}%: {line}", err=True)
        sys.exit(3)


def open_pair(call: Call) -> None:
    """``traceaug open A B``: ``traceaug diff A B --open`` (every other option its default)."""
    parsed = click.Command("diff", params=COMMAND.click_params()).make_context(
        "diff", [str(call["trace"]), str(call["b"])])
    parsed.params.update(a=call["trace"], b=call["b"], open_ui=True, port=call["port"],
                         no_browser=call["no_browser"])
    pair = Call(COMMAND, parsed.params, call.job)
    prepare(pair)
    show(compute_all(pair), pair)


def _api(found: tuple, call: Call) -> Comparison:
    """``summary``, one row per (rank, side): ``rank``, ``side`` ("a" / "b"), ``path``,
    ``steps`` (ProfilerSteps compared), ``step`` (the one compared, else None), and per step in
    ns (float64: means over the steps): ``step_ns``, ``gpu_busy_ns``, ``gpu_idle_ns``,
    ``computation_ns``, ``communication_ns``, ``memory_ns``; ``ops``, one row per (rank, device,
    key), largest |delta| first: ``rank``, ``device`` ("cpu" / "gpu"), ``key``, ``status`` (added,
    removed, increased, decreased, unchanged: beyond ``threshold`` percent), ``count_a``,
    ``count_b``, ``delta_count`` (per step), ``total_a_ns``, ``total_b_ns``, ``delta_ns`` (ns per
    step), ``delta_pct`` (NaN when A has none), ``mean_a_ns``, ``mean_b_ns`` (ns per call; NaN
    without calls), ``p_value`` (two-sided Mann–Whitney U over the per-step times): the rows
    ``--format csv`` prints. CPU ops: self time unless ``inclusive``."""
    from ..analysis.tables import frame
    from ..render.diff_text import all_rows, summary_rows

    result = found[0]
    return Comparison(frame(summary_rows(result)).infer_objects(),
                      frame(all_rows(result)).infer_objects())


def _findings(found: tuple, call: Call) -> list[dict]:
    """``diff.step_time`` per compared rank (``render.findings``), verified on B; none where the
    explain's split is printed alone (csv / json of ``--explain``)."""
    from ..render.findings import diff_findings

    return [] if found[0] is None or found[1] is not None else diff_findings(found[0].ranks)


COMMAND = Command(
    "diff", "Compare two traces (or two directories of per-rank traces): what changed from A to B.",
    (argument("a", type=paths.Input()), argument("b", type=paths.Input()),
     option("--by", type=click.Choice(["name", "short-name", "category", "op"]), default="name",
            show_default=True,
            help="Group ops by full name, name without template/arguments, or type; op: GPU ops by the "
                 "CPU op that launched them (a graph-replayed kernel's: the op that captured it)."),
     option("--device", type=click.Choice(["cpu", "gpu", "all"]), default="all",
            show_default=True, help="Compare CPU ops, GPU kernels / copies / sets, or both."),
     step("Compare only ProfilerStep#N of both (default: all steps, per step)."),
     option("--step-a", type=int,
            help="Compare ProfilerStep#N of A (with --step-b, runs numbered apart)."),
     option("--step-b", type=int, help="Compare ProfilerStep#N of B."),
     option("--step-index", type=int, help="Compare the I-th ProfilerStep of each side (0 = "
            "first, -1 = last), whatever its number."),
     rank("Only this rank."),
     option("--threshold", type=Finite(0), default=5.0, show_default=True,
            help="Per-step time change (percent) still called unchanged."),
     option("--top", type=COUNT, default=10, show_default=True,
            help="Rows of regressions/improvements."),
     option("--fail-on-regression", "fail_pct", type=Finite(0), metavar="PCT",
            help="Exit with code 3 (for CI; every output is still written) when the step time "
                 "grew by more than PCT percent, or an op present in both grew by more than PCT "
                 "percent and by more than --min-delta per step, significantly across the steps "
                 "(Mann-Whitney U, Benjamini-Hochberg q <= 0.05; with too few steps to tell, "
                 "reported, not gated); serving traces: also per phase (prefill, decode, mixed) on "
                 "both sides, its mean step latency and its ops per step of that phase."),
     option("--min-delta", "min_delta_us", type=US, metavar="US",
            help="The per-step growth (µs) an op must also pass to fail the gate "
                 "[default: 1% of the mean step time of A and B]."),
     option("--gate", type=click.Choice(["all", "step"]), default="all", show_default=True,
            help="What --fail-on-regression checks: the step time and every op, or the step "
                 "time alone (and each serving phase's step latency)."),
     option("--inclusive", is_flag=True,
            help="Time CPU ops inclusively (with the CPU ops nested in them); default: self time."),
     fmt("table: headline and top rows; csv / json: every row."),
     option("--html", "html_out", type=paths.Output(),
            help="Write a self-contained report."),
     option("--trace", "trace_out", type=paths.Output(),
            help="Write both traces into one Perfetto file (B relabelled, aligned on the step "
                 "compared; of two jobs, one rank pair: --rank N, else the one that matters most)."),
     option("--open", "open_ui", is_flag=True,
            help="Open the merged trace (--trace FILE, else a temporary one) in the Perfetto UI."),
     option("--side-by-side", is_flag=True,
            help="Open A and B in two Perfetto UI windows whose viewports move together "
                 "(the UI's TimelineSync), each on the step compared."),
     option("--explain", is_flag=True,
            help="Also split the step-time change along both critical paths, per category and "
                 "event (csv / json: only that split)."),
     *open_options(), JOB),
    compute_all, show, _api, kind=lambda p: KIND, inputs=("a", "b"), prepare=prepare,
    cli_only=("fmt", "top", "fail_pct", "min_delta_us", "gate", "html_out", "trace_out",
              "open_ui", "side_by_side", "explain", "port", "no_browser"),
    findings=_findings, schema_version=2)
