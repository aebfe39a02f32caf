"""Before any work (each CLI command, ``rewrite.splice.Copy``): refuse an output that is an input (same device
and inode too; for a URL the same object or inside an input prefix), another output, a directory or special
file, or in a missing or unwritable directory."""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

import traceaug.atomic as atomic
import traceaug.interrupt as interrupt
import traceaug.runtime as runtime

from .errors import TraceaugError

STDIO = "-"
TEMP_NAME_EXTRA = 14  # atomic's temporary file: ".NAME.XXXXXXXX.tmp", 14 characters over NAME
_origins: dict[str, tuple[tuple[int, int], str]] = {}  # spooled copy -> (what it was read from, its name)


def spooled(copy: Path, origin: tuple[int, int] | None, name: str) -> None:
    """``copy`` is a spooled input read from the file of identity ``origin`` (stdin redirected from a file:
    ``traceaug critical-path - v.json < v.json``), so no output may be that file."""
    if origin is not None:
        _origins[str(copy)] = (origin, name)


def forget_spooled() -> None:
    _origins.clear()


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_SCHEMES = {"s3a": "s3", "gcs": "gs"}  # another name fsspec gives the same storage


def is_url(path) -> bool:
    """True for an fsspec URL (``s3://bucket/key``...), never for a local path."""
    return isinstance(path, str) and bool(_URL.match(path))


def _local(given):
    """``given``, or the path a ``file://`` URL names (checked as a path is)."""
    if is_url(given) and given.lower().startswith(("file://", "local://")):
        return Path(given.split("://", 1)[1])
    return given


def url_key(url: str) -> str:
    """The object or prefix ``url`` names, however spelt: ``S3a://b//job/x/../`` and ``s3://b/job`` are one;
    an ``http(s)`` URL under the storage option ``endpoint_url`` is its bucket's ``s3://`` URL."""
    endpoint = str(runtime.current().storage.get("endpoint_url") or "").rstrip("/")
    if endpoint and url.startswith(endpoint + "/"):
        url = "s3://" + url[len(endpoint) + 1:]
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    bucket, _, key = rest.lstrip("/").partition("/")
    key = posixpath.normpath("/" + key).lstrip("/")
    return f"{_SCHEMES.get(scheme, scheme)}://{bucket}/{key}".rstrip("/")


def _check_url(o: str, inputs: list[str], seen: dict, directory: bool = False) -> None:
    """One output URL against every input URL (its object, or any under it as a prefix) and the outputs
    ``seen`` so far; ``directory``: a prefix that gets an object per input rank."""
    key = url_key(o)
    for i in inputs:
        held = url_key(i)
        if key == held:
            what = "prefix" if directory or i.endswith("/") else "object"
            raise TraceaugError(f"{o}: is the input {what} {i}; choose another output")
        if key.startswith(held + "/"):
            raise TraceaugError(f"{o}: is inside the input prefix {i} (a rank of the job); "
                                "choose another output")
        if held.rpartition("/")[0] == key and not i.endswith("/"):  # OUT/ gets IN's name in it
            raise TraceaugError(f"{o}: holds the input object {i}, which an output of that name "
                                "would replace; choose another output")
    if key in seen:
        raise TraceaugError(f"{o}: is also the output {seen[key]}; give each output its own name")
    seen[key] = o


def stdin_identity() -> tuple[int, int] | None:
    """(device, inode) of what stdin is, None when it is closed."""
    try:
        st = os.fstat(0)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` names (symlinks followed), None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def input_files(inputs: Iterable[Path]) -> list[Path]:
    """The files the inputs stand for: a file itself, a directory every file in it."""
    files: list[Path] = []
    for p in inputs:
        p = Path(p)
        if str(p) == STDIO:
            continue
        if p.is_dir():
            with contextlib.suppress(OSError):
                files += [f for f in sorted(p.iterdir()) if f.is_file()]
        else:
            files.append(p)
    return files


def _writable_dir(directory: Path) -> str | None:
    """Why a file cannot be created in ``directory`` (None when it can): a real probe, so
    read-only mounts, permissions and /proc are all caught."""
    if not directory.is_dir():
        return f"directory {directory} does not exist"
    with interrupt.deferred():  # a signal never lands between the probe and its removal
        try:
            fd, probe = tempfile.mkstemp(dir=directory, prefix=".traceaug-probe-")
        except OSError as e:
            return f"cannot write in {directory} ({e.strerror})"
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return None


def _check_name(o: Path) -> None:
    """An output name the file system takes, temporary file included: checked before any
    work, so a name too long fails at once and under its own name."""
    shown = str(o) if len(str(o)) <= 80 else str(o)[:60] + "…"
    limit = _limit(o.parent, "PC_PATH_MAX", 4096)
    if len(os.fsencode(str(o.absolute()))) + TEMP_NAME_EXTRA >= limit:
        raise TraceaugError(f"{shown}: path too long ({len(os.fsencode(str(o)))} bytes; "
                            f"the limit is {limit})")
    name_max = _limit(o.parent, "PC_NAME_MAX", 255)
    if len(os.fsencode(o.name)) + TEMP_NAME_EXTRA > name_max:
        raise TraceaugError(f"{shown}: file name too long ({len(os.fsencode(o.name))} bytes; "
                            f"at most {name_max - TEMP_NAME_EXTRA} here)")


def _limit(directory: Path, name: str, default: int) -> int:
    """A file-system limit of ``directory`` (or of the nearest existing parent)."""
    for d in (directory, *directory.parents, Path(".")):
        try:
            return os.pathconf(d, name)
        except (OSError, ValueError):
            continue
    return default


def _check_one(o: Path, inputs: list[Path], seen: dict, directory: bool = False,
               probe: bool = True) -> None:
    """One output against every input file and the outputs ``seen`` so far."""
    _check_name(o)
    ident = _identity(o)
    for i in inputs:
        if (ident is not None and ident == _identity(i)) or o.resolve() == i.resolve():
            same = "" if str(o) == str(i) else f" {i} (another name for it)"
            raise TraceaugError(f"{o}: is the input file{same}; choose another output")
    for origin, name in _origins.values():
        if ident is not None and ident == origin:
            raise TraceaugError(f"{o}: is the input ({name} reads it); choose another output")
    key = ident if ident is not None else str(o.resolve())
    if key in seen:
        raise TraceaugError(f"{o}: is also the output {seen[key]}; give each output its own name")
    seen[key] = o
    if ident is not None:
        mode = os.stat(o).st_mode
        if stat.S_ISDIR(mode) and not directory:
            raise TraceaugError(f"{o}: is a directory, expected an output file")
        if not stat.S_ISDIR(mode) and directory:
            raise TraceaugError(f"{o}: IN is a directory, so OUT must be one too")
        if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
            raise TraceaugError(f"{o}: is not a regular file (a device, FIFO or socket); "
                                "choose a file to write")
    why = _writable_dir(o if directory and ident is not None else o.parent) if probe else None
    if why:
        raise TraceaugError(f"{o}: {why}")


def check(inputs: Iterable[Path | str | None], outputs: Iterable[Path | str | None],
          rank_dirs: Iterable[Path | str | None] = ()) -> None:
    """Refuse (``TraceaugError``) any output that would overwrite an input or cannot be written, all before
    any is written; ``rank_dirs``: output directories getting a file per directory-input file, same name.
    Inputs may be URLs; an output uploaded when the run commits (``atomic.remote``) is checked as its URL."""
    given = [_local(p) for p in inputs if p is not None and str(p) != STDIO]
    urls = [str(p) for p in given if is_url(p)]
    inputs = [Path(p) for p in given if not is_url(p)]
    files = input_files(inputs)
    in_dirs = [p for p in inputs if p.is_dir()]
    seen: dict = {}
    local: dict[bool, list[Path]] = {False: [], True: []}  # directory? -> local outputs
    for out, directory in [(o, False) for o in outputs] + [(d, True) for d in rank_dirs]:
        if out is None or str(out) == STDIO:
            continue
        url = _local(out if is_url(out) else atomic.url_of(Path(out)) or out)
        if not is_url(url):
            local[directory].append(Path(url))
        else:
            _check_url(url, urls, seen, directory)
            atomic.check_remote(Path(out))
    for o in local[False]:
        _check_one(o, files, seen)
    for d in local[True]:
        for i in in_dirs:
            if d.resolve() == i.resolve() or (_identity(d) is not None
                                              and _identity(d) == _identity(i)):
                raise TraceaugError(f"{d}: is the input directory; choose another output")
        _check_one(d, files, seen, directory=True)
        for f in input_files(in_dirs):
            _check_one(d / f.name, files, seen, probe=False)
