"""GPU Performance Analyzer JSON configs read unchanged: ``inputs`` and a shared ``kernel_to_class_map``, or
one top-level input (older). Paths are relative to the config; traceaug adds ``"format": "trace"``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

from ..errors import TraceaugError
from . import source

CSV_KEYS = ("kernel_sum", "mem_time_sum", "nvtx_proj_trace")
MAX_ARG = 2**31 - 1  # num_of_iters / num_of_gpus: far above any run, far below int64


@dataclass
class ConfigInput:
    """One input of a config: its files (by report) or trace, and its analysis args."""

    title: str
    format: str  # csv | nsys-rep | trace
    files: dict[str, Path | None]  # CSV report -> path (None: not given); or {"path": trace}
    iters: int | None
    gpus: int | None
    tag: str | None


def read_json(path: Path, what: str) -> object:
    """A JSON file, or a one-line error naming it."""
    try:
        return orjson.loads(source.read_side(path, f"a JSON {what}", json=True))
    except orjson.JSONDecodeError as e:
        raise TraceaugError(f"{path}: not a JSON {what} ({e})") from None


def _int(args: dict, key: str, path: Path) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_ARG:
        raise TraceaugError(f"{path}: analysis_args.{key} must be a whole number from 1 to "
                            f"{MAX_ARG:,}, not {value!r}")
    return value


def _path(folder: Path, given: str, config: Path) -> Path:
    """A path the config names, relative to its folder; one that no file can have is refused."""
    if "\x00" in given:
        raise TraceaugError(f"{config}: the path {given!r} holds a NUL byte")
    return folder / given


def _input(entry: object, n: int, path: Path) -> ConfigInput:
    if not isinstance(entry, dict):
        raise TraceaugError(f"{path}: inputs[{n}] is not an object")
    folder = path.parent
    fmt = str(entry.get("format", entry.get("input_format", "csv"))).lower()
    title = str(entry.get("title") or f"input {n + 1}")
    args = entry.get("analysis_args") or {}
    if not isinstance(args, dict):
        raise TraceaugError(f"{path}: analysis_args of {title!r} is not an object")
    files: dict[str, Path | None] = {}
    if fmt == "csv":
        given = entry.get("nsys_csv_file_path")
        if not isinstance(given, dict) or not isinstance(given.get("kernel_sum"), str):
            raise TraceaugError(f"{path}: {title!r} needs nsys_csv_file_path.kernel_sum")
        files = {k: _path(folder, given[k], path) if isinstance(given.get(k), str) else None
                 for k in CSV_KEYS}
    elif fmt in ("nsys-rep", "trace", "sqlite", "json"):
        report = entry.get("nsys_report") if fmt == "nsys-rep" else entry
        where = report.get("path") if isinstance(report, dict) else None
        if not isinstance(where, str):
            raise TraceaugError(f"{path}: {title!r} needs a path")
        files = {"path": _path(folder, where, path)}
        fmt = "nsys-rep" if fmt == "nsys-rep" else "trace"
    else:
        raise TraceaugError(f"{path}: {title!r} has format {fmt!r} (csv, nsys-rep, trace)")
    tag = args.get("nvtx_tag_of_iter")
    return ConfigInput(title, fmt, files, _int(args, "num_of_iters", path),
                       _int(args, "num_of_gpus", path), tag if isinstance(tag, str) else None)


def load(path: str | Path) -> tuple[list[ConfigInput], object]:
    """The config's inputs and its (unchecked) kernel_to_class_map."""
    path = Path(path)
    doc = read_json(path, "config")
    if not isinstance(doc, dict):
        raise TraceaugError(f"{path}: a config is a JSON object")
    if "inputs" in doc:
        entries = doc["inputs"]
        if not isinstance(entries, list) or not entries:
            raise TraceaugError(f"{path}: inputs must be a non-empty list")
    elif "nsys_csv_file_path" in doc or "input_format" in doc or "nsys_report" in doc:
        entries = [doc]  # the older single-input layout
    else:
        raise TraceaugError(f"{path}: not a GPU Performance Analyzer config (no inputs, "
                            "no nsys_csv_file_path)")
    return [_input(e, n, path) for n, e in enumerate(entries)], doc.get("kernel_to_class_map", {})
