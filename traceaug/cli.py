"""The ``traceaug`` command line: one click group, one function per command."""

from __future__ import annotations

import atexit
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from . import __version__
from .errors import TraceaugError
from .memory import return_freed_promptly
from .output import FORMATS, render_columns, render_records

if TYPE_CHECKING:
    from .read.prefetch import Prefetched

TP_BIN_HELP = "Use this native trace_processor_shell instead of the embedded wasm engine."


class _Group(click.Group):
    """Turns every user-facing error into one line on stderr and exit code 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TraceaugError as e:
            click.echo(f"traceaug: error: {e}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("traceaug: interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceaug")
@click.option("--tp-bin", envvar="TRACEAUG_TP_BIN", type=click.Path(exists=True, dir_okay=False),
              help=TP_BIN_HELP + " [env: TRACEAUG_TP_BIN]")
@click.pass_context
def main(ctx: click.Context, tp_bin: str | None) -> None:
    """Read GPU profiler traces through Perfetto's trace_processor, offline."""
    return_freed_promptly()
    ctx.obj = {"tp_bin": tp_bin}


_FULL_LOAD_SQL = re.compile(
    r"\bargs?\b|arg_set_id|extract_arg|\bflow|INCLUDE\s+PERFETTO\s+MODULE\s+(?!traceaug\.)", re.IGNORECASE)


def needs_full_load(sql: str) -> bool:
    """An analysis load has only the args analyses read and no flow events: SQL that reads
    args or flows (or a standard-library module, which may) gets a full load."""
    return bool(_FULL_LOAD_SQL.search(sql))


def _options(ctx: click.Context) -> dict:
    return {"tp_bin": ctx.obj.get("tp_bin")}


def _prefetch(*inputs: Path, kind: str = "analysis") -> Prefetched:
    """Start pass 1 of the inputs in child processes for a load of ``kind`` before this one
    imports the engine; then import the perfetto API without pandas (every command prints
    numpy columns)."""
    from .read import prefetch

    started = prefetch.start(list(inputs), kind=kind)
    _perfetto_api_without_pandas()
    return started


def _perfetto_api_without_pandas() -> None:
    """Import the perfetto API with pandas hidden. It imports pandas at once (a third of a
    second) only for ``as_pandas_dataframe``, which traceaug never calls: ``Trace.query``
    builds its DataFrames itself, importing pandas then (``diff --html``)."""
    if "pandas" in sys.modules or "perfetto.common.query_result_iterator" in sys.modules:
        return
    sys.modules["pandas"] = None  # type: ignore[assignment]  # "import pandas" fails at once
    try:
        import perfetto.common.query_result_iterator  # noqa: F401
    finally:
        del sys.modules["pandas"]


@main.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.argument("sql", required=False)
@click.option("-f", "--file", "sql_file", type=click.File("r"), help="Read the SQL from a file.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--rank", type=int, help="For a directory: the rank to query.")
@click.option("--full/--lean", default=None,
              help="Load every arg and flow event, or only what analyses read. "
                   "[default: full when the SQL mentions args, flows or other modules]")
@click.pass_context
def query(ctx: click.Context, trace: Path, sql: str | None, sql_file, fmt: str,
          rank: int | None, full: bool | None) -> None:
    """Run PerfettoSQL on TRACE (timestamps are ns from `traceaug_meta.time_base_ns`)."""
    from . import load_ranks

    if sql_file is not None:
        sql = sql_file.read()
    if not sql:
        raise click.UsageError("give the SQL as an argument or with -f FILE")
    if full is None:
        full = needs_full_load(sql)
    prefetched = _prefetch(trace, kind="full" if full else "analysis")
    traces = load_ranks(trace, rank=rank, full=full, prefetched=prefetched, **_options(ctx))
    if len(traces) > 1:
        for t in traces.values():
            t.close()
        raise TraceaugError(f"{trace}: holds {len(traces)} ranks; choose one with --rank")
    (t,) = traces.values()
    with t:
        if "traceaug_event" in sql:
            t.include("traceaug.kineto")
        elif any(table in sql for table in ("traceaug_gpu_op", "traceaug_runtime", "traceaug_step")):
            t.include("traceaug.base")
        click.echo(render_columns(t.columns(sql), fmt), nl=False)


@main.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--rank", type=int, help="For a directory: only this rank.")
@click.pass_context
def info(ctx: click.Context, trace: Path, fmt: str, rank: int | None) -> None:
    """Devices, ranks, steps, time span, event counts, streams and Perfetto's warnings."""
    from . import info as trace_info

    prefetched = _prefetch(trace)
    records = trace_info(trace, rank=rank, prefetched=prefetched, **_options(ctx))
    click.echo(render_records(records, fmt), nl=False)


def _series(value: str) -> tuple[str, ...]:
    from .analysis.counters import SERIES

    chosen = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [v for v in chosen if v not in SERIES]
    if bad or not chosen:
        raise click.BadParameter(f"choose from {', '.join(SERIES)} (comma-separated)")
    return chosen


@main.command()
@click.argument("src", metavar="IN", type=click.Path(path_type=Path))
@click.argument("dst", metavar="OUT", required=False, type=click.Path())
@click.option("--series", default="bandwidth,queue", show_default=True,
              help="Which counters: bandwidth, queue, or both.")
@click.option("--style", type=click.Choice(["traceaug", "hta"]), default="traceaug", show_default=True,
              help="hta: HTA's exact event shapes, for scripts built on HTA's output.")
@click.option("--rank", type=int, help="For a directory: only this rank.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Format of the summary printed on stdout.")
@click.option("--summary-only", is_flag=True, help="Print the summary; write no trace.")
@click.option("--open", "open_ui", is_flag=True, help="Open OUT in the Perfetto UI when done.")
@click.option("--keep-bytes", is_flag=True,
              help="Keep every original byte. By default events the Perfetto UI would drop "
                   "(partly overlapping, on negative thread ids) are moved so that it shows them.")
@click.pass_context
def counters(ctx: click.Context, src: Path, dst: str | None, series: str, style: str,
             rank: int | None, fmt: str, summary_only: bool, open_ui: bool,
             keep_bytes: bool) -> None:
    """Write OUT: a copy of IN with memory-bandwidth and queue-length counter tracks.

    IN and OUT may be directories of per-rank traces (one output per rank, same names);
    an OUT ending in / is a directory (made if missing) that gets IN's name.
    """
    if dst is None and not summary_only:
        raise click.UsageError("give OUT, or --summary-only")
    if open_ui and (summary_only or src.is_dir()):
        raise click.UsageError("--open needs one output file")
    prefetched = _prefetch(src, kind="gpu")
    from .commands.counters import run

    text = run(src, None if summary_only else dst, _series(series), style, rank, fmt,
               prefetched=prefetched, open_ui=open_ui, keep_bytes=keep_bytes, **_options(ctx))
    click.echo(text, nl=False)


@main.command("diff")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option("--by", type=click.Choice(["name", "short-name", "category"]), default="name",
              show_default=True, help="Group ops by full name, name without template/arguments, or type.")
@click.option("--device", type=click.Choice(["cpu", "gpu", "all"]), default="all", show_default=True)
@click.option("--step", type=int, help="Compare only ProfilerStep#N (default: all steps, per step).")
@click.option("--rank", type=int, help="Only this rank.")
@click.option("--threshold", type=float, default=5.0, show_default=True,
              help="Per-step time change (percent) still called unchanged.")
@click.option("--top", type=int, default=10, show_default=True, help="Rows of regressions/improvements.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--html", "html_out", type=click.Path(path_type=Path), help="Write a self-contained report.")
@click.option("--trace", "trace_out", type=click.Path(path_type=Path),
              help="Write both traces into one Perfetto file (B relabelled, aligned at the first step).")
@click.option("--open", "open_ui", is_flag=True, help="Open the --trace file in the Perfetto UI.")
@click.pass_context
def diff_command(ctx: click.Context, a: Path, b: Path, by: str, device: str, step: int | None,
                 rank: int | None, threshold: float, top: int, fmt: str, html_out: Path | None,
                 trace_out: Path | None, open_ui: bool) -> None:
    """Compare two traces (or two directories of per-rank traces): what changed from A to B."""
    if open_ui and trace_out is None:
        raise click.UsageError("--open needs --trace FILE")
    prefetched = _prefetch(a, b, kind="ops")
    from .commands import diff as cmd

    result = cmd.run(a, b, by, device, step, threshold, rank, prefetched=prefetched, **_options(ctx))
    try:
        click.echo(cmd.render(result, fmt, top), nl=False)
        if html_out is not None:
            from .report.diff_html import write_report

            write_report(result, html_out, top)
            click.echo(f"wrote {html_out}", err=True)
        if trace_out is not None:
            from .rewrite.merge import write_merged

            if len(result.ranks) != 1:
                raise TraceaugError("--trace merges one pair of traces: choose a rank with --rank")
            sa, sb = result.sides[0]
            write_merged(sa, sb, trace_out)
            click.echo(f"wrote {trace_out}", err=True)
    finally:
        cmd.close(result)
    if open_ui:
        _open(trace_out)


def _open(trace: Path, port: int = 0, browser: bool = True) -> None:
    from .view.server import serve

    serve(trace, port=port, browser=browser, announce=lambda m: click.echo(m, err=True))


@main.command("open")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--port", type=int, default=0, help="Port on 127.0.0.1 (default: a free one).")
@click.option("--no-browser", is_flag=True, help="Only print the URL.")
def open_command(trace: Path, port: int, no_browser: bool) -> None:
    """Open TRACE in the Perfetto UI bundled with traceaug (offline, 127.0.0.1 only)."""
    _open(trace, port=port, browser=not no_browser)


def run() -> None:
    """The console entry point: ``main``, then end the process without unloading pandas,
    numpy and the engine module by module (0.08 s of every command, for nothing)."""
    # No BLAS thread pool (traceaug does no linear algebra): numpy's OpenBLAS starts one at
    # import, and on 2 cores its threads spin ~60 ms of CPU while pass 1 needs it.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        main()
        code = 0
    except SystemExit as e:  # click ends every run this way
        code = e.code
    if isinstance(code, str):
        click.echo(code, err=True)
        code = 1
    atexit._run_exitfuncs()  # what exit runs first (pass-1 children stopped, pools joined)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a reader that left (| head), a closed stream
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    run()
