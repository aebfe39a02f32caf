"""A command, declared once: its name, help, parameters, load kind, work and output. The click
command (``cli``), the Python API function (``api``) and the prefetch come from it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

import traceaug.paths as paths
import traceaug.runtime as runtime

from ..job.loaded import Job
from ..job.run import CLUSTER_TIMEOUT_S, JobOptions, Work, arrived, items_of, run
from ..output import FORMATS, TABLE_WIDTH
from ..read.ranks import TraceFile

INT64_MAX = 2**63 - 1


class Finite(click.FloatRange):
    """A float option that is a finite number (click's ranges let nan and inf through)."""

    name = "number"

    def convert(self, value, param, ctx) -> float:
        import math

        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


# The option types of numbers, each defined once: row counts and lengths (kept to int64:
# numpy takes them), and times in µs (their ns fit in int64).
COUNT = click.IntRange(0, INT64_MAX)
POSITIVE = click.IntRange(1, INT64_MAX)
US = Finite(0, 9.2e15)


def option(*decls: str, **settings: Any) -> click.Option:
    return click.Option(list(decls), **settings)


def argument(name: str, **settings: Any) -> click.Argument:
    return click.Argument([name], **settings)


def fmt(help: str = "Output format.", choices: Sequence[str] = FORMATS) -> click.Option:
    return option("--format", "fmt", type=click.Choice(choices), default=choices[0],
                  show_default=True, help=help)


def _wide(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        runtime.update(wide=True)
    return value


def wide() -> click.Option:
    """``--wide``, after every ``--format`` that has a table (``Command.click_params``): kept in the
    runtime, which ``output`` reads."""
    return option("--wide", is_flag=True, expose_value=False, callback=_wide,
                  help=f"Terminal tables as wide as their cells (default: text cut with \"…\" to "
                       f"fit {TABLE_WIDTH} columns; csv / json never cut).")


def rank(help: str = "For a directory: only this rank.") -> click.Option:
    return option("--rank", type=int, help=help)


def step(help: str = "Only step N (its GPU window): ProfilerStep#N, or a serving trace's step N "
         "(its scheduler steps numbered from 0).") -> click.Option:
    return option("--step", type=int, help=help)


def _serving(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None:
        if param.name == "step_pattern":
            from ..analysis.serving import pattern

            try:
                pattern(value)
            except Exception as e:  # noqa: BLE001  (the one line the user sees)
                raise click.BadParameter(str(e)) from None
        runtime.update(**{param.name: str(value)})  # (--capture: its pass 1 started by ``cli``)
    return value


def serving_options() -> list[click.Option]:
    """``--step-pattern`` and ``--capture``, after every ``--step`` (``Command.click_params``): kept in the
    runtime, which ``analysis.serving`` and ``analysis.graph_replay`` read in each rank's task."""
    return [option("--step-pattern", metavar="REGEX", expose_value=False, callback=_serving,
                   help="Steps are the user annotations this matches (named groups phase, batch, tokens, "
                        "context), numbered 0, 1, ... (default: vLLM's, SGLang's and ATOM's step "
                        "annotations)."),
            option("--capture", metavar="PATH", expose_value=False, callback=_serving,
                   type=click.Path(exists=True, dir_okay=True),
                   help="The CUDA / HIP graph's capture trace (a file, or a directory with "
                        "execution_details.json): replayed kernels attributed to the ops that "
                        "captured them.")]


def open_options() -> list[click.Option]:
    """``--port`` and ``--no-browser``, the same on ``open`` and on every ``--open``."""
    return [option("--port", type=click.IntRange(0, 65535), default=0,
                   help="Port on 127.0.0.1 for the UI (default: a free one)."),
            option("--no-browser", is_flag=True,
                   help="Only print the URL (on stderr); do not start a browser.")]


def rewriter_options() -> list[click.Option]:
    """``--summary-only``, ``--open``, ``--port`` and ``--no-browser``: every rewriter's."""
    return [option("--summary-only", is_flag=True, help="Print the summary; write no trace."),
            option("--open", "open_ui", is_flag=True, help="Open OUT in the Perfetto UI when done."),
            *open_options()]


JOB = "job options"  # where a command's parameters list the job options (``job_options``)


def _kept(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if isinstance(value, str) and not value.strip():  # --scheduler '': never "run here"
        raise click.BadParameter("is empty")
    ctx.meta.setdefault("job", {})[param.name] = value
    return value


def job_options() -> list[click.Option]:
    """Where a directory's ranks run and what a failing rank does: every command that takes a
    directory of ranks (kept in ``ctx.meta["job"]``, not passed to the command)."""
    return [option(name, expose_value=False, callback=_kept, **kw) for name, kw in (
        ("--scheduler", {"metavar": "ADDRESS", "help": "Run the ranks on this Dask scheduler "
                         "(default: Dask's DASK_SCHEDULER_ADDRESS / config, else this machine)."}),
        ("--scheduler-file", {"metavar": "FILE",
                              "help": "Run the ranks on the Dask scheduler this file names."}),
        ("--workers", {"type": click.IntRange(1, 4096), "help": "Run the ranks on a Dask "
                       "cluster of N local processes started for this run (no more than the "
                       "cores, the ranks and the memory allow)."}),
        ("--cluster-timeout", {"type": click.FloatRange(0, min_open=True), "default": CLUSTER_TIMEOUT_S,
                               "show_default": True, "metavar": "SECONDS",
                               "help": "Give up on a Dask scheduler file, scheduler or worker "
                               "not there after this long."}),
        ("--retries", {"type": click.IntRange(0, 100), "default": 1, "show_default": True,
                       "help": "Tries again of a rank that fails."}),
        ("--fail-fast", {"is_flag": True, "help": "Stop at the first rank that fails."}),
        ("--skip-bad-ranks", {"is_flag": True, "help": "Go on without rank files that cannot "
                              "be read (dangling symlinks, FIFOs, empty files, not traces) or are "
                              "of another job, named on stderr."}),
        ("--cache", {"metavar": "DIR", "help": "Keep each rank's tables here (a directory or an "
                     "fsspec URL prefix), reused by the next command on the same rank (default: "
                     "TRACEAUG_CACHE, else $XDG_CACHE_HOME/traceaug/tables)."}),
        ("--no-cache", {"is_flag": True, "help": "Read every rank, using and keeping nothing in "
                        "the table cache."}),
        ("--storage-option", {"multiple": True, "metavar": "KEY=VALUE",
                              "help": "An fsspec storage option for URL inputs and outputs "
                              "(s3://...: e.g. endpoint_url=..., anon=true); repeatable."}))]


@dataclass(frozen=True)
class Command:
    """One command: click ``params`` (``JOB``: the job options), ``compute(call)`` its work,
    ``show`` / ``api`` (result, call) its CLI output / API value, ``kind`` the prefetched load."""

    name: str
    help: str
    params: tuple[click.Parameter | str, ...]
    compute: Callable[[Call], Any]
    show: Callable[[Any, Call], None]
    api: Callable[[Any, Call], Any] | None = None
    kind: Callable[[dict], str | None] | None = None
    inputs: tuple[str, ...] = ()  # the trace parameters: their ranks found once
    cli_only: tuple[str, ...] = ("fmt",)  # parameters the API function does not take
    rank_selects: bool = True  # --rank picks the file read (else every rank is read)
    api_params: dict = field(default_factory=dict)  # keywords only the API takes: defaults
    prepare: Callable[[Call], None] | None = None  # the CLI's checks, before any work
    schema_version: int = 1  # of its --format json (docs/schemas/NAME.json); bumped when that changes
    findings: Callable[[Any, Call], list] | None = None  # its JSON's ``findings`` (render/findings.py)

    def click_params(self) -> list[click.Parameter]:
        out: list[click.Parameter] = []
        for p in self.params:
            out += job_options() if p == JOB else [p]
            if isinstance(p, click.Option) and p.name == "fmt" and "table" in p.type.choices:
                out.append(wide())
            if isinstance(p, click.Option) and p.name == "step":
                out += serving_options()
        return out

    @property
    def takes_job(self) -> bool:
        return JOB in self.params


@dataclass
class Call:
    """One run of a command: its parameters, the job options, and each trace input's rank
    files, found once (``files``)."""

    command: Command
    params: dict
    job: JobOptions = field(default_factory=JobOptions)
    api: bool = False  # called from the Python API (no printing)
    _files: dict = field(default_factory=dict)
    _ahead: str | None = None  # the --capture ``prefetch`` reads ahead

    def __getitem__(self, name: str) -> Any:
        return self.params[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.params.get(name, default)

    def files(self, name: str | None = None) -> list[TraceFile]:
        """The rank files of trace input ``name`` (default: the first), found once, with
        ``--rank`` when the command reads one rank of a directory (a loaded ``Job``'s own)."""
        name = name or self.command.inputs[0]
        if name not in self._files:
            rank = self.params.get("rank") if self.command.rank_selects else None
            source = self.params[name]
            try:
                self._files[name] = [f for f in source.files if rank is None or f.rank == rank] \
                    if isinstance(source, Job) else self.job.select(source, rank)
            except Exception as e:  # said once, raised again wherever the files are asked for
                self._files[name] = e
        found = self._files[name]
        if isinstance(found, Exception):
            raise found
        return found

    def run(self, work: Work, key: str, name: str | None = None, on_result: Callable | None = None) -> dict:
        """``work`` on every rank of trace input ``name`` (default: the first): a loaded
        ``Job``'s results, read once per ``key``, else through the job runner; ``on_result`` as ``run``'s
        (a loaded job's results kept whole, its answers held in their place here)."""
        source = self.params[name or self.command.inputs[0]]
        if isinstance(source, Job):  # kept per work when no key names it (analyses share none)
            done = source.results(key or repr((work.kind, work.per_rank, work.opens,
                                               sorted(work.params.items()))), work)
            return {r: arrived(on_result, r, v) for r, v in done.items()}
        return run(work, items_of(self.files(name)), self.job, on_result)

    def prefetch(self) -> None:
        """Pass 1 of each input that is one local file, in a child, before the engine's
        modules load (``read.prefetch``); with ``--capture``, its graphs read in a thread meanwhile
        (``graph_replay.read_ahead``). ``close`` drops what the command did not take."""
        kind = self.command.kind(self.params) if self.command.kind else None
        if kind is None:
            return
        from ..read import prefetch
        from ..read.storage import is_url

        local = [self.params[n] for n in self.command.inputs]
        if not all(isinstance(p, Path) for p in local):
            return  # URLs: each task fetches its own
        try:
            chosen = [self.files(n) for n in self.command.inputs]
        except Exception:  # noqa: BLE001  (the command reports it, as it runs)
            return
        if all(len(f) == 1 and not is_url(f[0].path) for f in chosen):
            prefetch.start([f[0].path for f in chosen], kind)
            capture = runtime.current().capture
            if capture:
                from ..analysis.graph_replay import read_ahead

                read_ahead(capture)
                self._ahead = capture

    def close(self) -> None:
        """Stop what ``prefetch`` started that no load took: pass-1 children, a capture's graphs."""
        from ..read import prefetch

        prefetch.close()
        if self._ahead is not None:
            from ..analysis.graph_replay import forget_ahead

            forget_ahead(self._ahead)


def job_from(given: dict) -> JobOptions:
    """The command line's job options (``ctx.meta["job"]``); their storage options set the
    runtime's (inputs and outputs alike)."""
    from ..read.storage import parse_options

    storage = parse_options(given.get("storage_option") or ())
    if storage:
        runtime.update(storage=storage)
    return JobOptions.of(given)


_VERSIONED: ContextVar[tuple | None] = ContextVar("traceaug_versioned_json", default=None)


@contextlib.contextmanager
def versioned_json(version: int, findings: Callable[[], list] | None = None) -> Iterator[None]:
    """The JSON the block prints on stdout (``echo``, once) versioned (``output.versioned``), with
    ``findings()`` last (made only if JSON is printed: ``report --html`` prints none)."""
    token = _VERSIONED.set((version, findings))
    try:
        yield
    finally:
        _VERSIONED.reset(token)


def echo(text: str, err: bool = False) -> None:
    """Print a command's text as it is (its JSON versioned inside ``versioned_json``); a stdout that
    cannot take it (a full disk, ``> /dev/full``) is named in the one-line error, not blamed on an
    output file."""
    import sys

    from ..errors import TraceaugError

    tail = _VERSIONED.get()
    if tail is not None and not err and text.strip():
        from ..output import versioned

        _VERSIONED.set(None)
        version, findings = tail
        text = versioned(text, version, None if findings is None else {"findings": findings()})
    if (sys.stderr if err else sys.stdout) is None:  # closed at the start (>&-)
        raise TraceaugError(f"{'stderr' if err else 'stdout'}: is closed; nothing printed")
    try:
        click.echo(text, nl=False, err=err)
    except OSError as e:
        if e.filename is None:
            e.filename = "stderr" if err else "stdout"
        raise


def said(text: str) -> None:
    """A message on stderr (``wrote ...``), spooled paths named as the user gave them, once the run's
    outputs are in place (``atomic.announce``)."""
    import traceaug.atomic as atomic

    atomic.announce(paths.shown(text))


def open_checks(open_ui: bool, out: Any, port: int, needs: str) -> None:
    """What an ``--open`` asks, checked before any work: one output file to open (None or
    stdout cannot be opened) and a ``--port`` that can be served on."""
    if not open_ui:
        return
    if out is None or paths.is_stdout(out):
        raise click.UsageError(f"--open needs {needs} (not stdout)")
    from ..view.server import check_port

    check_port(port)


def serve(trace: Path, port: int = 0, browser: bool = True, name: str | None = None,
          pair: Path | None = None) -> None:
    """This run's outputs in place, then ``trace`` (and ``pair``, synced) in the bundled Perfetto UI until
    Ctrl-C."""
    import traceaug.atomic as atomic

    from ..view.server import serve as serve_ui

    atomic.commit()  # this run's outputs in place before the UI reads one
    serve_ui(trace, port=port, browser=browser, announce=lambda m: click.echo(m, err=True),
             name=name, pair=pair)
