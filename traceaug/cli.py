"""The ``traceaug`` command line: one click group, a click command made from each command's
declaration (``commands``). Only click is imported up front: ``--version`` needs nothing else, and a
command imports its own modules when it runs (``tests/test_startup.py``)."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING, NoReturn

import click

import traceaug.commands as commands
import traceaug.interrupt as interrupt

from .version import __version__

if TYPE_CHECKING:
    from .commands.declare import Call, Command

TP_BIN_HELP = "Use this native trace_processor_shell instead of the embedded wasm engine."
MESSAGE_LIMIT = 299  # characters of an error line


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """An error message as one line of at most ``limit`` characters."""
    import traceaug.paths as paths

    text = " ".join(paths.shown(str(text)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TraceaugCommand(click.Command):
    """Every command: outputs checked against inputs first (``guard``), files placed all or none (``atomic``),
    OS errors one line naming the file. Trace arguments: ``paths.Input()`` / ``paths.Output()``."""

    def invoke(self, ctx: click.Context):
        import traceaug.atomic as atomic
        import traceaug.guard as guard
        import traceaug.paths as paths

        from .commands.declare import job_from
        from .errors import SumTooLarge, TraceaugError

        job_from(ctx.meta.get("job", {}))  # the storage options (an endpoint) before URLs are checked
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


class _Group(click.Group):
    """Each command made from its declaration when asked for (only the one run is imported); user errors one
    line on stderr, exit 1; Ctrl-C / SIGTERM exit 130 / 143; spooled inputs always removed."""

    command_class = TraceaugCommand

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(commands.NAMES)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in commands.NAMES:
            return None
        c = commands.load(name)
        return TraceaugCommand(c.name, params=c.click_params(), help=c.help,
                               callback=click.pass_context(lambda ctx, **p: _run(c, ctx, p)))

    def resolve_command(self, ctx: click.Context, args: list[str]):
        _capture_early(args[1:])  # before the command's modules load
        return super().resolve_command(ctx, args)

    def make_context(self, *args, **kwargs) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt as e:  # parsing the group's options: click says "Aborted!"
            _interrupted(e)

    def invoke(self, ctx: click.Context):
        import traceaug.paths as paths
        import traceaug.runtime as runtime

        from .errors import TraceaugError

        try:
            with runtime.using(runtime.Runtime(command_line=True)):
                return super().invoke(ctx)
        except TraceaugError as e:
            click.echo(one_line(f"traceaug: error: {e}"), err=True)
            sys.exit(1)
        except KeyboardInterrupt as e:
            _interrupted(e)
        finally:
            with interrupt.held():  # the run is over (its outputs in place, or none): a signal stops nothing
                paths.cleanup()


def _capture_early(args: list[str]) -> None:
    """Pass 1 of the capture a command line names (``--capture DIR``) in a child, started before the command's
    modules load (its option's callback would start it after them: ``read.prefetch``)."""
    given = None
    for i, a in enumerate(args):
        if a == "--capture" and i + 1 < len(args):
            given = args[i + 1]
        elif a.startswith("--capture="):
            given = a.split("=", 1)[1]
    if given:
        with contextlib.suppress(Exception):  # (only an optimization: the command reports what is wrong)
            from .read import prefetch
            from .read.inputs import capture_files

            prefetch.start([f for f, _ in capture_files(given)], "capture")


def _interrupted(e: KeyboardInterrupt) -> NoReturn:
    """Ctrl-C / SIGTERM said in one line; exit 130 / 143."""
    click.echo("traceaug: interrupted", err=True)
    sys.exit(getattr(e, "exit_code", 130))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceaug")
@click.option("--tp-bin", envvar="TRACEAUG_TP_BIN", type=click.Path(exists=True, dir_okay=False),
              help=TP_BIN_HELP + " [env: TRACEAUG_TP_BIN]")
def main(tp_bin: str | None) -> None:
    """Read GPU profiler traces through Perfetto's trace_processor, offline."""
    import traceaug.runtime as runtime

    from .processes import return_freed_promptly

    return_freed_promptly()
    runtime.update(tp_bin=tp_bin)


def _run(command: Command, ctx: click.Context, params: dict) -> None:
    """A declared command on the command line: its checks, the prefetch of its traces, its
    work, its output."""
    from .commands.declare import Call, job_from
    from .job.run import JobOptions

    job = job_from(ctx.meta.get("job", {})) if command.takes_job else JobOptions()
    call = Call(command, params, job)
    if command.prepare is not None:
        command.prepare(call)
    call.prefetch()
    from .engine.imports import perfetto_light  # after the prefetch: its children start first

    perfetto_light()
    try:
        _show(command, command.compute(call), call)
    finally:
        call.close()  # a plan no load took (the command failed first): its child stops


def _show(command: Command, result: object, call: Call) -> None:
    """``command.show``; its JSON versioned as it is printed (``declare.versioned_json``: ``schema_version``
    first, docs/schemas/NAME.json its schema), with the command's ``findings`` (``Command.findings``) last."""
    from .commands.declare import versioned_json

    if call.get("fmt") != "json":
        return command.show(result, call)
    findings = None if command.findings is None else lambda: command.findings(result, call)
    with versioned_json(command.schema_version, findings):
        command.show(result, call)


def run() -> None:
    """The console entry point: ``main``, then ``os._exit``: unloading pandas, numpy and the engine
    module by module would cost every command time for nothing."""
    # No BLAS thread pool (traceaug does no linear algebra): OpenBLAS's threads spin CPU pass 1 needs.
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
    with interrupt.held():  # the run is over: a signal landing here (before it is ignored) stops nothing
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
