"""Which files of a directory are a job's ranks and each one's rank: ``distributedInfo.rank``, an nsys MPI
rank, else ``rank-3``/``rank_3``/``rank3`` in the name; unreadable entries are bad ranks (``skip_bad``)."""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import orjson

from ..errors import TraceaugError

TRACE_SUFFIXES = (".json", ".json.gz")
EXPORT_SUFFIXES = (".sqlite",)  # nsys export --type sqlite
OUTPUT_MARK = b'"traceaug"'
_DIST = re.compile(rb'"distributedInfo"\s*:\s*(\{[^{}]*\})')
_NAME_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_PEEK = 1 << 20


@dataclass(frozen=True)
class TraceFile:
    """One input as the user named it (an nsys export stays its ``.sqlite``, a URL its text; readers take
    ``read.inputs.trace_input``) and its rank (None for a lone file)."""

    path: Path
    rank: int | None


def _peek(path: Path) -> bytes:
    from . import source

    return next(source.iter_blocks(path, block=_PEEK), b"")


def rank_of(path: Path, head: bytes | None = None) -> int | None:
    """The rank recorded in the file, else the one in its name, else None."""
    from . import nsys

    head = _peek(path) if head is None else head
    if head.startswith(nsys.SQLITE_MAGIC):
        rank = nsys.recorded_rank(path)
        if rank is not None:
            return rank
    else:
        rank = _distributed(head).get("rank")
        if isinstance(rank, int) and not isinstance(rank, bool):
            return rank
    m = _NAME_RANK.search(path.name)
    return int(m.group(1)) if m else None


def _distributed(head: bytes) -> dict:
    """The ``distributedInfo`` object in a trace's first bytes ({} when there is none)."""
    m = _DIST.search(head)
    try:
        info = orjson.loads(m.group(1)) if m else {}
    except orjson.JSONDecodeError:
        return {}
    return info if isinstance(info, dict) else {}


SAME_JOB_US = 24 * 3600e6  # ranks of one job run together: their first events lie within a day
EPOCH_US = 1e15  # 2001 in µs since 1970: a ts below it counts from boot or the trace's start
_CLOCKS = ("since 1970 (epoch µs)", "from boot or the trace's start")


def _other_jobs(inputs: list) -> list:
    """(file, why) for each rank that cannot be of the job the others make: a world size other
    than the most ranks record, a rank outside the world, a clock of another kind than most
    ranks' (epoch or not), or an epoch start over ``SAME_JOB_US`` from the ranks' median start
    (another run). Clocks since boot are not compared: hosts boot at different times."""
    from collections import Counter

    if len(inputs) < 2:
        return []
    by_rank = sorted(inputs, key=lambda fs: (fs[1].rank is None, fs[1].rank or 0))
    worlds = Counter(s.world for _, s in by_rank if s.world is not None)
    world = worlds.most_common(1)[0][0] if worlds else None
    starts = [s.start_us for _, s in by_rank if s.start_us is not None]
    epoch = sum(t >= EPOCH_US for t in starts) * 2 >= len(starts)  # most ranks' clock
    dated = sorted(t for t in starts if (t >= EPOCH_US) == epoch)
    middle = dated[(len(dated) - 1) // 2] if dated else None
    odd = []
    for f, s in by_rank:
        if s.world is not None and s.world != world:
            why = f"records world size {s.world}, the other ranks {world}"
        elif world is not None and s.rank is not None and not 0 <= s.rank < world:
            why = f"rank {s.rank} is outside the job's world size {world}"
        elif s.start_us is not None and (s.start_us >= EPOCH_US) != epoch:
            mine, theirs = _CLOCKS if not epoch else _CLOCKS[::-1]
            why = f"dates its events {mine}, the other ranks {theirs}"
        elif s.start_us is not None and epoch and abs(s.start_us - middle) > SAME_JOB_US:
            why = f"starts {_far(abs(s.start_us - middle))} away from the other ranks"
        else:
            continue
        odd.append((f, why))
    return odd


def _far(us: float) -> str:
    """A long time in words: hours, days or years."""
    hours = us / 3600e6
    return (f"{hours:.1f} hours" if hours < 48 else f"{hours / 24:.1f} days" if hours < 24 * 730
            else f"{hours / (24 * 365.25):.1f} years")


def _other_jobs_said(where, odd: list, skip_bad: bool, quiet: bool) -> None:
    """Ranks of other jobs (``_other_jobs``): each named in a warning and left out with
    ``skip_bad``, else refused in one line naming them."""
    if not odd:
        return
    if skip_bad:
        for f, why in odd if not quiet else ():
            print(f"traceaug: warning: {f}: {why}; skipped", file=sys.stderr)
        return
    named = "; ".join(f"{_name(f)} {why}" for f, why in odd[:3])
    more = f"; and {len(odd) - 3} more" if len(odd) > 3 else ""
    raise TraceaugError(f"{where}: not the ranks of one job: {named}{more} (--skip-bad-ranks goes "
                        "on without them)")


def is_traceaug_output(head: bytes) -> bool:
    """True for files traceaug wrote (their first bytes carry the marker key)."""
    start = head.lstrip()[:4096]
    return start.startswith(b"{") and OUTPUT_MARK in start


def unreadable(f: Path) -> str | None:
    """Why a trace-named directory entry cannot be a rank (None: a regular, non-empty file)."""
    try:
        st = os.stat(f)
    except OSError as e:
        if f.is_symlink():
            return "symlink loop" if e.errno == 40 else "dangling symlink"
        return e.strerror or str(e)
    if stat.S_ISDIR(st.st_mode):
        return "a directory"
    if not stat.S_ISREG(st.st_mode):
        what = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
        return f"{what}{' (through a symlink)' if f.is_symlink() else ''}, not a trace file"
    if st.st_size == 0:
        return "empty file"
    if not os.access(f, os.R_OK):
        return "cannot read (Permission denied)"
    return None


def _cut_short(path: Path) -> str | None:
    """Why a rank file ends before its trace does (``--skip-bad-ranks``, which reads each one to its
    end for this): a gzip stream cut or corrupt, a JSON object not closed; None when it is whole."""
    from . import source

    if source.is_gzip(path):
        tail = b""
        try:
            for block in source.iter_blocks(path):
                tail = block[-64:] if len(block) >= 64 else (tail + block)[-64:]
        except TraceaugError as e:
            return str(e).removeprefix(f"{path}: ")
    else:
        with open(path, "rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - 64, 0))
            tail = f.read()
    head = _peek(path).lstrip()
    if head.startswith(b"{") and not tail.rstrip().endswith(b"}"):  # (an array may stay open)
        return "JSON trace file is incomplete: it ends before its last } (truncated?)"
    return None


def _bad(path, bad: list, skip_bad: bool, quiet: bool = False) -> None:
    """Name every bad entry: a warning each when skipped, else one error for all of them
    (``quiet``: a look ahead, the prefetch's, names none: the command does)."""
    for f, why in bad if not quiet else ():
        said = "warning" if skip_bad else "error"
        print(f"traceaug: {said}: {f}: {why}{'; skipped' if skip_bad else ''}", file=sys.stderr)
    if bad and not skip_bad:
        raise TraceaugError(f"{path}: cannot read {len(bad)} rank file(s), named above "
                            "(--skip-bad-ranks goes on without them)")


def resolve(path: str | Path, skip_bad: bool = False, storage: dict | None = None,
            quiet: bool = False) -> list[TraceFile]:
    """Files to read for ``path`` (a file, a directory, or an fsspec URL of an object or prefix;
    ``storage``: its options), one per rank of a directory (``quiet``: unreadable entries not named)."""
    from .storage import is_url

    if is_url(path):
        return _resolve_url(str(path), skip_bad, storage)
    path = Path(path)
    if not path.is_dir():
        from ..read.nsys import is_report, report_error

        if is_report(path):
            raise report_error(path)
        if not path.exists():
            raise TraceaugError(f"{path}: no such file or directory")
        return [TraceFile(path, None)]
    return _ranked(path, sorted(path.iterdir()), (*TRACE_SUFFIXES, *EXPORT_SUFFIXES), unreadable, _peek,
                   skip_bad, quiet)


def _resolve_url(url: str, skip_bad: bool, storage: dict | None) -> list[TraceFile]:
    """``resolve`` for a URL: the object, or the trace objects under the prefix."""
    from .storage import head, listing, size

    names, prefix = listing(url, storage)
    if not prefix:
        return [TraceFile(url, None)]  # type: ignore[arg-type]  (a URL: tasks fetch it)
    return _ranked(url, names, TRACE_SUFFIXES,
                   lambda name: "empty object" if size(name, storage) == 0 else None,
                   lambda name: head(name, storage, _PEEK), skip_bad)


def _ranked(where, entries: list, suffixes: tuple[str, ...], why_bad, peek, skip_bad: bool,
            quiet: bool = False) -> list[TraceFile]:
    """The ``entries`` (files or URLs) named ``*suffixes``, not hidden, by rank: those ``why_bad`` finds a
    reason against named (``_bad``), the others' first bytes read by ``peek``; traceaug outputs beside their
    inputs skipped (a directory of outputs only is read as is); a rank twice, or unranked files beside
    others, refused."""
    found, bad = [], []
    for f in entries:
        if not _name(f).endswith(suffixes) or _name(f).startswith("."):
            continue
        why = why_bad(f)
        if why is None:
            try:
                seen = _peeked(f, peek(f))
                why = seen.not_trace
            except TraceaugError as e:  # a gzip cut short or corrupt in its first MB
                why = str(e).removeprefix(f"{f}: ")
        if why is None and skip_bad and isinstance(f, Path):
            why = _cut_short(f)
        if why is not None:
            bad.append((f, why))
        else:
            found.append((f, seen))
    _bad(where, bad, skip_bad, quiet)
    if not found:
        raise TraceaugError(f"{where}: no trace files (*{', *'.join(suffixes)}) in this directory")
    inputs = [(f, seen) for f, seen in found if not seen.output] or found
    odd = _other_jobs(inputs)
    _other_jobs_said(where, odd, skip_bad, quiet)
    left_out = {id(f) for f, _ in odd}
    ranks: dict[int, object] = {}
    unranked: list = []
    for f, seen in inputs:
        if id(f) in left_out:
            continue
        rank = seen.rank
        if rank is None:
            unranked.append(f)
        elif rank in ranks:
            raise TraceaugError(f"{where}: rank {rank} appears twice: {_name(ranks[rank])} and "
                                f"{_name(f)}")
        else:
            ranks[rank] = f
    if unranked:
        if not ranks and len(unranked) == 1:
            return [TraceFile(unranked[0], None)]
        names = ", ".join(_name(f) for f in unranked)
        raise TraceaugError(f"{where}: cannot tell the rank of {names} (no distributedInfo.rank "
                            "or MPI rank recorded, no rank in the file name)")
    return [TraceFile(ranks[r], r) for r in sorted(ranks)]  # type: ignore[arg-type]


@dataclass(frozen=True)
class Peeked:
    """What a file's first bytes say, kept in place of the bytes (a MB a rank: 4 GB for a job
    of 4,096 ranks held at once)."""

    output: bool  # traceaug wrote it (``is_traceaug_output``)
    rank: int | None  # ``rank_of``
    not_trace: str | None = None  # why the content cannot be a trace (``chunks.not_json``)
    world: int | None = None  # ``distributedInfo.world_size``
    start_us: float | None = None  # the median ``ts`` of its first events: when the rank ran


_TIMES = 101  # the first events' ts values that date a rank
_TS = re.compile(rb'"ts"\s*:\s*(-?\d+(?:\.\d+)?)[,}\s]')


def _peeked(f, head: bytes) -> Peeked:
    from . import chunks, nsys

    if head.startswith(nsys.SQLITE_MAGIC):
        not_trace = None
    else:
        not_trace = chunks.not_json(head) if head else "no content (an empty or corrupt gzip)"
    info = _distributed(head)
    world = info.get("world_size")
    times = sorted(float(m.group(1)) for m in islice(_TS.finditer(head), _TIMES))
    return Peeked(is_traceaug_output(head), rank_of(f if isinstance(f, Path) else Path(_name(f)), head),
                  not_trace, world if isinstance(world, int) and not isinstance(world, bool) else None,
                  times[len(times) // 2] if times else None)


def _name(f) -> str:
    return f.name if isinstance(f, Path) else str(f).rstrip("/").rsplit("/", 1)[-1]


def select(path: str | Path, rank: int | None = None, skip_bad: bool = False,
           storage: dict | None = None, quiet: bool = False) -> list[TraceFile]:
    """The files a command reads for ``path`` and ``--rank``: every rank, or the one asked for; a lone file
    is taken for any rank (and carries it) unless it records another (``rank_of``)."""
    files = resolve(path, skip_bad, storage, quiet)
    if rank is None:
        return files
    if len(files) == 1 and files[0].rank is None:
        only = files[0].path
        if isinstance(only, Path):
            found = rank_of(only)
        else:
            from .storage import head

            found = rank_of(Path(_name(only)), head(str(only), storage, _PEEK))
        if found is not None and found != rank:
            raise TraceaugError(f"{path}: holds rank {found}, not rank {rank}")
        return [TraceFile(files[0].path, rank)]
    chosen = [f for f in files if f.rank == rank]
    if not chosen:
        raise TraceaugError(f"{path}: no trace for rank {rank} "
                            f"(it has {', '.join(str(f.rank) for f in files)})")
    return chosen


def pair(a: Path, b: Path, files: tuple[list[TraceFile], list[TraceFile]]
         ) -> tuple[list[tuple[TraceFile, TraceFile]], dict]:
    """Match two jobs' files (``files``: each side's, from ``select``) by rank; one trace on each side
    always pairs. Returns the pairs and {"a": ranks only A has, "b": ranks only B has}."""
    fa, fb = files
    if len(fa) == 1 and len(fb) == 1:  # one trace each: compare them whatever their ranks
        return [(fa[0], fb[0])], {}
    ra, rb = {f.rank: f for f in fa}, {f.rank: f for f in fb}
    common = sorted(set(ra) & set(rb), key=lambda r: (r is None, r))
    unmatched = {"a": sorted(set(ra) - set(rb), key=str), "b": sorted(set(rb) - set(ra), key=str)}
    if not common:
        raise TraceaugError(f"{a} and {b}: no common ranks (A has {sorted(ra, key=str)}, "
                            f"B has {sorted(rb, key=str)})")
    return [(ra[r], rb[r]) for r in common], unmatched
