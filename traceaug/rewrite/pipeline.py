"""The one path every rewriter takes: targets -> check outputs -> start the copy (gzip deflates the input
meanwhile) -> load with the rewriter's kind -> compute events -> splice them in once the engine is closed."""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import traceaug.atomic as atomic
import traceaug.runtime as runtime

from ..errors import TraceaugError
from ..job import parts
from ..job.run import Item, JobOptions, Work
from ..job.run import run as run_job
from ..read.inputs import output_name, trace_input
from ..read.kinds import KINDS
from ..read.ranks import TRACE_SUFFIXES, TraceFile
from ..read.storage import is_url

if TYPE_CHECKING:
    from ..trace import Trace


@dataclass(frozen=True)
class Rewriter:
    """What makes one rewriter: its name (the marker entry and the tag of its events), its load
    kind (a key of ``read.kinds.KINDS``) and ``compute(trace, options) -> (data, events)``."""

    name: str
    kind: str
    compute: Callable[[Trace, dict], tuple[dict, list[bytes]]]


def _names_directory(dst: str | Path) -> bool:
    text = os.fspath(dst)
    return text.endswith(("/", os.sep)) or Path(text).is_dir()


def targets(src: str | Path, dst: str | Path | None, files: list[TraceFile]
            ) -> tuple[list[Item], Path | None]:
    """Each of ``src``'s selected rank files with its output, and the output directory to make (or None). OUT
    is a directory if it ends with ``/`` or is one (a file IN keeps its name); a directory IN needs one."""
    url = is_url(src)
    src = src if url else Path(src)
    if dst is None:
        return [Item(f.rank, f) for f in files], None
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
        return [Item(f.rank, f, out=out / (_name(f.path) if url else output_name(f.path)))
                for f in files], made
    return [Item(f.rank, f, out=out) for f in files], None


def _name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _check(found: list[Item], made: Path | None) -> None:
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
            from . import splice  # here: a command without OUT writes no copy

            splice.check_output(Path(os.devnull) if is_url(t.file.path) else t.file.path, t.out)


def rewrite_rank(path: Path, item: Item, rewriter: Rewriter, options: dict,
                 keep_bytes: bool) -> tuple[dict, list]:
    """One rank's task (``path``: its local file) -> summary with ``rank``, ``file``, ``out``, ``events``;
    in a job worker the output is held unrenamed (``atomic.held``) for the run to commit with the others."""
    if not runtime.current().worker:
        return _rewrite(path, item, rewriter, options, keep_bytes), []
    with atomic.held() as files:
        done = _rewrite(path, item, rewriter, options, keep_bytes)
    return done, list(files)


def _rewrite(path: Path, item: Item, rewriter: Rewriter, options: dict,
             keep_bytes: bool) -> dict:
    from ..trace import Trace

    tf, out = item.file, item.out
    copy = None
    if out is not None:  # started first: gzip output deflates the original text meanwhile
        from . import splice

        copy = splice.Copy(trace_input(path), out, splice.entry(rewriter.name, options),
                           keep_bytes=keep_bytes)
    try:
        with Trace(path, rewriter.kind, on_plan=copy.prepare if copy else None) as trace:
            if out is not None and trace.plan is None:
                raise TraceaugError(f"{tf.path}: not a Chrome JSON trace; {rewriter.name} "
                                    "needs one")
            data, events = rewriter.compute(trace, options)
            rank = trace.rank if trace.rank is not None else tf.rank
            layout = trace.plan.layout if trace.plan is not None else None
        if copy is not None:  # the engine is closed: its memory is free for the copy
            copy.finish(layout, events, runtime.current().shows_progress())
    finally:
        if copy is not None:
            copy.cancel()
    return {**data, "rank": rank, "file": str(tf.path), "out": None if out is None else str(out),
            "events": len(events) if out is not None else 0}


def _leftovers(found: list[Item]) -> None:
    """Temporary outputs of ranks stopped mid-write (a pool process killed): removed."""
    for t in found:
        if t.out is not None:
            for tmp in t.out.parent.glob(f".{glob.escape(t.out.name)}.*.tmp"):
                with contextlib.suppress(OSError):
                    tmp.unlink()


def results(rewriter: Rewriter, targeted: tuple[list[Item], Path | None], options: dict,
            job: JobOptions | None = None, keep_bytes: bool = False) -> list[dict]:
    """Every rank's summary data (``rewrite_rank``) of its ``targets``, the ranks on the job
    runner; no output directory is left behind by a run that fails."""
    if rewriter.kind not in KINDS:
        raise ValueError(f"{rewriter.name}: unknown load kind {rewriter.kind!r}")
    found, made = targeted
    _check(found, made)
    work = Work(rewriter.kind, rewrite_rank, {"rewriter": rewriter, "options": options,
                                              "keep_bytes": keep_bytes}, parts.local_file)
    try:
        done = run_job(work, found, job, on_result=lambda _, r: atomic.adopt(r[1]))
        return [r for r, _ in done.values()]
    except BaseException:
        _leftovers(found)
        if made is not None:
            with contextlib.suppress(OSError):
                made.rmdir()  # only when empty: what a run before this one wrote stays
        raise
