"""The one path every rewriter takes: targets -> start the copy -> load -> compute -> splice.

A rewriter supplies only its load kind (``read.kinds.KINDS``), its compute function and
its summary. ``run`` resolves the targets (a file, or every rank of a directory), checks
every output against the inputs before any work, starts each copy (gzip deflates the
original text meanwhile), loads the trace with the rewriter's kind, calls ``compute`` and
splices its events in once the engine is closed. Several ranks run on the job's executor
(``job.executor``: a local pool sized to the machine, or Dask).
"""

from __future__ import annotations

import contextlib
import glob
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TraceaugError
from ..job.ranks import TRACE_SUFFIXES, TraceFile, select
from ..job.run import JobOptions
from ..job.storage import is_url
from ..paths import name_of
from ..read.inputs import output_name, trace_input
from ..read.kinds import KINDS
from . import splice

if TYPE_CHECKING:
    from ..read.prefetch import Prefetched
    from ..trace import Trace


@dataclass(frozen=True)
class Rewriter:
    """What makes one rewriter: its name (the marker entry), load kind, compute and summary."""

    name: str  # "counters", "critical-path", "patterns": the marker entry and the tag of its events
    kind: str  # a key of read.kinds.KINDS
    compute: Callable[[Trace, dict], tuple[dict, list[bytes]]]  # (trace, options) -> (data, events)
    summary: Callable[[list[dict], str], str]  # results of every rank, fmt -> stdout text


@dataclass(frozen=True)
class Target:
    """One input file and where its copy goes (None: summary only)."""

    file: TraceFile
    out: Path | None


def _names_directory(dst: str | Path) -> bool:
    text = os.fspath(dst)
    return text.endswith(("/", os.sep)) or Path(text).is_dir()


def targets(src: str | Path, dst: str | Path | None, rank: int | None = None,
            skip_bad: bool = False, storage: dict | None = None) -> tuple[list[Target], Path | None]:
    """Every input of ``src`` (``read.inputs.select``) with its output, and the output
    directory to create (None when there is none to make). OUT is a directory when it
    ends with ``/`` or is one: a file IN is written into it under its own name. A directory
    IN needs a directory OUT, never a file-like name."""
    url = is_url(src)
    src = src if url else Path(src)
    files = select(src, rank, skip_bad, storage)
    if dst is None:
        return [Target(f, None) for f in files], None
    as_dir, out = _names_directory(dst), Path(dst)
    if url and (len(files) > 1 or str(src).endswith("/")):  # a URL prefix of ranks
        as_dir = True
    elif not url and src.is_dir():
        if out.exists() and not out.is_dir():
            raise TraceaugError(f"{out}: IN is a directory, so OUT must be one too")
        if not as_dir and out.name.endswith((*TRACE_SUFFIXES, ".gz")):
            raise TraceaugError(f"{out}: IN is a directory, so OUT must be one too "
                                f"(end it with / for a directory of that name)")
        if out.resolve() == src.resolve():
            raise TraceaugError(f"{out}: is the input directory; choose another output")
        as_dir = True
    if as_dir:
        made = None if out.is_dir() else out
        return [Target(f, out / (name_of(f.path) if url else output_name(f.path))) for f in files], made
    return [Target(f, out) for f in files], None


def _check(found: list[Target], made: Path | None) -> None:
    """Outputs never replace an input; a missing output directory is made (only here)."""
    inputs = {t.file.path.resolve() for t in found if not is_url(t.file.path)}
    for t in found:
        if is_url(t.file.path):
            continue
        if t.out is not None and t.out.resolve() in inputs and t.out.resolve() != t.file.path.resolve():
            raise TraceaugError(f"{t.out}: is one of the input files; choose another output")
    if made is not None:
        if made.exists() and not made.is_dir():
            raise TraceaugError(f"{made}: exists and is not a directory")
        try:
            made.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TraceaugError(f"{made}: cannot make the output directory ({e.strerror})") from None
    for t in found:
        if t.out is not None:
            splice.check_output(Path(os.devnull) if is_url(t.file.path) else t.file.path, t.out)


class _PrepareOnTake:
    """The load's ``prefetched``: prepares the copy (``splice.Copy.prepare``: the moves of what
    the Perfetto UI would drop) the moment the loader takes the plan from the child that made
    it, so they run while the engine parses and answers the compute's queries (wasm, without
    the GIL)."""

    def __init__(self, copy: splice.Copy, prefetched: Prefetched | None) -> None:
        self.copy, self.prefetched = copy, prefetched

    def take(self, path: Path, **kind):
        plan = self.prefetched.take(path, **kind) if self.prefetched is not None else None
        if plan is not None:
            self.copy.prepare(plan)
        return plan


def _one(rewriter: Rewriter, target: Target, options: dict, tp_bin: str | None, quiet: bool,
         prefetched: Prefetched | None, keep_bytes: bool, progress: bool | None = None,
         storage: dict | None = None) -> dict:
    """Load, compute and write one target (a URL input fetched first: ``job.tasks.local``);
    its summary data with ``rank``, ``file``, ``out`` and ``events`` (how many were added)."""
    from ..job.executor import in_worker
    from ..job.tasks import local

    with local(target.file, {"storage": storage}) as path:
        return _loaded(rewriter, target, path, options, tp_bin, quiet, prefetched, keep_bytes,
                       progress, 0 if in_worker() else 1 if quiet else None)


def _loaded(rewriter: Rewriter, target: Target, path: Path, options: dict, tp_bin: str | None,
            quiet: bool, prefetched: Prefetched | None, keep_bytes: bool, progress: bool | None,
            workers: int | None) -> dict:
    from ..trace import Trace

    tf, out = target.file, target.out
    copy = early = None
    if out is not None:  # started first: gzip output deflates the original text meanwhile
        copy = splice.Copy(trace_input(path), out, splice.entry(rewriter.name, options),
                           keep_bytes=keep_bytes)
        early = _PrepareOnTake(copy, prefetched)
    try:
        # quiet: several ranks at once
        show = False if quiet else progress
        with Trace(path, tp_bin=tp_bin, progress=show, kind=rewriter.kind,
                   workers=workers, prefetched=early or prefetched) as trace:
            if out is not None and trace.plan is None:
                raise TraceaugError(f"{tf.path}: not a Chrome JSON trace; {rewriter.name} "
                                    "needs one")
            if copy is not None:  # no child made the plan: prepare now, in a thread meanwhile
                copy.prepare(trace.plan)
            data, events = rewriter.compute(trace, options)
            rank = trace.rank if trace.rank is not None else tf.rank
            layout = trace.plan.layout if trace.plan is not None else None
        if copy is not None:  # the engine is closed: its memory is free for the copy
            copy.finish(layout, events, show)
    finally:
        if copy is not None:
            copy.cancel()
    return {**data, "rank": rank, "file": str(tf.path), "out": None if out is None else str(out),
            "events": len(events) if out is not None else 0}


def _task(rewriter: Rewriter, target: Target, options: dict, tp_bin: str | None,
          keep_bytes: bool, storage: dict | None = None) -> tuple[dict, list]:
    """One rank of several (``job.executor``): ``_one``, quiet; in a worker process its output
    is held complete but unrenamed and handed back (``atomic.held``) for this run to commit
    with its others."""
    from .. import atomic
    from ..job.executor import in_worker

    if not in_worker():
        return _one(rewriter, target, options, tp_bin, True, None, keep_bytes, storage=storage), []
    with atomic.held() as files:
        done = _one(rewriter, target, options, tp_bin, True, None, keep_bytes, storage=storage)
    return done, list(files)


def _leftovers(found: list[Target]) -> None:
    """Temporary outputs of ranks stopped mid-write (a pool process killed): removed."""
    for t in found:
        if t.out is not None:
            for tmp in t.out.parent.glob(f".{glob.escape(t.out.name)}.*.tmp"):
                with contextlib.suppress(OSError):
                    tmp.unlink()


def results(rewriter: Rewriter, src: str | Path, dst: str | Path | None, options: dict, *,
            rank: int | None = None, tp_bin: str | None = None,
            prefetched: Prefetched | None = None, keep_bytes: bool = False,
            progress: bool | None = None, job: JobOptions | None = None) -> list[dict]:
    """Every target's summary data (``_one``), the ranks on the job's executor
    (``job.api.gather``); no output directory is left behind by a run that fails.
    ``progress``: progress lines on stderr (default: on a terminal; never with several ranks)."""
    from .. import atomic
    from ..job.api import gather

    if rewriter.kind not in KINDS:
        raise ValueError(f"{rewriter.name}: unknown load kind {rewriter.kind!r}")
    job = job or JobOptions()
    found, made = targets(src, dst, rank, job.skip_bad, job.storage)
    _check(found, made)
    try:
        if len(found) == 1:
            return [_one(rewriter, found[0], options, tp_bin, False, prefetched, keep_bytes,
                         progress, job.storage)]
        by_file = {t.file: t for t in found}
        task = partial(_by_file, by_file=by_file, rewriter=rewriter, options=options,
                       tp_bin=tp_bin, keep_bytes=keep_bytes)
        done = gather(src, task, rewriter.kind, job=job, files=[t.file for t in found],
                      on_result=lambda _, r: atomic.adopt(r[1]))
        return [r for r, _ in done.values()]
    except BaseException:
        _leftovers(found)
        if made is not None:
            with contextlib.suppress(OSError):
                made.rmdir()  # only when empty: what a run before this one wrote stays
        raise


def _by_file(file: TraceFile, _options: dict, by_file: dict, rewriter: Rewriter, options: dict,
             tp_bin: str | None, keep_bytes: bool) -> tuple[dict, list]:
    """``_task`` for the target of ``file`` (``job.api.gather`` hands each task its file and
    the job's options: ``storage`` for URLs)."""
    return _task(rewriter, by_file[file], options, tp_bin, keep_bytes, _options.get("storage"))


def run(rewriter: Rewriter, src: str | Path, dst: str | Path | None, options: dict, *,
        rank: int | None = None, fmt: str = "table", tp_bin: str | None = None,
        prefetched: Prefetched | None = None, keep_bytes: bool = False,
        open_ui: bool | dict = False, job: JobOptions | None = None) -> str:
    """Run ``rewriter`` over ``src`` into ``dst`` (None: summary only) and return its summary;
    ``wrote OUT (N events added by NAME)`` goes to stderr for each output.

    ``open_ui`` (True, or ``view.server.serve`` options such as port / browser): print the
    summary, then serve the one output in the Perfetto UI until interrupted; returns ""."""
    if open_ui:
        found, _ = targets(src, dst, rank, job.skip_bad if job else False,
                           job.storage if job else None)
        if dst is None or len(found) != 1:
            raise TraceaugError(f"{src}: --open needs one output file")
        from ..view.server import check_port

        check_port(open_ui.get("port", 0) if isinstance(open_ui, dict) else 0)
    done = results(rewriter, src, dst, options, rank=rank, tp_bin=tp_bin,
                   prefetched=prefetched, keep_bytes=keep_bytes, job=job)
    from ..paths import shown  # the name the user gave ("stdout" for OUT "-")

    for r in done:  # what was written is a message (stderr); stdout holds the summary only
        if r["out"]:
            print(shown(f"wrote {r['out']} ({r['events']} events added by {rewriter.name})"),
                  file=sys.stderr)
    text = rewriter.summary(done, fmt)
    if not open_ui:
        return text
    from .. import atomic
    from ..view.server import serve

    atomic.commit()  # this run's outputs in place before the UI reads one
    sys.stdout.write(text)
    sys.stdout.flush()
    serve(found[0].out, announce=lambda m: print(m, file=sys.stderr),
          **(open_ui if isinstance(open_ui, dict) else {}))
    return ""
