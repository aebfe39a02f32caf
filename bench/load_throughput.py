"""Load-throughput benchmark for traceaug: MB/s, peak memory and first-query latency.

Why: traceaug must stay usable on the large Kineto traces people actually produce (hundreds of MB of
raw JSON per rank), and quick on small ones. This script checks three targets, each measured in a
fresh Python subprocess so that nothing is shared between measurements:

* load throughput >= 40 MB/s of raw JSON (``load(path)`` followed by ``SELECT COUNT(*) FROM slice``),
  for the default analysis load and, reported beside it, a full load (``full=True``);
* peak RSS <= 3x the raw JSON size during that load;
* first query on a ~1 MB trace <= 1 s from process start, with the compiled wasm already cached.

The large input is made by scaling a real trace: every non-metadata event is replicated N times, copy
k shifted in time by k * (span + gap) whole microseconds, with fresh correlation / external ids and
flow ids so that the copies stay separate, and ProfilerStep#n renumbered so step names stay unique.
Metadata ("ph": "M") events and the top-level keys (schemaVersion, deviceProperties,
distributedInfo, ...) are kept once. The scaled file is written uncompressed to --out-dir and reused
on later runs when the source trace and target size are unchanged. MB here means 10**6 bytes.

Usage::

    python bench/load_throughput.py [--trace PATH] [--target-mb 250] [--out-dir bench/out] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import orjson

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
DEFAULT_TRACE = SHARED / "traces" / "kineto" / "a100_rank0_of16_6streams.json.gz"
DEFAULT_OUT = REPO_ROOT / "bench" / "out"

MB = 1_000_000
GAP_US = 1_000  # idle time between two copies of the trace
SMALL_BYTES = 1 * MB  # size of the first-query trace
ID_KEYS = ("correlation", "External id", "external id")
FLOW_PHASES = ("s", "f", "t")
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

TARGET_MB_S = 40.0
TARGET_RSS_RATIO = 3.0
TARGET_FIRST_QUERY_S = 1.0

# Run in the child. Times from just before ``import traceaug``; prints one JSON line. Peak RSS is read
# from /proc/self/status (VmHWM) where there is one: on Linux the child's ru_maxrss starts at the
# parent's high-water mark (it is carried over exec), which would blame the parent's memory on traceaug.
PEAK_KB = """
import resource

def peak_kb():
    # VmHWM is this process's own peak; ru_maxrss also counts the parent's peak from before exec.
    try:
        with open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith("VmHWM:")).split()[1])
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""

CHILD = PEAK_KB + """
import json, sys, time
t0 = time.perf_counter()
import traceaug
t_import = time.perf_counter()

rss_import = peak_kb()
t = traceaug.load(sys.argv[1], progress=False, full=sys.argv[2] == "full")
t_load = time.perf_counter()
n = int(t.query("SELECT COUNT(*) AS n FROM slice")["n"].iloc[0])
t_query = time.perf_counter()
memory64 = bool(t.memory64)
t.close()
from traceaug.engine.wasm_module import cache_dir
print(json.dumps({
    "import_s": t_import - t0,
    "load_s": t_load - t_import,
    "query_s": t_query - t_load,
    "total_s": t_query - t0,
    "slices": n,
    "memory64": memory64,
    "rss_import_kb": rss_import,
    "peak_rss_kb": peak_kb(),
    "ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "cache_dir": str(cache_dir()),
}))
"""


# ----- building the inputs ----------------------------------------------------------------------
def read_trace(path: Path) -> dict[str, Any]:
    """Parse a Chrome/Kineto JSON trace (gzipped or not) with orjson."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    trace = orjson.loads(data)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        sys.exit(f"error: {path} is not a Chrome JSON trace with a traceEvents list")
    return trace


def event_span(events: list[dict]) -> tuple[float, float]:
    """Earliest ts and latest ts + dur over the events that have a timestamp."""
    lo, hi = math.inf, -math.inf
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, (int, float)):
            dur = e.get("dur")
            lo = min(lo, ts)
            hi = max(hi, ts + (dur if isinstance(dur, (int, float)) else 0))
    if lo == math.inf:
        sys.exit("error: the trace has no timestamped events")
    return lo, hi


def id_offset(events: list[dict]) -> int:
    """A power of ten above every correlation / external / flow id, so shifted ids never collide."""
    top = 0
    for e in events:
        args = e.get("args")
        if isinstance(args, dict):
            for key in ID_KEYS:
                if isinstance(args.get(key), int):
                    top = max(top, args[key])
        if e.get("ph") in FLOW_PHASES and isinstance(e.get("id"), int):
            top = max(top, e["id"])
    return 10 ** len(str(top + 1))


def step_count(events: list[dict]) -> int:
    """How far to renumber ProfilerStep#n per copy: the range of step numbers in the trace."""
    steps = [int(m.group(1)) for e in events if isinstance(e.get("name"), str)
             and (m := STEP_RE.match(e["name"]))]
    return max(steps) - min(steps) + 1 if steps else 0


def shifted(e: dict, shift_us: int, id_shift: int, step_shift: int) -> dict:
    """A copy of event ``e`` moved by ``shift_us`` with its ids and step number moved too."""
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + shift_us
    args = e.get("args")
    if isinstance(args, dict) and any(isinstance(args.get(k), int) for k in ID_KEYS):
        args = e["args"] = dict(args)
        for key in ID_KEYS:
            if isinstance(args.get(key), int):
                args[key] += id_shift
    if e.get("ph") in FLOW_PHASES and isinstance(e.get("id"), int):
        e["id"] += id_shift
    if step_shift and isinstance(e.get("name"), str) and (m := STEP_RE.match(e["name"])):
        e["name"] = f"ProfilerStep#{int(m.group(1)) + step_shift}"
    return e


def count_phases(events: list[dict]) -> dict[str, int]:
    """Events that become rows of Perfetto's slice table: complete (X) and instant (i/I) events."""
    x = sum(1 for e in events if e.get("ph") == "X")
    i = sum(1 for e in events if e.get("ph") in ("i", "I"))
    return {"x_events": x, "instant_events": i}


def write_wrapped(trace: dict[str, Any], out: Path, chunks: list[bytes]) -> int:
    """Write the trace's top-level keys in their order, with traceEvents = the joined event chunks."""
    tmp = out.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(b"{")
        for n, (key, value) in enumerate(trace.items()):
            f.write((b"," if n else b"") + orjson.dumps(key) + b":")
            if key != "traceEvents":
                f.write(orjson.dumps(value))
                continue
            f.write(b"[")
            first = True
            for chunk in chunks:  # each chunk is a serialized list: strip its brackets
                body = chunk[1:-1]
                if body:
                    f.write(body if first else b"," + body)
                    first = False
            f.write(b"]")
        f.write(b"}")
    tmp.replace(out)
    return out.stat().st_size


def cached(out: Path, meta_path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The stored metadata of ``out`` if it was built from the same source and settings."""
    if not (out.exists() and meta_path.exists()):
        return None
    meta = json.loads(meta_path.read_text())
    if meta.get("key") != key or meta.get("bytes") != out.stat().st_size:
        return None
    return meta


def cache_slot(src: Path, out_dir: Path, tag: str, params: dict[str, Any]
               ) -> tuple[Path, Path, dict[str, Any]]:
    """Output path, its metadata path and the key that says when a cached file is still valid."""
    stem = src.name.removesuffix(".gz").removesuffix(".json")
    out = out_dir / f"{stem}_{tag}.json"
    stat = src.stat()
    key = {"source": str(src), "source_bytes": stat.st_size, "source_mtime": stat.st_mtime, **params}
    return out, out.with_name(out.name + ".meta.json"), key


def build_scaled(src: Path, trace: dict[str, Any] | None, target_mb: float, out_dir: Path
                 ) -> tuple[Path, dict[str, Any], dict[str, Any] | None]:
    """Write (or reuse) the scaled trace; returns its path, metadata and the parsed source."""
    out, meta_path, key = cache_slot(src, out_dir, f"{target_mb:g}mb",
                                     {"target_mb": target_mb, "gap_us": GAP_US})
    if (meta := cached(out, meta_path, key)) is not None:
        return out, meta, trace
    trace = trace or read_trace(src)
    events = trace["traceEvents"]
    metadata = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    lo, hi = event_span(body)
    period = math.ceil(hi - lo) + GAP_US
    ids, steps = id_offset(body), step_count(body)
    one_copy = len(orjson.dumps(body))
    copies = max(1, round((target_mb * MB - len(orjson.dumps(metadata))) / one_copy))

    def chunks():
        yield orjson.dumps(metadata)
        for k in range(copies):
            yield orjson.dumps([shifted(e, k * period, k * ids, k * steps) for e in body] if k else body)

    size = write_wrapped(trace, out, chunks())
    per_copy = count_phases(body)
    meta = {"key": key, "bytes": size, "copies": copies, "period_us": period, "id_offset": ids,
            **{name: n * copies for name, n in per_copy.items()}}
    meta_path.write_text(json.dumps(meta, indent=1))
    return out, meta, trace


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_KINETO_SEPARATOR = b"},\n  {"  # between two events, in Kineto's own layout
_TS = re.compile(rb'("ts": )(-?\d+)')
_IDS = re.compile(rb'("(?:correlation|External id|external id|id)": )(\d+)')
_STEP = re.compile(rb'"ProfilerStep#(\d+)"')


def _kineto_events(text: bytes) -> tuple[bytes, list[bytes]]:
    """The text before the event array and each event's text, of a trace written in Kineto's
    layout with traceEvents as its last key (as the profiler writes it)."""
    m = _EVENTS_KEY.search(text)
    body = text[m.end():].rstrip() if m else b""
    if not (body.endswith(b"}") and body[:-1].rstrip().endswith(b"]")):
        raise ValueError("not a trace in Kineto's layout with traceEvents last")
    body = body[:-1].rstrip()[:-1].strip()
    if not (body.startswith(b"{") and body.endswith(b"}")):
        raise ValueError("not a trace in Kineto's layout")
    return text[:m.end()], [b"{" + e + b"}" for e in body[1:-1].split(_KINETO_SEPARATOR)]


def _shifted_text(event: bytes, shift_us: int, id_shift: int, step_shift: int) -> bytes:
    """``shifted`` on an event's text: its ts (the integer part), its correlation, external
    and flow ids and its step number moved, every other byte kept."""
    event = _TS.sub(lambda m: m.group(1) + str(int(m.group(2)) + shift_us).encode(), event)
    if id_shift:
        event = _IDS.sub(lambda m: m.group(1) + str(int(m.group(2)) + id_shift).encode(), event)
    if step_shift:
        event = _STEP.sub(lambda m: b'"ProfilerStep#%d"' % (int(m.group(1)) + step_shift), event)
    return event


def build_scaled_text(src: Path, target_mb: float, out_dir: Path) -> tuple[Path, dict[str, Any]]:
    """``build_scaled`` keeping the source's text: Kineto's layout, every copy's events as
    the profiler wrote them but for the moved numbers (a parser that reads the layout, as
    traceaug's skim, sees what it sees in a real trace; orjson's compact text hides it)."""
    out, meta_path, key = cache_slot(src, out_dir, f"{target_mb:g}mb_kineto",
                                     {"target_mb": target_mb, "gap_us": GAP_US, "layout": "kineto"})
    if (meta := cached(out, meta_path, key)) is not None:
        return out, meta
    text = src.read_bytes()
    text = gzip.decompress(text) if text[:2] == b"\x1f\x8b" else text
    head, pieces = _kineto_events(text)
    events = orjson.loads(text)["traceEvents"]
    if len(events) != len(pieces):
        raise ValueError(f"{src}: {len(pieces)} event texts for {len(events)} events")
    body = [(e, t) for e, t in zip(events, pieces) if e.get("ph") != "M"]
    lo, hi = event_span([e for e, _ in body])
    period = math.ceil(hi - lo) + GAP_US
    ids, steps = id_offset([e for e, _ in body]), step_count([e for e, _ in body])
    one_copy = sum(len(t) + len(_KINETO_SEPARATOR) for _, t in body)
    meta_text = [t for e, t in zip(events, pieces) if e.get("ph") == "M"]
    copies = max(1, round((target_mb * MB - len(head)) / one_copy))
    tmp = out.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(head + b"\n  ")
        copy = ([_shifted_text(t, k * period, k * ids, k * steps) if k else t for _, t in body]
                for k in range(copies))
        for n, part in enumerate(chain([meta_text] if meta_text else [], copy)):
            f.write((b",\n  " if n else b"") + b",\n  ".join(part))
        f.write(b"\n  ]\n}\n")
    tmp.replace(out)
    meta = {"key": key, "bytes": out.stat().st_size, "copies": copies, "period_us": period,
            "id_offset": ids, **{n: c * copies for n, c in count_phases([e for e, _ in body]).items()}}
    meta_path.write_text(json.dumps(meta, indent=1))
    return out, meta


def build_small(src: Path, trace: dict[str, Any] | None, out_dir: Path
                ) -> tuple[Path, dict[str, Any], dict[str, Any] | None]:
    """Write (or reuse) a ~1 MB trace: the metadata plus the first events, flows kept only in pairs."""
    out, meta_path, key = cache_slot(src, out_dir, "1mb", {"bytes_target": SMALL_BYTES})
    if (meta := cached(out, meta_path, key)) is not None:
        return out, meta, trace
    trace = trace or read_trace(src)
    events = trace["traceEvents"]
    metadata = [e for e in events if e.get("ph") == "M"]
    header = len(orjson.dumps({k: v for k, v in trace.items() if k != "traceEvents"}))
    budget = SMALL_BYTES - header - len(orjson.dumps(metadata))
    picked: list[dict] = []
    for e in events:
        if e.get("ph") == "M":
            continue
        budget -= len(orjson.dumps(e)) + 1
        if budget < 0:
            break
        picked.append(e)
    flows: dict[Any, set[str]] = {}
    for e in picked:
        if e.get("ph") in FLOW_PHASES:
            flows.setdefault(e.get("id"), set()).add(e["ph"])
    whole = {i for i, phases in flows.items() if {"s", "f"} <= phases}
    picked = [e for e in picked if e.get("ph") not in FLOW_PHASES or e.get("id") in whole]
    size = write_wrapped(trace, out, [orjson.dumps(metadata), orjson.dumps(picked)])
    meta = {"key": key, "bytes": size, **count_phases(picked)}
    meta_path.write_text(json.dumps(meta, indent=1))
    return out, meta, trace


# ----- measuring --------------------------------------------------------------------------------
def tree_rss(pid: int) -> list[int]:
    """Resident memory of a process and of each of its descendants (Linux /proc), in kB."""
    each, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                each.append(next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0))
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return each


def tree_rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc), in kB."""
    return sum(tree_rss(pid))


@contextlib.contextmanager
def first_run(env: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """``env`` (default: this process's) with an empty table cache of its own (``TRACEAUG_CACHE``), removed
    after: a measured run is a user's first, never answered from an earlier run's cache entries (a
    command's own ``--cache DIR`` / ``--no-cache`` still wins: job_cache.py measures the cache so)."""
    with tempfile.TemporaryDirectory(prefix="traceaug-bench-cache-") as cache:
        yield {**(os.environ if env is None else env), "TRACEAUG_CACHE": cache}


@dataclass(frozen=True)
class Sampled:
    """A command run to its end: exit code, wall seconds, peak RSS in kB of its largest process and of its
    whole process tree, and whether it ran past its timeout (then killed)."""

    code: int
    wall_s: float
    largest_kb: int
    tree_kb: int
    late: bool


def run_sampled(cmd: list[str], env: dict[str, str], cwd: Path = REPO_ROOT, stdout: Any = None,
                stderr: Any = None, timeout: float | None = None, every_s: float = 0.02) -> Sampled:
    """Run ``cmd`` in a session of its own; the parent waits for its exit (the wall time is not rounded up to
    a polling step) while a thread samples its process tree's RSS every ``every_s``; past ``timeout`` the
    session is killed. Output goes to files (a full pipe would block the child)."""
    largest, tree, late, stop = [0], [0], [False], threading.Event()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, cwd=cwd, env=env, start_new_session=True)

    def sample() -> None:
        deadline = math.inf if timeout is None else start + timeout
        while not stop.is_set():
            each = tree_rss(proc.pid)
            largest[0], tree[0] = max(largest[0], max(each, default=0)), max(tree[0], sum(each))
            if time.perf_counter() > deadline and not late[0]:
                late[0] = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            stop.wait(every_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:  # no timeout here: Popen.wait(timeout) polls, in sleeps of up to 50 ms
        code = proc.wait()
    finally:
        wall = time.perf_counter() - start
        stop.set()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        sampler.join()
    return Sampled(code, wall, largest[0], tree[0], late[0])


def run_tree(cmd: list[str], timeout: float | None, what: str) -> tuple[float, str, int]:
    """Run ``cmd`` from the repo root, as a first run (``first_run``); its wall time, stdout and the peak
    RSS of its whole process tree in kB (``run_sampled``: worker processes count); exits on failure."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, first_run() as env:
        run = run_sampled(cmd, env, stdout=out, stderr=err, timeout=timeout)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if run.late:
        sys.exit(f"error: {what} took more than {timeout:g} s")
    if run.code != 0:
        sys.stderr.write(stderr[-4000:])
        sys.exit(f"error: {what} failed (exit {run.code})")
    return run.wall_s, stdout, run.tree_kb


def run_child(path: Path, mode: str = "analysis") -> dict[str, Any]:
    """Load ``path`` (an analysis or a full load) and count slices in a fresh interpreter;
    adds the parent-side wall time and the peak RSS of the child's whole process tree
    (its pass-1 workers included), sampled every 20 ms."""
    wall, stdout, tree_peak = run_tree([sys.executable, "-c", CHILD, str(path.resolve()), mode], None,
                                       f"the benchmark child on {path}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["process_s"] = wall
    result["tree_peak_kb"] = max(tree_peak, result["peak_rss_kb"])
    return result


def measure(scaled: Path, scaled_meta: dict[str, Any], small: Path, small_meta: dict[str, Any],
            repeats: int) -> dict[str, Any]:
    """Warm the wasm cache, then time the small trace ``repeats`` times and the scaled one once."""
    warm = run_child(small)  # compiles and caches the wasm if it is not cached yet
    firsts = [run_child(small) for _ in range(repeats)]
    raw_mb = scaled_meta["bytes"] / MB
    first_process = statistics.median(r["process_s"] for r in firsts)
    first_child = statistics.median(r["total_s"] for r in firsts)
    out: dict[str, Any] = {
        "scaled_trace": str(scaled),
        "raw_mb": raw_mb,
        "copies": scaled_meta["copies"],
        "x_events": scaled_meta["x_events"],
        "instant_events": scaled_meta["instant_events"],
        "small_trace": str(small),
        "small_mb": small_meta["bytes"] / MB,
        "small_slices_loaded": firsts[-1]["slices"],
        "small_x_events": small_meta["x_events"],
        "small_instant_events": small_meta["instant_events"],
        "warmup_process_s": warm["process_s"],
        "first_query_process_s": first_process,
        "first_query_in_child_s": first_child,
        "first_query_import_s": statistics.median(r["import_s"] for r in firsts),
        "first_query_process_runs_s": [r["process_s"] for r in firsts],
        "first_query_in_child_runs_s": [r["total_s"] for r in firsts],
        "cache_dir": warm["cache_dir"],
        "modes": {},
    }
    for mode in ("analysis", "full"):
        big = run_child(scaled, mode)
        seconds = big["load_s"] + big["query_s"]
        peak_mb = big["tree_peak_kb"] * 1024 / MB
        main_mb = big["peak_rss_kb"] * 1024 / MB
        out["modes"][mode] = {
            "load_s": seconds,
            "load_engine_s": big["load_s"],
            "count_query_s": big["query_s"],
            "import_s": big["import_s"],
            "throughput_mb_s": raw_mb / seconds,
            "memory64": big["memory64"],
            "rss_after_import_mb": big["rss_import_kb"] * 1024 / MB,
            "peak_rss_mb": peak_mb,
            "main_peak_rss_mb": main_mb,
            "rss_ratio": peak_mb / raw_mb,
            "slices_loaded": big["slices"],
            "pass": {
                "throughput": raw_mb / seconds >= TARGET_MB_S,
                "peak_rss": peak_mb / raw_mb <= TARGET_RSS_RATIO,
                "slice_count": big["slices"] == scaled_meta["x_events"] + scaled_meta["instant_events"],
            },
        }
    out["pass"] = {"first_query": first_process <= TARGET_FIRST_QUERY_S}
    return out


def report(r: dict[str, Any]) -> str:
    """The figures as a plain-text table."""
    def mark(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    expected = r["x_events"] + r["instant_events"]
    small_expected = r["small_x_events"] + r["small_instant_events"]
    runs = ", ".join(f"{s:.3f}" for s in r["first_query_process_runs_s"])
    rows = [("scaled trace", f"{r['raw_mb']:.1f} MB raw JSON ({r['copies']} copies)", "", "")]
    for mode, m in r["modes"].items():
        p = m["pass"]
        rows += [
            (f"{mode} load", "(the default, what analyses use)" if mode == "analysis"
             else "(full=True: every arg and flow event)", "", ""),
            ("  load + COUNT(*) wall", f"{m['load_s']:.2f} s (load {m['load_engine_s']:.2f} s, "
                                       f"query {m['count_query_s']:.3f} s)", "", ""),
            ("  load throughput", f"{m['throughput_mb_s']:.1f} MB/s", f">= {TARGET_MB_S:g} MB/s",
             mark(p["throughput"])),
            ("  peak RSS, process tree", f"{m['peak_rss_mb']:.0f} MB (main process "
                                         f"{m['main_peak_rss_mb']:.0f} MB)", "", ""),
            ("  peak RSS / raw size", f"{m['rss_ratio']:.2f}x", f"<= {TARGET_RSS_RATIO:g}x",
             mark(p["peak_rss"])),
            ("  slices loaded", f"{m['slices_loaded']:,}", f"{expected:,} = {r['x_events']:,} X "
                                                           f"+ {r['instant_events']:,} instant",
             mark(p["slice_count"])),
        ]
    rows += [
        ("first query, 1 MB trace", f"{r['first_query_process_s']:.3f} s process (median of {runs})",
         f"<= {TARGET_FIRST_QUERY_S:g} s", mark(r["pass"]["first_query"])),
        ("  in child", f"{r['first_query_in_child_s']:.3f} s import -> first result "
                       f"(import {r['first_query_import_s']:.3f} s)", "", ""),
        ("  1 MB trace", f"{r['small_mb']:.2f} MB, {r['small_slices_loaded']:,} slices "
                         f"(expected {small_expected:,})", "", ""),
        ("  warm-up run", f"{r['warmup_process_s']:.3f} s process (caches the wasm if needed)", "", ""),
    ]
    w0 = max(len(row[0]) for row in rows)
    w1 = max(len(row[1]) for row in rows)
    w2 = max(len(row[2]) for row in rows)
    lines = [f"{'measure':<{w0}}  {'figure':<{w1}}  {'target':<{w2}}  result",
             "-" * (w0 + w1 + w2 + 12)]
    lines += [f"{a:<{w0}}  {b:<{w1}}  {c:<{w2}}  {d}".rstrip() for a, b, c, d in rows]
    lines.append(f"wasm cache: {r['cache_dir']}   memory64 build: {r['modes']['analysis']['memory64']}   "
                 f"python: {sys.version.split()[0]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="trace to scale up")
    parser.add_argument("--target-mb", type=float, default=250.0, help="raw JSON size of the scaled trace")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="where the scaled traces go")
    parser.add_argument("--repeats", type=int, default=3, help="timed first-query runs (median reported)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    src = args.trace.resolve()
    if not src.is_file():
        sys.exit(f"error: input trace not found: {src}\n(pass --trace PATH, or put the shared traces at "
                 f"{SHARED})")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    progress = sys.stderr if args.json else sys.stdout
    print(f"preparing inputs from {src} ...", file=progress, flush=True)
    scaled, scaled_meta, trace = build_scaled(src, None, args.target_mb, args.out_dir)
    small, small_meta, trace = build_small(src, trace, args.out_dir)
    del trace
    print(f"measuring (each in a fresh subprocess) on {scaled.name} and {small.name} ...",
          file=progress, flush=True)
    result = measure(scaled, scaled_meta, small, small_meta, max(1, args.repeats))
    print(json.dumps(result, indent=1) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
