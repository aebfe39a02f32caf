"""What the rewriter commands share: IN, OUT, their checks, the run and the output. Command NAME's
rewriter is ``rewrite/NAME.py``'s ``REWRITER``, its summary ``report/NAME_text.py``'s."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from pathlib import Path

import click

import traceaug.paths as paths

from ..errors import TraceaugError
from .declare import JOB, Call, Command, argument, echo, open_checks, rewriter_options, said, serve


def _module(layer: str, name: str) -> object:
    return import_module(f"..{layer}.{name.replace('-', '_')}", __package__)


def summary_text(name: str, done: list[dict], fmt: str) -> str:
    """The summary printed: every rank's data in ``--format``."""
    return _module("render", f"{name}_text").summary_text(done, fmt)


def arguments(**out: object) -> tuple[click.Argument, click.Argument]:
    """IN and OUT (``out``: OUT's ``paths.Output`` settings)."""
    return (argument("src", metavar="IN", type=paths.Input()),
            argument("dst", metavar="OUT", required=False,
                     type=paths.Output(rank_dir=True, **out)))


def prepare(call: Call) -> None:
    """OUT or ``--summary-only``; an ``--open`` of one output file, on a port that serves."""
    src, dst = call["src"], call["dst"]
    if dst is None and not call["summary_only"]:
        raise click.UsageError("give OUT, or --summary-only")
    one = None if call["summary_only"] or not isinstance(src, Path) or src.is_dir() else dst
    open_checks(call["open_ui"], one, call["port"], "one output file")


def compute(name: str, options: Callable[[Call], dict], rewriter: str = "REWRITER"
            ) -> Callable[[Call], list]:
    """The command's work: every rank through ``pipeline.results`` with its rewriter (``rewrite/NAME.py``'s
    attribute ``rewriter``) and ``options(call)`` (OUT unless ``--summary-only``)."""
    def run(call: Call) -> list[dict]:
        from ..rewrite import pipeline

        dst = None if call.get("summary_only") else call.get("dst")
        if call.get("open_ui"):
            found, _ = pipeline.targets(call["src"], dst, call.files("src"))
            if dst is None or len(found) != 1:
                raise TraceaugError(f"{call['src']}: --open needs one output file")
        chosen = options(call)  # (a bad option is refused before the targets are made)
        targeted = pipeline.targets(call["src"], dst, call.files("src"))
        return pipeline.results(getattr(_module("rewrite", name), rewriter), targeted, chosen, call.job,
                                call.get("keep_bytes", False))
    return run


def show(name: str) -> Callable[[list[dict], Call], None]:
    """``wrote OUT (N events added by NAME)`` for each output, then the summary: on stdout, or
    on stderr when OUT is ``-`` (the trace is there); with ``--open`` the UI then serves OUT."""
    def out(done: list[dict], call: Call) -> None:
        for r in done:  # what was written is a message (stderr); stdout holds the summary only
            if r["out"]:
                said(f"wrote {r['out']} ({r['events']} events added by {name})")
        text = summary_text(name, done, call["fmt"])
        if not call.get("open_ui"):
            echo(paths.shown(text), err=paths.is_stdout(call["dst"]))
            return
        import traceaug.atomic as atomic

        atomic.commit()
        echo(text)
        serve(Path(done[0]["out"]), port=call["port"], browser=not call["no_browser"])
    return out


def command(name: str, help: str, options: tuple, of: Callable[[Call], dict],
            **declared: object) -> Command:
    """IN, OUT (``out``: its ``paths.Output`` settings), ``options``, rewriter and job options;
    ``of(call)``: the rewriter's options; ``declared``: ``load_kind`` and any override."""
    load_kind, out = declared.pop("load_kind"), declared.pop("out", None) or {}
    settings = {"compute": compute(name, of), "show": show(name),
                "kind": lambda p: load_kind, "inputs": ("src",), "prepare": prepare,
                "cli_only": ("fmt", "summary_only", "open_ui", "port", "no_browser"), **declared}
    return Command(name, help, (*arguments(**out), *options, *rewriter_options(), JOB),
                   **settings)
