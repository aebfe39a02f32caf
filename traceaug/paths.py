"""Click types for trace arguments, checked by ``guard`` before a command runs: an input read once (``-``, a
FIFO, a device) is spooled, still named as given; an ``Output`` of ``-`` is stdout."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import click

import traceaug.atomic as atomic
import traceaug.guard as guard
import traceaug.interrupt as interrupt
import traceaug.runtime as runtime

from .errors import TraceaugError
from .read import source, storage

_spool_dirs: list[str] = []
_shown: dict[str, str] = {}  # spooled path -> the name the user gave


def _spool_dir(name: str = "-") -> Path:
    """A directory for the run's spooled copies, made and listed for ``cleanup`` with signals held (a
    signal between the two would leave it), the signal raised after."""
    try:
        with interrupt.held():
            d = tempfile.mkdtemp(prefix="traceaug-spool-")
            _spool_dirs.append(d)
    except OSError as e:
        raise TraceaugError(f"{name}: cannot make a temporary copy in {tempfile.gettempdir()} "
                            f"({e.strerror}); set TMPDIR to a writable directory") from None
    interrupt.check()
    return Path(d)


def cleanup() -> None:
    """Remove this run's spooled inputs and stdout files."""
    while _spool_dirs:
        shutil.rmtree(_spool_dirs.pop(), ignore_errors=True)
    _shown.clear()
    guard.forget_spooled()


def shown(text: str) -> str:
    """``text`` with spooled paths replaced by the names the user gave."""
    for path, name in _shown.items():
        text = text.replace(path, name)
    return text


def _special(value: str) -> bool:
    """True for what exists but is neither a regular file nor a directory."""
    try:
        mode = os.stat(value).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


is_url = guard.is_url


def name_of(value: Path | str) -> str:
    """The last part of a path or URL."""
    return value.name if isinstance(value, Path) else value.rstrip("/").rsplit("/", 1)[-1]


def _url_taken(value: str, ctx: click.Context | None, refusal: str) -> None:
    """The one rule for URLs: every command that takes ``--storage-option`` (a job's: its ranks' tasks fetch
    their objects) reads and writes them; any other refuses one with ``refusal``."""
    if ctx is not None and not any(p.name == "storage_option" for p in ctx.command.params):
        raise TraceaugError(f"{value}: {refusal}; URLs are read and written by the commands that "
                            "take --storage-option")


class Input(click.ParamType):
    """A trace to read: a file, a directory of ranks, or an fsspec URL kept as text for the job's tasks
    (``_url_taken``); ``-``, FIFOs and devices spooled (``what``: what the bytes may be, ``source.spool``)."""

    name = "path"

    def __init__(self, what: str | None = "a trace") -> None:
        self.what = what

    def convert(self, value, param, ctx) -> Path | str:
        if is_url(value):
            _url_taken(value, ctx, "this command reads local files")
            if runtime.current().scratch is None:  # objects fetched there, removed by ``cleanup``
                runtime.update(scratch=str(_spool_dir(value)))
            return value
        if isinstance(value, Path):
            return value
        if value != "-" and not _special(value):
            return Path(value)
        name = "stdin" if value == "-" else value
        base = "stdin" if value == "-" else Path(value).name or "input"
        dest = _spool_dir(name) / base
        _shown[str(dest)] = name
        if value == "-":  # stdin redirected from a file: no output may be that file
            guard.spooled(dest, guard.stdin_identity(), name)
        source.spool(name, None if value == "-" else value, dest, self.what)
        return dest


class Output(click.ParamType):
    """A file to write, ``-`` for stdout, an fsspec URL (``_url_taken``) uploaded when the run commits;
    ``rank_dir``: a directory when an input is one, unless the flag parameter ``one_file`` is given."""

    name = "path"

    def __init__(self, rank_dir: bool = False, one_file: str | None = None) -> None:
        self.rank_dir, self.one_file = rank_dir, one_file

    def convert(self, value, param, ctx) -> Path | str:
        if isinstance(value, Path):
            return value
        if value == "-":
            dest = atomic.stdout_spool(_spool_dir())
            _shown[str(dest)] = "stdout"
            return dest
        if is_url(value):  # written here, uploaded when the run commits (all or nothing)
            _url_taken(value, ctx, "this output is a local file")
            directory = value.endswith("/")
            dest = _spool_dir() / (name_of(value) or "out")
            atomic.remote(dest, value, storage.STORE)
            _shown[str(dest)] = value.rstrip("/")
            return f"{dest}/" if directory and self.rank_dir else dest
        if self.rank_dir and value.endswith(("/", os.sep)):
            return value  # a trailing / says "a directory": a Path would drop it
        return Path(value)


def is_stdout(path: Path | None) -> bool:
    """True for the file that stands for ``-`` (stdout)."""
    return path is not None and _shown.get(str(path)) == "stdout"


def check_stdout(outputs: list[Path], rank_dirs: list[Path]) -> None:
    """At most one output goes to stdout, and never a directory of ranks."""
    if any(is_stdout(d) for d in rank_dirs):
        raise TraceaugError("-: IN is a directory of ranks, so OUT is one too; stdout cannot "
                            "hold it")
    if sum(is_stdout(o) for o in outputs) > 1:
        raise TraceaugError("-: two outputs cannot both go to stdout; name a file for one")


_OUTPUT_NAME = re.compile(r"(^|_)(out|dst|output|dest|html|report)($|_)")


def _role(param: click.Parameter) -> str | None:
    """"in" or "out" for a path parameter (else None), from its type; a plain ``click.Path`` (undeclared) is
    an output when named like one (``out``, ``dst``, ``*_out``, ``--html``...)."""
    if isinstance(param.type, Input):
        return "in"
    if isinstance(param.type, Output):
        return "out"
    if isinstance(param.type, click.Path) and param.name:
        return "out" if _OUTPUT_NAME.search(param.name) else "in"
    return None


def _values(value) -> list[Path | str]:
    """The paths (and URLs) of a parameter's value."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return [v if is_url(v) else Path(v) for v in values if v is not None and not hasattr(v, "read")]


def arguments(command: click.Command, params: dict
              ) -> tuple[list[Path | str], list[Path], list[Path]]:
    """The command's inputs (paths and URLs), output files and rank-directory outputs, from its
    parameters."""
    inputs = [v for p in command.params if _role(p) == "in" for v in _values(params.get(p.name))]
    any_dir = any(v.endswith("/") if is_url(v) else v.is_dir() for v in inputs)  # URL: a prefix
    files: list[Path] = []
    dirs: list[Path] = []
    for p in command.params:
        if _role(p) == "out":
            for v in map(Path, _values(params.get(p.name))):
                if isinstance(p.type, Output):
                    rank_dir = (p.type.rank_dir and any_dir
                                and not (p.type.one_file and params.get(p.type.one_file)))
                else:  # undeclared: a directory beside directory inputs is taken as one
                    rank_dir = any_dir and (v.is_dir() or not v.suffix)
                (dirs if rank_dir else files).append(v)
    return inputs, files, dirs
