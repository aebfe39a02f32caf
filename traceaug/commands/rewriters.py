"""What every rewriter command (``counters``, ``patterns``, ``critical-path``) shares: its IN
and OUT, the checks of OUT and ``--open``, the run through ``rewrite.pipeline`` and its
output (``wrote`` lines, the summary, the UI)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from .. import paths
from ..errors import TraceaugError
from .declare import JOB, Call, Command, argument, echo, open_checks, rewriter_options, said, serve

Summary = Callable[[list[dict], str], str]  # every rank's data, --format -> the text printed


def arguments(**out: object) -> tuple[click.Argument, click.Argument]:
    """IN and OUT (``out``: OUT's ``paths.Output`` settings)."""
    return (argument("src", metavar="IN", type=paths.Input(urls=True)),
            argument("dst", metavar="OUT", required=False,
                     type=paths.Output(rank_dir=True, urls=True, **out)))


def prepare(call: Call) -> None:
    """OUT or ``--summary-only``; an ``--open`` of one output file, on a port that serves."""
    src, dst = call["src"], call["dst"]
    if dst is None and not call["summary_only"]:
        raise click.UsageError("give OUT, or --summary-only")
    one = None if call["summary_only"] or not isinstance(src, Path) or src.is_dir() else dst
    open_checks(call["open_ui"], one, call["port"], "one output file")


def compute(rewriter: Callable, options: Callable[[Call], dict]) -> Callable[[Call], list]:
    """The command's work: every rank through ``pipeline.results`` with ``rewriter()``'s
    rewriter (imported when the work starts) and ``options(call)`` (OUT unless
    ``--summary-only``)."""
    def run(call: Call) -> list[dict]:
        from ..rewrite import pipeline

        dst = None if call.get("summary_only") else call.get("dst")
        if call.get("open_ui"):
            found, _ = pipeline.targets(call["src"], dst, call.files("src"))
            if dst is None or len(found) != 1:
                raise TraceaugError(f"{call['src']}: --open needs one output file")
        chosen = options(call)  # (a bad option is refused before the targets are made)
        return pipeline.results(rewriter(), pipeline.targets(call["src"], dst, call.files("src")),
                                chosen, call.job, call.get("keep_bytes", False))
    return run


def show(name: str, summary: Summary) -> Callable[[list[dict], Call], None]:
    """``wrote OUT (N events added by NAME)`` for each output, then the summary: on stdout, or
    on stderr when OUT is ``-`` (the trace is there); with ``--open`` the UI then serves OUT."""
    def out(done: list[dict], call: Call) -> None:
        for r in done:  # what was written is a message (stderr); stdout holds the summary only
            if r["out"]:
                said(f"wrote {r['out']} ({r['events']} events added by {name})")
        text = summary(done, call["fmt"])
        if not call.get("open_ui"):
            echo(paths.shown(text), err=paths.is_stdout(call["dst"]))
            return
        from .. import atomic

        atomic.commit()
        echo(text)
        serve(Path(done[0]["out"]), port=call["port"], browser=not call["no_browser"])
    return out


def command(name: str, help: str, options: tuple, of: Callable[[Call], dict],
            **declared: object) -> Command:
    """A rewriter's declaration: IN, OUT (``out``: its ``paths.Output`` settings), ``options``
    (its own, ``--format`` among them), the rewriter options and the job options. ``declared``
    names its ``load_kind`` (prefetched), ``rewriter`` (a function giving the
    ``rewrite.pipeline.Rewriter``, imported when the work starts: ``of(call)`` its options) and
    ``summary``, and overrides the rest of a rewriter's defaults."""
    load_kind, rewriter, summary = (declared.pop(k) for k in ("load_kind", "rewriter", "summary"))
    out = declared.pop("out", None) or {}
    settings = {"compute": compute(rewriter, of), "show": show(name, summary),
                "kind": lambda p: load_kind, "inputs": ("src",), "prepare": prepare,
                "cli_only": ("fmt", "summary_only", "open_ui", "port", "no_browser"), **declared}
    return Command(name, help, (*arguments(**out), *options, *rewriter_options(), JOB),
                   **settings)
