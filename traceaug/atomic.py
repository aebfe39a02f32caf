"""Write files all at once: a temporary file beside each, renamed into place when complete. In ``all_or_none``
(every CLI command) a run's outputs all go in place if it succeeds, none if it fails (old files put back)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from . import interrupt

_lock = threading.Lock()
_pending: list[tuple[str, Path]] | None = None  # (temporary, final) while a run is open
_stdout_spools: set[Path] = set()  # temporary files that stand for "-" (stdout)
# a local stand-in (file or directory) -> the URL it is uploaded to, and how
_remote: dict[Path, tuple[str, Callable[[str, str], None]]] = {}


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
            e.filename = str(path)
        raise


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


def _undo(placed: list[tuple[Path, str | None, bool]]) -> None:
    """Put back what was at each path before the commit (its old file, or nothing)."""
    for path, old, renamed in reversed(placed):
        with contextlib.suppress(OSError):
            if renamed and old is None:
                os.unlink(path)
            elif old is not None:
                os.replace(old, path)


def remote(local: Path, url: str, upload: Callable[[str, str], None]) -> None:
    """Files written at ``local`` (or, for a directory, in it) go to ``url`` (or under it) when
    the run commits, by ``upload(file, url)`` (all of a file or nothing)."""
    _remote[Path(local)] = (url.rstrip("/") if url.endswith("/") else url, upload)


def _url_of(path: Path) -> tuple[str, Callable[[str, str], None]] | None:
    if path in _remote:
        return _remote[path]
    if path.parent in _remote:
        url, upload = _remote[path.parent]
        return f"{url}/{path.name}", upload
    return None


def _commit(pending: list[tuple[str, Path]]) -> None:
    placed: list[tuple[Path, str | None, bool]] = []  # (path, its old file aside, new one in)
    try:
        for tmp, path in pending:
            interrupt.check()  # a signal during the commit undoes it, as a failure does
            remote = _url_of(Path(path))
            if remote is not None:  # all of the object or nothing (an interrupt discards it)
                remote[1](tmp, remote[0])
                os.unlink(tmp)
                continue
            with interrupt.deferred():  # never stopped between moving aside and renaming
                if path in _stdout_spools:
                    with open(tmp, "rb") as f:
                        out = sys.stdout.buffer
                        shutil.copyfileobj(f, out, 1 << 20)
                        out.flush()
                    os.unlink(tmp)
                    continue
                placed.append((path, _aside(path), False))
                os.replace(tmp, path)
                placed[-1] = (path, placed[-1][1], True)
    except BaseException:
        with interrupt.deferred():
            _undo(placed)
        raise
    finally:
        for tmp, _ in pending:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    for _path, old, _ in placed:  # committed: the old files go
        if old is not None:
            with contextlib.suppress(OSError):
                os.unlink(old)


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


def commit() -> None:
    """Put every file written so far in this run in place (before ``--open`` serves one)."""
    global _pending
    with _lock:
        pending, _pending = _pending, ([] if _pending is not None else None)
    if pending:
        _commit(pending)


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
        for tmp, _ in pending:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
