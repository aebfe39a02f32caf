"""The ``traceaug`` command line: one click group, one function per command."""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import signal
import sys
import threading
import types
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from . import __version__, atomic, guard, interrupt, paths
from .errors import SumTooLarge, TraceaugError
from .memory import return_freed_promptly
from .output import FORMATS, render_columns
from .sql_modules import needs_full_load

if TYPE_CHECKING:
    from .read.prefetch import Prefetched

TP_BIN_HELP = "Use this native trace_processor_shell instead of the embedded wasm engine."


MESSAGE_LIMIT = 299  # characters of an error line
INT64_MAX = 2**63 - 1


class Finite(click.FloatRange):
    """A float option that is a finite number (click's ranges let nan and inf through)."""

    name = "number"

    def convert(self, value, param, ctx) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


# The option types of numbers, each defined once: row counts and lengths (kept to int64:
# numpy takes them), and times in µs (their ns fit in int64).
COUNT = click.IntRange(0, INT64_MAX)
POSITIVE = click.IntRange(1, INT64_MAX)
US = Finite(0, 9.2e15)
PERCENT = Finite()


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """An error message as one line of at most ``limit`` characters."""
    text = " ".join(paths.shown(str(text)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TraceaugCommand(click.Command):
    """Every command: its outputs checked against its inputs before it starts (``guard``),
    its files put in place all together when it succeeds and none when it fails
    (``atomic.all_or_none``), and OS errors said in one line naming the file. Declare trace
    arguments with ``paths.Input()`` / ``paths.Output()`` to get this."""

    def invoke(self, ctx: click.Context):
        inputs, outputs, rank_dirs = paths.arguments(self, ctx.params)
        paths.check_stdout(outputs, rank_dirs)
        guard.check(inputs, outputs, rank_dirs)
        new_dirs = [d for d in rank_dirs if not d.exists()]
        try:
            with atomic.all_or_none():
                return super().invoke(ctx)
        except SumTooLarge as e:  # raised where the input's name is not known
            raise TraceaugError(f"{' / '.join(map(str, inputs)) or 'traceaug'}: {e}") from None
        except OSError as e:
            target = e.filename or next((str(o) for o in outputs + rank_dirs), None) or "traceaug"
            raise TraceaugError(f"{target}: {e.strerror or e}") from None
        except MemoryError:
            raise TraceaugError(f"{inputs[0] if inputs else 'traceaug'}: out of memory") from None
        finally:
            for d in new_dirs:  # a rank directory this run made and left empty (it failed)
                with contextlib.suppress(OSError):
                    d.rmdir()


def _print(text: str, err: bool = False) -> None:
    """Print a command's text as it is; a stdout that cannot take it (a full disk,
    ``> /dev/full``) is named in the one-line error, not blamed on an output file."""
    if (sys.stderr if err else sys.stdout) is None:  # closed at the start (>&-)
        raise TraceaugError(f"{'stderr' if err else 'stdout'}: is closed; nothing printed")
    try:
        click.echo(text, nl=False, err=err)
    except OSError as e:
        if e.filename is None:
            e.filename = "stderr" if err else "stdout"
        raise


class _Group(click.Group):
    """Turns every user-facing error into one line on stderr and exit code 1, and Ctrl-C /
    SIGTERM into exit 130 / 143; removes spooled inputs whatever happens."""

    command_class = TraceaugCommand

    def make_context(self, *args, **kwargs) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt as e:  # parsing the group's options: click says "Aborted!"
            _interrupted(e)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TraceaugError as e:
            click.echo(one_line(f"traceaug: error: {e}"), err=True)
            sys.exit(1)
        except KeyboardInterrupt as e:
            _interrupted(e)
        finally:
            paths.cleanup()


def _interrupted(e: KeyboardInterrupt) -> NoReturn:
    """Ctrl-C / SIGTERM said in one line; exit 130 / 143."""
    click.echo("traceaug: interrupted", err=True)
    sys.exit(getattr(e, "exit_code", 130))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceaug")
@click.option("--tp-bin", envvar="TRACEAUG_TP_BIN", type=click.Path(exists=True, dir_okay=False),
              help=TP_BIN_HELP + " [env: TRACEAUG_TP_BIN]")
@click.pass_context
def main(ctx: click.Context, tp_bin: str | None) -> None:
    """Read GPU profiler traces through Perfetto's trace_processor, offline."""
    return_freed_promptly()
    ctx.obj = {"tp_bin": tp_bin}


def _options(ctx: click.Context) -> dict:
    return {"tp_bin": ctx.obj.get("tp_bin")}


def _prefetch(*inputs: Path, kind: str = "analysis", each_rank: bool = False,
              rank: int | None = None) -> Prefetched:
    """Start pass 1 of the inputs in child processes for a load of ``kind`` before this one
    imports the engine (``each_rank``: of a lone directory's ranks, ``rank`` or every one,
    as the analyses load them: ``prefetch.start_ranks``); then import the perfetto API
    without pandas (every command prints numpy columns)."""
    from .read import prefetch

    inputs = tuple(i for i in inputs if isinstance(i, Path))  # URLs: each task fetches its own
    if each_rank and len(inputs) == 1 and inputs[0].is_dir():
        started = prefetch.start_ranks(inputs[0], rank, kind)
    else:
        started = prefetch.start(list(inputs), kind=kind)
    _perfetto_api_without_pandas()
    return started


def _perfetto_api_without_pandas() -> None:
    """Import the perfetto API with pandas hidden. It imports pandas at once (a third of a
    second) only for ``as_pandas_dataframe``, which traceaug never calls: ``Trace.query``
    builds its DataFrames itself, importing pandas then (``diff --html``)."""
    if "pandas" in sys.modules or "perfetto.common.query_result_iterator" in sys.modules:
        return
    for name in _LAZY:
        _import_lazily(name)
    sys.modules["pandas"] = None  # type: ignore[assignment]  # "import pandas" fails at once
    try:
        import perfetto.common.query_result_iterator  # noqa: F401
    finally:
        del sys.modules["pandas"]


# The perfetto API imports these at once (with ssl, email and socket: a third of its import
# time) only to download or talk to a native trace_processor_shell over HTTP, which the wasm
# engine never does: they run on first use.
_LAZY = ("http.client", "urllib.request")


class _LazyModule(types.ModuleType):
    """A module whose code runs when an attribute it lacks is first read. Unlike
    ``importlib.util.LazyLoader``, reading ``__spec__`` (as ``import http.client`` does when
    the module is already in ``sys.modules``) does not run it."""

    # Reentrant: running one lazy module reads another (urllib.request uses http.client).
    _lock = threading.RLock()

    def __getattr__(self, attr: str):
        with _LazyModule._lock:  # another thread waits here until the module has run
            if not self.__dict__.get("_traceaug_ran"):
                self.__dict__["_traceaug_ran"] = True
                self.__spec__.loader.exec_module(self)
                self.__class__ = types.ModuleType  # only once whole: no half-run module seen
        try:
            return self.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}") from None


def _import_lazily(name: str) -> None:
    """Put ``name`` in ``sys.modules`` (and on its package) unrun, as a ``_LazyModule``."""
    import importlib.util

    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _LazyModule
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)


def _job_option(name: str, **kw):
    """One job option, kept in ``ctx.meta["job"]`` rather than passed to the command."""
    def keep(ctx: click.Context, param: click.Parameter, value):
        ctx.meta.setdefault("job", {})[param.name] = value
        return value
    return click.option(name, expose_value=False, callback=keep, **kw)


def _job_options(command):
    """Where a directory's ranks run and what a failing rank does: every command that
    takes a directory of ranks."""
    for name, kw in reversed((
            ("--scheduler", {"metavar": "ADDRESS", "help": "Run the ranks on this Dask scheduler "
                             "(default: Dask's DASK_SCHEDULER_ADDRESS / config, else this machine)."}),
            ("--scheduler-file", {"metavar": "FILE",
                                  "help": "Run the ranks on the Dask scheduler this file names."}),
            ("--workers", {"type": click.IntRange(1, 4096), "help": "Run the ranks on a Dask "
                           "cluster of N local processes started for this run."}),
            ("--retries", {"type": click.IntRange(0, 100), "default": 1, "show_default": True,
                           "help": "Tries again of a rank that fails."}),
            ("--fail-fast", {"is_flag": True, "help": "Stop at the first rank that fails."}),
            ("--skip-bad-ranks", {"is_flag": True, "help": "Go on without rank files that cannot "
                                  "be read (dangling symlinks, FIFOs, empty files), named on stderr."}),
            ("--storage-option", {"multiple": True, "metavar": "KEY=VALUE",
                                  "help": "An fsspec storage option for URL inputs and outputs "
                                  "(s3://...: e.g. endpoint_url=..., anon=true); repeatable."}))):
        command = _job_option(name, **kw)(command)
    return command


def _job(ctx: click.Context):
    """The command's ``job.run.JobOptions``."""
    from .job.run import JobOptions
    from .job.storage import parse_options, use

    given = ctx.meta.get("job", {})
    storage = parse_options(given.get("storage_option") or ())
    use(storage)  # the outputs' uploads too
    return JobOptions(scheduler=given.get("scheduler"), scheduler_file=given.get("scheduler_file"),
                      workers=given.get("workers"), retries=given.get("retries", 1),
                      fail_fast=bool(given.get("fail_fast")),
                      skip_bad=bool(given.get("skip_bad_ranks")),
                      storage=storage)


def _open_options(command):
    """``--port`` and ``--no-browser``, the same on ``open`` and on every ``--open``."""
    command = click.option("--no-browser", is_flag=True,
                           help="Only print the URL (on stderr); do not start a browser.")(command)
    return click.option("--port", type=click.IntRange(0, 65535), default=0,
                        help="Port on 127.0.0.1 for the UI (default: a free one).")(command)


@main.command()
@click.argument("trace", type=paths.Input())
@click.argument("sql", required=False)
@click.option("-f", "--file", "sql_file", type=click.Path(allow_dash=True),
              help="Read the SQL from a file (- for stdin).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Output format (NULL: empty in csv, null in json; inf as \"inf\" in json).")
@click.option("--rank", type=int, help="For a directory: the rank to query.")
@click.option("--full/--lean", default=None,
              help="Load every arg and flow event, or only what analyses read. "
                   "[default: full when the SQL mentions args, flows or other modules]")
@click.pass_context
def query(ctx: click.Context, trace: Path, sql: str | None, sql_file, fmt: str,
          rank: int | None, full: bool | None) -> None:
    """Run PerfettoSQL on TRACE (timestamps are ns from `traceaug_meta.time_base_ns`)."""
    from . import load_for_query
    from .read import source

    if sql_file is not None:
        try:
            sql = source.read_side(sql_file, "an SQL file").decode()
        except UnicodeDecodeError as e:
            raise TraceaugError(f"{sql_file}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not sql:
        raise click.UsageError("give the SQL as an argument or with -f FILE")
    if full is None:
        full = needs_full_load(sql)
    kind = "full" if full else "analysis"
    prefetched = _prefetch(trace, kind=kind)
    with load_for_query(trace, sql, rank, kind=kind, prefetched=prefetched, **_options(ctx)) as t:
        _print(render_columns(t.columns(sql), fmt))


@main.command()
@click.argument("trace", type=paths.Input(urls=True))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Output format.")
@click.option("--rank", type=int, help="For a directory: only this rank.")
@_job_options
@click.pass_context
def info(ctx: click.Context, trace: Path, fmt: str, rank: int | None) -> None:
    """Devices, ranks, steps, time span, event counts, streams and Perfetto's warnings (a
    directory: one row per rank and a job line)."""
    from . import info as trace_info
    from .commands.info import render

    prefetched = _prefetch(trace)
    records = trace_info(trace, rank=rank, prefetched=prefetched, job=_job(ctx), **_options(ctx))
    _print(paths.shown(render(records, fmt)))  # stdin, not its spool


def _rewriter_options(command):
    """``--summary-only``, ``--open``, ``--port`` and ``--no-browser``: every rewriter's."""
    command = _open_options(command)
    command = click.option("--open", "open_ui", is_flag=True,
                           help="Open OUT in the Perfetto UI when done.")(command)
    return click.option("--summary-only", is_flag=True,
                        help="Print the summary; write no trace.")(command)


def _rewriter_arguments(src: Path, dst, summary_only: bool, open_ui: bool, port: int,
                        no_browser: bool) -> dict | bool:
    """What every rewriter command (counters, patterns, critical-path) asks of IN and OUT;
    returns ``pipeline.run``'s ``open_ui`` (the UI server's options, or False)."""
    if dst is None and not summary_only:
        raise click.UsageError("give OUT, or --summary-only")
    _open_checks(open_ui, None if summary_only or not isinstance(src, Path) or src.is_dir() else dst,
                 port, "one output file")
    return {"port": port, "browser": not no_browser} if open_ui else False


def _print_summary(text: str, dst) -> None:
    """A rewriter's summary on stdout, or on stderr when OUT is ``-`` (the trace is there)."""
    _print(paths.shown(text), err=paths.is_stdout(dst))


def _series(value: str) -> tuple[str, ...]:
    from .analysis.counters import SERIES

    chosen = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [v for v in chosen if v not in SERIES]
    if bad or not chosen:
        raise click.BadParameter(f"choose from {', '.join(SERIES)} (comma-separated)")
    return chosen


@main.command()
@click.argument("src", metavar="IN", type=paths.Input(urls=True))
@click.argument("dst", metavar="OUT", required=False, type=paths.Output(rank_dir=True, urls=True))
@click.option("--series", default="bandwidth,queue", show_default=True,
              help="Which counters: bandwidth, queue, or both.")
@click.option("--style", type=click.Choice(["traceaug", "hta"]), default="traceaug", show_default=True,
              help="hta: HTA's exact event shapes, for scripts built on HTA's output.")
@click.option("--rank", type=int, help="For a directory: only this rank.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Format of the summary printed on stdout.")
@click.option("--keep-bytes", is_flag=True,
              help="Keep every original byte. By default events the Perfetto UI would drop "
                   "(partly overlapping, on negative thread ids) are moved so that it shows them.")
@_rewriter_options
@_job_options
@click.pass_context
def counters(ctx: click.Context, src: Path, dst: str | None, series: str, style: str,
             rank: int | None, fmt: str, summary_only: bool, open_ui: bool, keep_bytes: bool,
             port: int, no_browser: bool) -> None:
    """Write OUT: a copy of IN with memory-bandwidth and queue-length counter tracks.

    IN and OUT may be directories of per-rank traces (one output per rank, same names);
    an OUT ending in / is a directory (made if missing) that gets IN's name.
    """
    open_ui = _rewriter_arguments(src, dst, summary_only, open_ui, port, no_browser)
    prefetched = _prefetch(src, kind="gpu")
    from .commands.counters import run

    text = run(src, None if summary_only else dst, _series(series), style, rank, fmt,
               prefetched=prefetched, keep_bytes=keep_bytes,
               open_ui=open_ui, job=_job(ctx),
               **_options(ctx))
    _print_summary(text, dst)


@main.command("diff")
@click.argument("a", type=paths.Input(urls=True))
@click.argument("b", type=paths.Input(urls=True))
@click.option("--by", type=click.Choice(["name", "short-name", "category"]), default="name",
              show_default=True, help="Group ops by full name, name without template/arguments, or type.")
@click.option("--device", type=click.Choice(["cpu", "gpu", "all"]), default="all", show_default=True,
              help="Compare CPU ops, GPU kernels / copies / sets, or both.")
@click.option("--step", type=int, help="Compare only ProfilerStep#N of both (default: all steps, per step).")
@click.option("--step-a", type=int, help="Compare ProfilerStep#N of A (with --step-b, runs numbered apart).")
@click.option("--step-b", type=int, help="Compare ProfilerStep#N of B.")
@click.option("--step-index", type=int,
              help="Compare the I-th ProfilerStep of each side (0 = first, -1 = last), whatever its number.")
@click.option("--rank", type=int, help="Only this rank.")
@click.option("--threshold", type=Finite(0), default=5.0, show_default=True,
              help="Per-step time change (percent) still called unchanged.")
@click.option("--top", type=COUNT, default=10, show_default=True, help="Rows of regressions/improvements.")
@click.option("--fail-on-regression", "fail_pct", type=Finite(0), metavar="PCT",
              help="Exit with code 3 (for CI; every output is still written) when the step time "
                   "grew by more than PCT percent, or an op present in both grew by more than PCT "
                   "percent and by more than --min-delta per step.")
@click.option("--min-delta", "min_delta_us", type=US, metavar="US",
              help="The per-step growth (µs) an op must also pass to fail the gate "
                   "[default: 1% of A's step time].")
@click.option("--gate", type=click.Choice(["all", "step"]), default="all", show_default=True,
              help="What --fail-on-regression checks: the step time and every op, or the step "
                   "time alone.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="table: headline and top rows; csv / json: every row.")
@click.option("--html", "html_out", type=paths.Output(urls=True), help="Write a self-contained report.")
@click.option("--trace", "trace_out", type=paths.Output(),
              help="Write both traces into one Perfetto file (B relabelled, aligned at the first step).")
@click.option("--open", "open_ui", is_flag=True, help="Open the --trace file in the Perfetto UI.")
@click.option("--explain", is_flag=True,
              help="Also split the step-time change along both critical paths, per category and "
                   "event (csv / json: only that split).")
@_open_options
@_job_options
@click.pass_context
def diff_command(ctx: click.Context, a: Path, b: Path, by: str, device: str, step: int | None,
                 step_a: int | None, step_b: int | None, step_index: int | None,
                 rank: int | None, threshold: float, top: int, fail_pct: float | None,
                 min_delta_us: float | None, gate: str, fmt: str,
                 html_out: Path | None, trace_out: Path | None, open_ui: bool, port: int,
                 no_browser: bool, explain: bool = False) -> None:
    """Compare two traces (or two directories of per-rank traces): what changed from A to B."""
    _open_checks(open_ui, trace_out, port, "--trace FILE")
    if fail_pct is None and (min_delta_us is not None or gate != "all"):
        raise click.UsageError("--min-delta and --gate need --fail-on-regression PCT")
    to_stderr = paths.is_stdout(html_out) or paths.is_stdout(trace_out)  # stdout holds a file
    prefetched = _prefetch(a, b, kind="ops")
    from .commands import diff as cmd

    if explain:
        if step_index is not None:
            raise click.UsageError("--explain takes --step or --step-a/--step-b")
        split = cmd.explain(a, b, step, step_a, step_b, rank, job=_job(ctx), **_options(ctx))
        if fmt != "table":
            click.echo(cmd.render_explain(split, fmt), nl=False)
            return

    result = cmd.run(a, b, by, device, step, threshold, rank, prefetched=prefetched,
                     step_a=step_a, step_b=step_b, step_index=step_index, job=_job(ctx),
                     **_options(ctx))
    try:
        _print(cmd.render(result, fmt, top), err=to_stderr)
        if explain:
            _print(cmd.render_explain(split, fmt, top), err=to_stderr)
        written = []  # said once every output is done: Ctrl-C before then removes them all
        if html_out is not None:
            from .report.diff_html import write_report

            write_report(result, html_out, top)
            written.append(html_out)
        if trace_out is not None:
            from .rewrite.merge import write_merged

            if len(result.ranks) != 1:
                raise TraceaugError("--trace merges one pair of traces: choose a rank with --rank")
            sa, sb = result.sides[0]
            write_merged(sa, sb, trace_out)
            written.append(trace_out)
        atomic.commit()  # every output in place: the gate's exit below keeps them
        for path in written:
            click.echo(f"wrote {paths.shown(str(path))}", err=True)
        regressed = (cmd.regressions(result, fail_pct, min_delta_us, gate)
                     if fail_pct is not None else [])
    finally:
        cmd.close(result)
    if open_ui:
        _open(trace_out, port=port, browser=not no_browser)
    if regressed:
        for line in regressed:
            click.echo(f"traceaug: regression over {fail_pct:g}%: {line}", err=True)
        sys.exit(3)


def _open_checks(open_ui: bool, out, port: int, needs: str) -> None:
    """What an ``--open`` asks, checked before any work: one output file to open (``out``;
    None or stdout cannot be opened) and a ``--port`` that can be served on."""
    if not open_ui:
        return
    if out is None or paths.is_stdout(out):
        raise click.UsageError(f"--open needs {needs} (not stdout)")
    from .view.server import check_port

    check_port(port)


def _open(trace: Path, port: int = 0, browser: bool = True, name: str | None = None) -> None:
    from .view.server import serve

    atomic.commit()  # this run's outputs in place before the UI reads one
    serve(trace, port=port, browser=browser, announce=lambda m: click.echo(m, err=True), name=name)


@main.command("open")
@click.argument("trace", type=paths.Input())
@_open_options
def open_command(trace: Path, port: int, no_browser: bool) -> None:
    """Open TRACE in the Perfetto UI bundled with traceaug (offline, 127.0.0.1 only); a
    directory of ranks opens as one trace (what `traceaug merge` writes)."""
    from .read.inputs import trace_input

    if trace.is_dir():
        import tempfile

        from .rewrite.merge_job import write_job

        with tempfile.TemporaryDirectory(prefix="traceaug-open-") as tmp:
            merged = Path(tmp) / f"{trace.name}.merged.json.gz"
            write_job(trace, merged)
            _open(merged, port=port, browser=not no_browser, name=merged.name)
        return
    # an nsys export is served as its temporary conversion, under the export's own name
    _open(trace_input(trace), port=port, browser=not no_browser, name=Path(trace).name)


@main.command("convert")
@click.argument("src", metavar="REPORT", type=paths.Input())
@click.argument("dst", metavar="OUT", type=paths.Output())
@click.option("--open", "open_ui", is_flag=True, help="Open OUT in the Perfetto UI when done.")
@_open_options
def convert_command(src: Path, dst: Path, open_ui: bool, port: int, no_browser: bool) -> None:
    """Convert an Nsight Systems SQLite export (`nsys export --type sqlite`) to a Chrome JSON
    trace in Kineto conventions (OUT.json or OUT.json.gz)."""
    _open_checks(open_ui, dst, port, "OUT to be a file")
    from .commands.convert import run as convert_run

    _print(paths.shown(convert_run(src, dst)), err=True)
    if open_ui:
        _open(dst, port=port, browser=not no_browser)


@main.command("summary")
@click.argument("inputs", metavar="INPUT...", nargs=-1, type=paths.Input(what=None))
@click.option("--config", type=paths.Input(what="a JSON config"),
              help="A GPU Performance Analyzer JSON config (either layout).")
@click.option("--class-map", type=paths.Input(what="a JSON class map"),
              help="JSON object: kernel-name substring -> class (replaces the config's).")
@click.option("--iters", type=POSITIVE, help="Iterations in the input (divides the totals).")
@click.option("--gpus", type=POSITIVE, help="GPUs in the input (divides the totals).")
@click.option("--iter-tag", "tag", help="Name of the NVTX range of one iteration (glob with *).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format.")
@click.pass_context
def summary_command(ctx: click.Context, inputs: tuple[Path, ...], config: Path | None,
                    class_map: Path | None, iters: int | None, gpus: int | None, tag: str | None,
                    fmt: str) -> None:
    """Kernel time per class and iteration, NCCL, memory ops, NVTX iterations and the time not
    hidden behind compute (the GPU Performance Analyzer's report). INPUT: a Kineto trace, an
    nsys SQLite export, or `nsys stats` CSVs (cuda_gpu_kern_sum, cuda_gpu_mem_time_sum,
    nvtx_gpu_proj_trace)."""
    from .commands import summary as cmd

    results = cmd.run(list(inputs), config, class_map, iters, gpus, tag, **_options(ctx))
    _print((cmd.render_json if fmt == "json" else cmd.render_text)(results))


@main.command("patterns")
@click.argument("src", metavar="IN", type=paths.Input(urls=True))
@click.argument("dst", metavar="OUT", required=False, type=paths.Output(rank_dir=True, urls=True))
@click.option("--operator", help="Instances of this CPU op (a name or a glob); default: every "
              "top-level CPU op.")
@click.option("--min-len", type=POSITIVE, default=3, show_default=True,
              help="Shortest pattern, in GPU ops.")
@click.option("--top-k", type=COUNT, default=5, show_default=True,
              help="Patterns of each scope overlaid on OUT (and shown in the table).")
@click.option("--rank", type=int, help="For a directory: only this rank.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="The patterns on stdout: the top k of each scope (table), or all (csv, json).")
@_rewriter_options
@_job_options
@click.pass_context
def patterns_command(ctx: click.Context, src: Path, dst: str | None, operator: str | None,
                     min_len: int, top_k: int, rank: int | None, fmt: str, summary_only: bool,
                     open_ui: bool, port: int, no_browser: bool) -> None:
    """Write OUT: IN with its frequent GPU kernel sequences overlaid (``Pattern P<n>`` slices
    on "Kernel patterns" threads, a "Kernel-name dictionary" thread).

    IN and OUT may be directories of per-rank traces (one output per rank, same names).
    """
    open_ui = _rewriter_arguments(src, dst, summary_only, open_ui, port, no_browser)
    prefetched = _prefetch(src, kind="patterns")
    from .commands.patterns import run

    text = run(src, None if summary_only else dst, operator, min_len, top_k, rank, fmt,
               prefetched=prefetched,
               open_ui=open_ui, job=_job(ctx),
               **_options(ctx))
    _print_summary(text, dst)


def _analysis_options(f):
    """What every analysis command takes: --format, --step, --rank."""
    f = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                     show_default=True, help="Output format.")(f)
    f = click.option("--step", type=int, help="Only ProfilerStep#N (its GPU window).")(f)
    f = click.option("--rank", type=int, help="For a directory: only this rank.")(f)
    f = _job_options(f)
    return click.argument("trace", type=paths.Input(urls=True))(f)


def _rank_tables(ctx: click.Context, trace: Path, rank: int | None, part: str,
                 load: str = "gpu_steps", **params) -> list[dict]:
    """Each rank's tables of ``commands.analyses``' ``part`` (a ``*_part`` with ``params``),
    made where the rank is read (with the load kind ``load``)."""
    parts = _job_ranks(ctx, trace, rank, part, params, collectives=False, load=load)[0]
    from .commands import analyses

    return analyses.tables(parts)


def _job_ranks(ctx: click.Context, trace: Path, rank: int | None, part: str, params: dict,
               collectives: bool, load: str = "gpu_steps"):
    """Every rank's ``RankPart`` of ``part`` (a ``*_part`` of ``commands.analyses``, or
    ``"page"``: ``report.analyses_html.analyses``) with ``params``, and (``collectives``) a
    job's collective tables read with them (``analyses.load_job``); ``load``: the load kind
    the part needs (analysis.gpu_steps.LOAD's, or less; a lone rank's is prefetched)."""
    prefetched = _prefetch(trace, kind=load, each_rank=True, rank=rank)
    from functools import partial  # after the prefetch: its children start first

    from .commands import analyses

    if part == "page":
        from .report.analyses_html import analyses as fn
    else:
        fn = getattr(analyses, part)
    return analyses.load_job(trace, partial(fn, **params), rank, prefetched=prefetched,
                             job=_job(ctx), collectives=collectives, kind=load, **_options(ctx))


@main.command()
@_analysis_options
@click.option("--top", type=COUNT, help="Only the first N kernels (per rank).")
@click.option("--sort", type=click.Choice(["total", "count", "mean", "max", "min", "std", "share",
                                           "share_time", "share_launches", "name"]),
              default="total", show_default=True, help="Order of the kernels.")
@click.option("--type", "kind", type=click.Choice(["comp", "comm", "mem"]),
              help="Only computation, communication or memory ops.")
@click.option("--full-names", is_flag=True, help="Do not shorten long names in the terminal.")
@click.pass_context
def kernels(ctx: click.Context, trace: Path, rank: int | None, step: int | None, fmt: str,
            top: int | None, sort: str, kind: str | None, full_names: bool) -> None:
    """Per GPU kernel / copy / set: count, total, mean, std, min, max, shares and type."""
    from .analysis.kernels import load_kind

    ranks = _rank_tables(ctx, trace, rank, "kernels_part", load_kind(step), step=step, kind=kind,
                         sort=sort)
    from .commands import analyses

    sections = analyses.kernels(ranks, top)
    _print(analyses.render(sections, fmt, full_names))


@main.command()
@_analysis_options
@click.option("--hist-min", type=US, help="Histogram lower bound (µs).")
@click.option("--hist-max", type=US, help="Histogram upper bound (µs).")
@click.option("--bins", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Histogram bins.")
@click.option("--top", type=COUNT, default=20, show_default=True, help="Transitions shown per rank.")
@click.option("--sort", type=click.Choice(["count", "total", "mean", "max", "min", "std"]),
              default="count", show_default=True, help="Order of the transitions.")
@click.pass_context
def gaps(ctx: click.Context, trace: Path, rank: int | None, step: int | None, fmt: str,
         hist_min: float | None, hist_max: float | None, bins: int, top: int, sort: str) -> None:
    """Idle gaps per stream and per device, their histogram, kernel-to-kernel transitions."""
    if hist_min is not None and hist_max is not None and hist_min >= hist_max:
        raise click.BadParameter(f"{hist_max:g} is not above --hist-min {hist_min:g}",
                                 param_hint="--hist-max")
    ranks = _rank_tables(ctx, trace, rank, "gaps_part", step=step, top=top, sort=sort)
    from .commands import analyses

    sections = analyses.gaps(ranks, hist_min, hist_max, bins)
    _print(analyses.render(sections, fmt))


@main.command()
@_analysis_options
@click.option("--kernel-wait-us", type=US, default=30.0, show_default=True,
              help="Gaps shorter than this (and not host waits) are kernel waits (HTA's rule).")
@click.pass_context
def breakdown(ctx: click.Context, trace: Path, rank: int | None, step: int | None, fmt: str,
              kernel_wait_us: float) -> None:
    """Per rank and step: busy / idle / computation / communication / memory and overlaps,
    idle per stream, communication-computation overlap."""
    ranks = _rank_tables(ctx, trace, rank, "breakdown_part", step=step,
                         kernel_wait_us=kernel_wait_us)
    from .commands import analyses

    sections = analyses.breakdown(ranks)
    _print(analyses.render(sections, fmt))


@main.command()
@_analysis_options
@click.option("--runtime-cutoff", type=US, default=50.0, show_default=True,
              help="Runtime calls longer than this (µs) are outliers.")
@click.option("--delay-cutoff", type=US, default=100.0, show_default=True,
              help="Launch delays above this (µs) are outliers.")
@click.option("--top", type=COUNT, default=20, show_default=True,
              help="Rows of each outlier list (and of the launch list in the terminal).")
@click.pass_context
def launches(ctx: click.Context, trace: Path, rank: int | None, step: int | None, fmt: str,
             runtime_cutoff: float, delay_cutoff: float, top: int) -> None:
    """Per launch: runtime call duration, GPU duration, launch delay; outliers."""
    ranks = _rank_tables(ctx, trace, rank, "launches_part", step=step,
                         runtime_cutoff=runtime_cutoff, delay_cutoff=delay_cutoff, top=top)
    from .commands import analyses

    sections = analyses.launches(ranks)
    if fmt == "table":
        sections = [(t if t != "launches" else f"launches (first {top}; csv / json: all)",
                     {k: v[:top] for k, v in c.items()} if t == "launches" else c)
                    for t, c in sections]
    _print(analyses.render(sections, fmt))


@main.command()
@_analysis_options
@click.option("--html", "html_out", type=paths.Output(urls=True),
              help="Write a self-contained page with every chart (works offline).")
@click.option("--top", type=COUNT, default=10, show_default=True, help="Kernels per chart / table.")
@click.pass_context
def report(ctx: click.Context, trace: Path, rank: int | None, step: int | None, fmt: str,
           html_out: Path | None, top: int) -> None:
    """Kernels, breakdowns, gaps and launches of TRACE or every rank of a directory; --html
    writes them as one page of plotly charts."""
    if html_out is not None:
        from .report.paths import check_output

        check_output(html_out, trace)
    params = {"step": step, "top": top} if html_out is None else {"step": step}
    parts, tables = _job_ranks(ctx, trace, rank, "report_part" if html_out is None else "page",
                               params, collectives=True)
    from .commands import analyses

    job = []
    if tables is not None:  # a job: who waited for whom, first
        from .commands.collectives import job_sections

        # the page's heatmap: every collective in order; the terminal's: the ``top`` worst
        job = job_sections(trace, step, top if html_out is None else None, tables=tables)
        del tables
    if html_out is None:
        _print(analyses.render(job + analyses.report(analyses.tables(parts), top), fmt))
        return
    from .report.analyses_html import write_report

    ranks = analyses.tables(parts)
    charts = write_report(ranks, html_out, step, top, title=f"traceaug report: {paths.name_of(trace)}",
                          job=job)
    click.echo(paths.shown(f"wrote {html_out} ({charts} charts, {len(ranks)} rank(s))"), err=True)


def _collective_options(f):
    """What the collectives commands take besides ``_analysis_options``."""
    return click.option("--no-align", is_flag=True,
                        help="Keep each rank's recorded clock (default: align the ranks' clocks "
                        "on the ends of matched collectives).")(_analysis_options(f))


def _collectives_job(ctx: click.Context, trace: Path, step: int | None, rank: int | None,
                     no_align: bool):
    from .commands import collectives as cmd

    return cmd.job_for(trace, step, rank, not no_align, _options(ctx), run=_job(ctx))


def _collectives_out(job, text: str, found: tuple[str, ...] = ()) -> None:
    """The job's notes (and ``found``) on stderr, then ``text``: said together once every
    figure is computed, so a run stopped before says nothing but that it was."""
    from .commands import collectives as cmd

    for line in (*cmd.notes(job), *found):
        click.echo(f"traceaug: {line}", err=True)
    click.echo(text, nl=False)


@main.command("collectives")
@_collective_options
@click.option("--by", type=click.Choice(["instance", "rank"]), default="instance",
              show_default=True, help="One row per matched collective, or per rank.")
@click.pass_context
def collectives_command(ctx: click.Context, trace: Path, rank: int | None, step: int | None,
                        fmt: str, no_align: bool, by: str) -> None:
    """Collectives matched across the ranks of a job: per instance its skew, straggler, waits,
    transfer time and bandwidth (--by rank: each rank's wait and the wait it caused)."""
    job = _collectives_job(ctx, trace, step, rank, no_align)
    from .commands import collectives as cmd

    _collectives_out(job, cmd.render_table(cmd.collectives_frame(job, by, rank), fmt))


@main.command("stragglers")
@_collective_options
@click.pass_context
def stragglers_command(ctx: click.Context, trace: Path, rank: int | None, step: int | None,
                       fmt: str, no_align: bool) -> None:
    """Who the ranks of a job waited for: findings in plain words (the rank the others waited
    for most in each step, the time lost and why), then per step each rank's step time and
    time waiting in collectives."""
    job = _collectives_job(ctx, trace, step, rank, no_align)
    from .commands import collectives as cmd

    found, table = cmd.stragglers_frame(job, rank)
    _collectives_out(job, cmd.render_table(table, fmt, None if fmt == "csv" else found),
                     tuple(found) if fmt == "csv" else ())


@main.command("merge")
@click.argument("job", metavar="JOB", type=paths.Input())
@click.argument("dst", metavar="OUT", type=paths.Output())
@click.option("--no-align", is_flag=True,
              help="Keep each rank's recorded clock (default: align the ranks' clocks on the "
              "ends of matched collectives).")
@_job_options
@click.pass_context
def merge_command(ctx: click.Context, job: Path, dst: Path, no_align: bool) -> None:
    """Write OUT: every rank of JOB in one Perfetto trace (processes "rank N: ...", clocks
    aligned, flow arrows from each collective's last arrival to the ranks that waited)."""
    from .rewrite.merge_job import write_job

    ranks, links = write_job(job, dst, not no_align, _options(ctx), run=_job(ctx))
    click.echo(f"wrote {dst} ({ranks} ranks, {links} cross-rank arrows)", err=True)


@main.command("critical-path")
@click.argument("src", metavar="IN", type=paths.Input(urls=True))
@click.argument("dst", metavar="OUT", required=False, type=paths.Output(
    rank_dir=True, urls=True, one_file="whole_job"))
@click.option("--step", type=int, help="Only ProfilerStep#N (default: the whole trace).")
@click.option("--annotation", help="Only the window of a slice whose name contains this text.")
@click.option("--instance", type=int, default=0, show_default=True,
              help="Which --annotation slice, 0 = the first in time.")
@click.option("--all-edges", is_flag=True, help="Also draw the graph's edges off the path.")
@click.option("--hta-weights", is_flag=True,
              help="Weigh syncs 0 as HTA does (default: the CPU's wait after the GPU op); "
                   "with --job: the longest path by weight (default: the timing path).")
@click.option("--max-gap-us", type=US, default=1500, show_default=True,
              help="Longest kernel-to-kernel gap that is a dependency, as HTA (0: any).")
@click.option("--top", type=COUNT, default=10, show_default=True, help="Top events in the summary.")
@click.option("--rank", type=int, help="For a directory: only this rank.")
@click.option("--job", "whole_job", is_flag=True,
              help="IN a directory of ranks: one path per step across every rank, joined at "
                   "each collective; OUT the merged job trace with the path drawn.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Format of the summary printed on stdout.")
@_rewriter_options
@_job_options
@click.pass_context
def critical_path(ctx: click.Context, src: Path, dst: Path | None, step: int | None,
                  annotation: str | None, instance: int, all_edges: bool, hta_weights: bool,
                  max_gap_us: float, top: int, rank: int | None, whole_job: bool, fmt: str,
                  summary_only: bool, open_ui: bool, port: int, no_browser: bool) -> None:
    """Write OUT: IN with its critical path as flow arrows and a "Critical path" lane.

    IN and OUT may be directories of per-rank traces (one output per rank, same names).
    With --job, IN is a job's directory and OUT one file: the merged job trace.
    """
    if whole_job:
        if annotation is not None or rank is not None or all_edges or open_ui:
            raise click.UsageError("--job takes --step, --format, --summary-only, "
                                   "--hta-weights and the job options only")
        if dst is None and not summary_only:
            raise click.UsageError("give OUT, or --summary-only")
        from .commands.critical_path import run_job

        text = run_job(src, None if summary_only else dst, step, fmt, _options(ctx),
                       job=_job(ctx), hta_weights=hta_weights)
        _print_summary(text, dst)
        return
    open_ui = _rewriter_arguments(src, dst, summary_only, open_ui, port, no_browser)
    if step is not None and annotation is not None:
        raise click.UsageError("choose --step or --annotation, not both")
    prefetched = _prefetch(src, kind="sync")
    from .commands.critical_path import run

    options = {"step": step, "annotation": annotation, "instance": instance,
               "all_edges": all_edges, "hta_weights": hta_weights, "max_gap_us": max_gap_us,
               "top": top}
    text = run(src, None if summary_only else dst, options, rank, fmt, prefetched=prefetched,
               open_ui=open_ui, job=_job(ctx),
               **_options(ctx))
    _print_summary(text, dst)


@main.command("whatif")
@click.argument("trace", type=paths.Input())
@click.option("--step", type=int, help="Only ProfilerStep#N (default: every step).")
@click.option("--scale", "scales", multiple=True, metavar="SELECTOR=FACTOR",
              help="Scale the time of the events SELECTOR picks: comp, comm, mem (kernel types), "
                   "cpu, or a kernel / CPU op name glob. Repeatable: each is one change.")
@click.option("--no-launch-delay", is_flag=True, help="Also replay with launch delays of 0.")
@click.option("--no-stragglers", is_flag=True,
              help="A job: also replay with every rank at the median arrival of each collective.")
@click.option("--rank", type=int, help="For a directory: the rank to replay (default: the job).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Output format.")
@_job_options
@click.pass_context
def whatif_command(ctx: click.Context, trace: Path, step: int | None, scales: tuple[str, ...],
                   no_launch_delay: bool, no_stragglers: bool, rank: int | None, fmt: str) -> None:
    """Replay TRACE's critical-path graph per step: the baseline's replay error, then the
    predicted step time and speedup of each change. A directory of ranks: the whole job,
    the ranks' graphs joined at every collective."""
    from .analysis.replay import parse_scale

    for s in scales:  # refused before any load
        parse_scale(s)
    prefetched = _prefetch(trace, kind="sync")
    from .commands import whatif as cmd

    steps, changes = cmd.compute(trace, step, scales, no_launch_delay, rank,
                                 prefetched=prefetched, no_stragglers=no_stragglers,
                                 job=_job(ctx), **_options(ctx))
    click.echo(cmd.render(steps, changes, fmt), nl=False)


def run() -> None:
    """The console entry point: ``main``, then end the process without unloading pandas,
    numpy and the engine module by module (0.08 s of every command, for nothing)."""
    # No BLAS thread pool (traceaug does no linear algebra): numpy's OpenBLAS starts one at
    # import, and on 2 cores its threads spin ~60 ms of CPU while pass 1 needs it.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 (rank-\xff.json)
        with contextlib.suppress(AttributeError, ValueError):  # printed as its own bytes
            stream.reconfigure(errors="surrogateescape")
    try:
        interrupt.install(command_line=True)  # Ctrl-C / SIGTERM: exit 130 / 143, never in the engine
        main()
        code = 0
    except SystemExit as e:  # click ends every run this way
        code = e.code
    except KeyboardInterrupt as e:  # a signal outside a command (installing, parsing arguments)
        code = getattr(e, "exit_code", 130)
        with contextlib.suppress(Exception):
            sys.stderr.write("traceaug: interrupted\n")
    for sig in (signal.SIGINT, signal.SIGTERM):  # cleanup below is short: let it finish
        signal.signal(sig, signal.SIG_IGN)
    if isinstance(code, str):
        click.echo(code, err=True)
        code = 1
    atexit._run_exitfuncs()  # what exit runs first (pass-1 children stopped, pools joined)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a reader that left (| head), a full
            # disk (said already), a closed stream (None when closed at the start)
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    run()
