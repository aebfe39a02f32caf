"""The Python API: one function per command, made from its declaration (``commands``), the
trace arguments positional, every other parameter a keyword with the command line's default;
``tp_bin`` and ``progress`` (this call's runtime) and, for commands that read a job, its
options (``scheduler``, ``scheduler_file``, ``workers``, ``retries``, ``fail_fast``,
``skip_bad_ranks``, ``storage_options``). A trace argument may be a loaded ``Job``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

import traceaug.paths as paths
import traceaug.runtime as runtime

from .commands import NAMES, load
from .commands.declare import Call, Command
from .job.loaded import Job
from .job.run import JobOptions
from .read.storage import is_url

RUNTIME = {"tp_bin": None, "progress": None}
JOB = {"scheduler": None, "scheduler_file": None, "workers": None, "cluster_timeout": None, "retries": 1,
       "fail_fast": False, "skip_bad_ranks": False, "storage_options": None, "cache": None,
       "no_cache": False}


def _default(p: click.Parameter) -> Any:
    if getattr(p, "multiple", False) or (isinstance(p, click.Argument) and p.nargs == -1):
        return ()
    if isinstance(p, click.Option) and p.is_flag and not p.secondary_opts and not p.default:
        return False
    default = p.default
    return None if default is None or type(default).__name__ == "Sentinel" else default


def _path(value: Any) -> Any:
    """A trace argument as the command line's types give it: a local path, or a URL / Job."""
    if value is None or isinstance(value, Job) or is_url(value):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_path(v) for v in value)
    return Path(value)


def function(command: Command) -> Callable:
    """``command``'s API function: ``command.api`` of its work (``command.compute``)."""
    params = [p for p in command.click_params() if p.expose_value]
    arguments = [p for p in params if isinstance(p, click.Argument)]
    options = [p for p in params if isinstance(p, click.Option)
               and p.name not in command.cli_only]
    keywords = {p.name: _default(p) for p in options}
    keywords.update(command.api_params)
    extra = {**RUNTIME, **(JOB if command.takes_job else {})}

    def call(*args: Any, **kwargs: Any) -> Any:
        given = dict(zip([p.name for p in arguments], args))
        unknown = set(kwargs) - set(keywords) - set(extra) - {p.name for p in arguments}
        if unknown or len(args) > len(arguments):
            raise TypeError(f"{command.name.replace('-', '_')}() got unexpected arguments "
                            f"{sorted(unknown) or args[len(arguments):]}")
        values = {p.name: _default(p) for p in params} | keywords | given
        values.update({k: v for k, v in kwargs.items() if k not in extra})
        for p in params:
            if isinstance(p.type, (paths.Input, paths.Output)):
                values[p.name] = _path(values[p.name])
        how = {k: kwargs.get(k, d) for k, d in extra.items()}
        job = JobOptions.of(how, how["progress"])
        with runtime.using(tp_bin=how["tp_bin"], progress=how["progress"],
                           storage=how.get("storage_options")):
            found = Call(command, values, job, api=True)
            return command.api(command.compute(found), found)

    name = command.name.replace("-", "_")
    positional = [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    default=inspect.Parameter.empty if p.required else None)
                  for p in arguments]
    named = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v)
             for k, v in {**keywords, **extra}.items()]
    call.__signature__ = inspect.Signature(positional + named)  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``traceaug {command.name}`` as data: {command.help}\n\n" + (
        command.api.__doc__ or "")
    call.__module__ = __name__
    return call


def names() -> list[str]:
    """The API's functions: every command that declares one (``open`` has none)."""
    return [n.replace("-", "_") for n in NAMES if load(n).api is not None]


def __getattr__(name: str) -> Callable:
    """``traceaug.api.NAME``: command NAME's function, made on first use."""
    command = name.replace("_", "-")
    if command not in NAMES or load(command).api is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    made = globals()[name] = function(load(command))
    return made
