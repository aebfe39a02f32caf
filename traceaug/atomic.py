"""Write files all at once: a temporary file beside each, renamed into place when complete. In ``all_or_none``
(every CLI command) a run's outputs all go in place if it succeeds, none if it fails (old files put back)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Protocol

import traceaug.interrupt as interrupt

from .errors import TraceaugError

_lock = threading.Lock()
_pending: list[tuple[str, Path]] | None = None  # (temporary, final) while a run is open
_stdout_spools: set[Path] = set()  # temporary files that stand for "-" (stdout)
# a local stand-in (file or directory) -> the URL it is uploaded to, and how
_remote: dict[Path, tuple[str, Place]] = {}
_said: list[str] = []  # this run's "wrote ..." lines, printed once its outputs are in place


def _finish_mode(tmp: str) -> None:
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)


@contextlib.contextmanager
def atomic_output(path: Path, mode: str = "wb", hold: bool = True) -> Iterator[IO]:
    """Yield a file to write; on success it replaces ``path`` with the usual permissions
    (at the end of the run inside ``all_or_none``, unless ``hold`` is False: a cache file)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
        _finish_mode(tmp)
        with _lock:
            if _pending is not None and hold:
                _pending.append((tmp, path))
                return
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename in (None, tmp):  # a full disk: say which output
            if path in _stdout_spools:  # not stdout's fault: $TMPDIR, where it waits for the commit
                raise TraceaugError(f"{path.parent.parent}: cannot hold stdout's output there until the "
                                    f"run ends ({e.strerror}); set TMPDIR to a larger disk") from None
            e.filename = str(path)
        raise


@contextlib.contextmanager
def scratch(prefix: str, dir: str | None = None) -> Iterator[Path]:
    """A directory (in ``dir``, else $TMPDIR) for a run's intermediate files, removed after the block however
    it ends: made and removed with signals held (a Ctrl-C inside the removal left it behind), a signal raised
    after."""
    d = scratch_dir(prefix, dir)
    try:
        yield d
    finally:
        drop_scratch(d)


def scratch_dir(prefix: str, dir: str | None = None) -> Path:
    """``scratch``'s directory for a run whose files outlive one block (diff's, until served; an export's
    copy, until closed): made with signals held, a signal raised after (then none is left)."""
    with interrupt.held():
        d = Path(tempfile.mkdtemp(prefix=prefix, dir=dir))
    try:
        interrupt.check()
    except BaseException:
        drop_scratch(d)
        raise
    return d


def drop_scratch(d: Path) -> None:
    """Remove ``scratch_dir``'s directory with signals held, a signal raised after."""
    with interrupt.held():
        shutil.rmtree(d, ignore_errors=True)
    interrupt.check()


def stdout_spool(directory: Path) -> Path:
    """A path to write in place of stdout (``-``): copied to stdout when the run commits."""
    path = Path(directory) / "stdout.json"
    _stdout_spools.add(path)
    return path


def _aside(path: Path) -> str | None:
    """Move the file now at ``path`` (not a directory) to a hidden name beside it, to put it
    back if the run's commit fails; None when there is none."""
    if not os.path.lexists(path) or (os.path.isdir(path) and not os.path.islink(path)):
        return None  # a directory is never moved: renaming over it fails, and says so
    fd, old = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old")
    os.close(fd)
    try:
        os.replace(path, old)
    except BaseException:
        os.unlink(old)
        raise
    return old


class Place(Protocol):
    """Where a run's outputs go in place: this file system (``_LOCAL``), or a store of URLs
    (``read.storage.STORE``), which first uploads each whole (``stage``) beside its target."""

    def check(self, target: str) -> None: ...  # a target that cannot be written raises
    def stage(self, tmp: str, target: str) -> str: ...  # the new content, ready to put in place
    def aside(self, target: str) -> str | None: ...  # what is at ``target`` kept aside (None: nothing)
    def put(self, new: str, target: str) -> None: ...  # ``new`` moved to ``target``
    def remove(self, target: str) -> None: ...


class _Local:
    """Local files: renamed into place, the old file renamed aside."""

    def check(self, target: str) -> None:
        pass

    def stage(self, tmp: str, target: str) -> str:
        return tmp

    def aside(self, target: str) -> str | None:
        return _aside(Path(target))

    def put(self, new: str, target: str) -> None:
        os.replace(new, target)

    def remove(self, target: str) -> None:
        os.unlink(target)


_LOCAL = _Local()


def _undo(placed: list[tuple[Place, str, str | None, bool]]) -> None:
    """Put back what was at each target before the commit (its old content, or nothing); an old one
    that cannot be put back stays where it was kept aside."""
    for where, target, old, put in reversed(placed):
        with contextlib.suppress(Exception):
            if put and old is None:
                where.remove(target)
            elif old is not None:
                where.put(old, target)


def remote(local: Path, url: str, store: Place) -> None:
    """Files written at ``local`` (or, for a directory, in it) go to ``url`` (or under it) when the run
    commits, through ``store``: every one uploaded before any is put in place."""
    _remote[Path(local)] = (url.rstrip("/") if url.endswith("/") else url, store)


def url_of(path: Path) -> str | None:
    """The URL a local stand-in (``remote``) is uploaded to, None for a local output."""
    found = _url_of(Path(path))
    return None if found is None else found[0]


def check_remote(path: Path) -> None:
    """Refuse (its store's error) a stand-in whose URL cannot be written (no such bucket)."""
    found = _url_of(Path(path))
    if found is not None:
        found[1].check(found[0])


def _url_of(path: Path) -> tuple[str, Place] | None:
    if path in _remote:
        return _remote[path]
    if path.parent in _remote:
        url, store = _remote[path.parent]
        return f"{url}/{path.name}", store
    return None


def _stdout(tmp: str) -> None:
    with open(tmp, "rb") as f:
        out = sys.stdout.buffer
        shutil.copyfileobj(f, out, 1 << 20)
        out.flush()


def _commit(pending: list[tuple[str, Path]], said: tuple[str, ...] = ()) -> None:
    """Every output uploaded (a URL's) first, then each moved in place, its old content kept aside; a
    failure or a signal puts every old one back. Once all are in place, ``said`` is said."""
    placed: list[tuple[Place, str, str | None, bool]] = []  # (where, target, old aside, new in)
    ready: list[list] = []  # [where, new (None once in place), target]
    try:
        for tmp, path in pending:
            interrupt.check()  # a signal during the commit undoes it, as a failure does
            target, where = _url_of(Path(path)) or (str(path), _LOCAL)
            with interrupt.deferred():  # stopped between its blocks, never before it is listed for removal
                ready.append([where, where.stage(tmp, target), target])
        for entry in ready:
            where, new, target = entry
            interrupt.check()
            with interrupt.deferred():  # never stopped between putting aside and putting in
                if Path(target) in _stdout_spools:
                    _stdout(new)
                    continue
                placed.append((where, target, where.aside(target), False))
                where.put(new, target)
                entry[1] = None
                placed[-1] = (*placed[-1][:3], True)
    except BaseException:
        with interrupt.deferred():
            _undo(placed)
        raise
    finally:
        for tmp, _ in pending:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for where, new, _ in ready:  # uploaded, never put in place
            if new is not None and where is not _LOCAL:
                with contextlib.suppress(Exception):
                    where.remove(new)
    with interrupt.held():  # committed: a signal now neither leaves an old copy nor hides what was written
        for where, _target, old, _ in placed:
            if old is not None:
                with contextlib.suppress(Exception):
                    where.remove(old)
        _say(list(said))


@contextlib.contextmanager
def held() -> Iterator[list[tuple[str, Path]]]:
    """In a job's worker (``rewrite.pipeline``): hold the block's ``atomic_output`` files unrenamed, as
    (temporary, final) pairs for the parent to ``adopt``; a failure removes them."""
    global _pending
    with _lock:
        outer, _pending = _pending, []
    mine = _pending
    try:
        yield mine
    except BaseException:
        for tmp, _ in mine:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    finally:
        with _lock:
            _pending = outer


def adopt(files: list[tuple[str, Path]]) -> None:
    """Take a worker's ``held`` files into this run: renamed into place with its other
    outputs (at once when no run is open)."""
    with _lock:
        if _pending is not None:
            _pending.extend(files)
            return
    _commit(list(files))


def announce(text: str) -> None:
    """Say ``text`` (a line on stderr: "wrote OUT") once this run's outputs are in place, never when it
    fails; at once when none waits (outside a run, or after ``commit``)."""
    with _lock:
        if _pending:
            _said.append(text)
            return
    _say([text])


def _say(lines: list[str]) -> None:
    if sys.stderr is not None and lines:
        sys.stderr.write("".join(f"{line}\n" for line in lines))
        sys.stderr.flush()


def commit() -> None:
    """Put every file written so far in this run in place (before ``--open`` serves one), then say
    what was written."""
    global _pending
    with _lock:
        pending, _pending = _pending, ([] if _pending is not None else None)
    lines = tuple(_said)
    _said.clear()
    if pending:
        _commit(pending, lines)
    else:
        _say(list(lines))


@contextlib.contextmanager
def all_or_none() -> Iterator[None]:
    """Hold every ``atomic_output`` of the block until it ends: all renamed into place when
    it succeeds, all removed when it fails or is interrupted."""
    global _pending
    with _lock:
        outer, _pending = _pending, []
    try:
        yield
        commit()
    finally:
        with _lock:
            pending, _pending = _pending or [], outer
        _said.clear()  # a run that failed wrote nothing
        for tmp, _ in pending:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
