"""Benchmark ``traceaug counters`` against HTA's ``generate_trace_with_counters()`` on the same trace.

Why: ``traceaug counters IN OUT`` is meant to replace HolisticTraceAnalysis's
``TraceAnalysis(trace_dir=DIR).generate_trace_with_counters()`` (queue-length and memory-bandwidth
counter tracks added to a Kineto trace). It should be much faster and much lighter on memory, so this
script measures both tools on one real trace and on that trace scaled to >= --target-mb of raw JSON,
against two targets:

* speed: HTA wall time / traceaug wall time >= 10x;
* memory: traceaug peak RSS / HTA peak RSS <= 0.5x.

Every measurement runs in a fresh Python subprocess, one at a time (never two at once, so they do not
compete for the cores or the page cache in odd ways):

* traceaug wall time: ``python -m traceaug counters IN OUT.json.gz`` timed from this process (process
  start to exit, so interpreter start-up and imports count, as they do for a user);
* traceaug peak RSS: a second child that runs ``traceaug.cli.main`` in-process on the same input;
  the peak of its whole process tree (pass-1 workers included, sampled every 20 ms) or its own
  VmHWM, whichever is larger (the same for HTA);
* HTA: a child that symlinks the input into a fresh temporary directory (HTA reads every trace in
  ``trace_dir`` and writes its output next to its input), runs ``TraceAnalysis(trace_dir=...)
  .generate_trace_with_counters()``, then reads its own VmHWM. Its wall time is taken from this process,
  as for traceaug; the child also reports import / parse / generate times.

Peak RSS is VmHWM from /proc/self/status (ru_maxrss as a fallback): on Linux a child's ru_maxrss starts
at its parent's high-water mark, see bench/load_throughput.py. The traceaug wasm compile cache is warmed
first (one run on testdata/small_training.json), so no timed run pays the one-off compile.

Both outputs are gzip JSON (traceaug because OUT ends in .gz, HTA always). As a check, the "ph":"C"
events of each output are counted by a streaming byte count (HTA writes indented JSON, so ``"ph": "C"``
is counted too); the input's own counter events are counted the same way. Note that HTA by default
drops the last ProfilerStep (``include_last_profiler_step=False``) and so covers less of the trace than
traceaug does; --hta-include-last-step passes True to make the spans equal.

The scaled trace comes from bench/load_throughput.py's ``build_scaled`` (uncompressed .json in
--out-dir, reused when present). That scaler picks the nearest whole number of copies, which can land
just under the target, so the target is raised until the file is >= --target-mb. MB means 10**6 bytes.

Usage::

    python bench/counters_vs_hta.py [--trace PATH] [--target-mb 250] [--out-dir bench/out] [--json]
                                    [--skip-scaled] [--repeat 3] [--hta-include-last-step]

On the original trace each tool runs ``--repeat`` times in turn: the wall time is the median,
the peak RSS the largest. The scaled trace runs once.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_throughput import (  # noqa: E402
    DEFAULT_OUT,
    DEFAULT_TRACE,
    MB,
    PEAK_KB,
    REPO_ROOT,
    SHARED,
    build_scaled,
    run_tree,
)

WARM_TRACE = REPO_ROOT / "testdata" / "small_training.json"
TARGET_SPEED_RATIO = 10.0  # HTA wall / traceaug wall, at least
TARGET_RSS_RATIO = 0.5  # traceaug peak RSS / HTA peak RSS, at most
TRACEAUG_TIMEOUT_S = 1800
HTA_TIMEOUT_S = 4 * 3600
COUNTER_PATTERNS = (b'"ph":"C"', b'"ph": "C"')
RESULT_TAG = "BENCH-RESULT "
WROTE_RE = re.compile(r"\((\d+) counter events\)")

# argv: IN OUT. Runs the CLI in-process, then prints one tagged JSON line.
TRACEAUG_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from traceaug.cli import main
t_import = time.perf_counter()
main(["counters", sys.argv[1], sys.argv[2]], standalone_mode=False)
t_done = time.perf_counter()
print(TAG + json.dumps({"import_s": t_import - t0, "run_s": t_done - t_import, "total_s": t_done - t0,
                        "peak_rss_kb": peak_kb()}))
"""

# argv: IN WORKDIR INCLUDE_LAST(0/1). Symlinks IN into WORKDIR (empty), runs HTA there.
HTA_CHILD = """
import json, os, sys, time
t0 = time.perf_counter()
src, work, include_last = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
os.symlink(src, os.path.join(work, os.path.basename(src)))
from hta.trace_analysis import TraceAnalysis
t_import = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=work, include_last_profiler_step=include_last)
t_parse = time.perf_counter()
analyzer.generate_trace_with_counters()
t_done = time.perf_counter()
outputs = sorted(f for f in os.listdir(work) if "_with_counters" in f)
print(TAG + json.dumps({"import_s": t_import - t0, "parse_s": t_parse - t_import,
                        "generate_s": t_done - t_parse, "total_s": t_done - t0,
                        "peak_rss_kb": peak_kb(), "outputs": outputs}))
"""


# ----- inputs and output checks -----------------------------------------------------------------
def scaled_at_least(src: Path, target_mb: float, out_dir: Path) -> tuple[Path, dict[str, Any]]:
    """``build_scaled``'s trace, with the target raised until the file holds >= ``target_mb`` MB."""
    want, trace = target_mb, None
    for _ in range(5):
        path, meta, trace = build_scaled(src, trace, want, out_dir)
        if meta["bytes"] >= target_mb * MB:
            return path, meta
        per_copy = meta["bytes"] / meta["copies"]  # one copy plus its share of the fixed part
        raised = math.ceil(math.ceil(target_mb * MB / per_copy) * per_copy / MB)
        want = raised if raised > want else want + 1
    sys.exit(f"error: could not scale {src} to >= {target_mb:g} MB")


def scan(path: Path) -> tuple[int, dict[bytes, int]]:
    """Raw (decompressed) size of a JSON or gzip JSON file and the counts of COUNTER_PATTERNS, streamed."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    counts = dict.fromkeys(COUNTER_PATTERNS, 0)
    tails = dict.fromkeys(COUNTER_PATTERNS, b"")
    size = 0
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
        while chunk := f.read(16 * MB):
            size += len(chunk)
            for pat in COUNTER_PATTERNS:
                buf = tails[pat] + chunk  # the tail is shorter than pat: no match is counted twice
                counts[pat] += buf.count(pat)
                tails[pat] = buf[-(len(pat) - 1):]
    return size, counts


def counter_events(path: Path) -> int:
    """Number of "ph":"C" events in a (gzip) JSON file, compact or indented."""
    return sum(scan(path)[1].values())


# ----- measuring --------------------------------------------------------------------------------
def run(cmd: list[str], timeout: float, what: str) -> tuple[float, str]:
    """``run_tree`` without the memory figure."""
    wall, stdout, _ = run_tree(cmd, timeout, what)
    return wall, stdout


def tagged(stdout: str, what: str) -> dict[str, Any]:
    """The JSON result a child printed after RESULT_TAG."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    sys.exit(f"error: {what} printed no result line")


def child_script(body: str) -> str:
    return f"TAG = {RESULT_TAG!r}\n{PEAK_KB}\n{body}"


PYCACHE = Path(tempfile.gettempdir()) / "traceaug-bench-pycache"


@contextlib.contextmanager
def bytecode_cached(where: Path = PYCACHE):
    """traceaug's children keep compiled bytecode (under ``where``) even if
    PYTHONDONTWRITEBYTECODE is set: an installed traceaug is compiled once, as HTA's modules in
    site-packages are, so no timed run should compile ~75 modules again (~0.07 s a run here).
    HTA's children run outside it, reading site-packages' bytecode as it is."""
    saved = {k: os.environ.get(k) for k in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if saved["PYTHONDONTWRITEBYTECODE"]:
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = str(where)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def warm_up(work: Path) -> float:
    """One traceaug run on a tiny trace, so the wasm module is compiled and cached before timing
    (and traceaug's bytecode, ``bytecode_cached``)."""
    with bytecode_cached():
        wall, _ = run([sys.executable, "-m", "traceaug", "counters", str(WARM_TRACE),
                       str(work / "warm.json.gz")], TRACEAUG_TIMEOUT_S, "traceaug warm-up")
    return wall


@bytecode_cached()
def measure_traceaug(src: Path, work: Path) -> dict[str, Any]:
    """CLI wall time from this process, then peak RSS from an in-process child; counts the output."""
    out = work / "traceaug_out.json.gz"
    wall, stdout = run([sys.executable, "-m", "traceaug", "counters", str(src), str(out)],
                       TRACEAUG_TIMEOUT_S, f"traceaug counters on {src.name}")
    said = WROTE_RE.search(stdout)
    counted = counter_events(out)
    out_bytes = out.stat().st_size
    rss_out = work / "traceaug_rss_out.json.gz"
    rss_wall, stdout, tree_kb = run_tree(
        [sys.executable, "-c", child_script(TRACEAUG_CHILD), str(src), str(rss_out)],
        TRACEAUG_TIMEOUT_S, f"traceaug (in-process) on {src.name}")
    child = tagged(stdout, "the traceaug child")
    return {"wall_s": wall, "peak_rss_mb": max(child["peak_rss_kb"], tree_kb) * 1024 / MB,
            "rss_run_wall_s": rss_wall, "rss_run_in_child_s": child["total_s"],
            "rss_run_import_s": child["import_s"], "out_gz_mb": out_bytes / MB,
            "counter_events": counted, "cli_says_events": int(said.group(1)) if said else None}


def measure_hta(src: Path, work: Path, include_last: bool) -> dict[str, Any]:
    """HTA in a child working in an empty directory; wall time from this process; counts the output."""
    work.mkdir()
    wall, stdout, tree_kb = run_tree([sys.executable, "-c", child_script(HTA_CHILD), str(src), str(work),
                                      "1" if include_last else "0"], HTA_TIMEOUT_S, f"HTA on {src.name}")
    child = tagged(stdout, "the HTA child")
    if len(child["outputs"]) != 1:
        sys.exit(f"error: expected one HTA output in {work}, found {child['outputs']}")
    out = work / child["outputs"][0]
    return {"wall_s": wall, "peak_rss_mb": max(child["peak_rss_kb"], tree_kb) * 1024 / MB,
            "import_s": child["import_s"], "parse_s": child["parse_s"], "generate_s": child["generate_s"],
            "in_child_s": child["total_s"], "out_gz_mb": out.stat().st_size / MB,
            "counter_events": counter_events(out)}


def _combined(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The first run's figures with the median wall time and the largest peak RSS of all."""
    out = dict(runs[0])
    out["wall_s"] = statistics.median(r["wall_s"] for r in runs)
    out["walls_s"] = [r["wall_s"] for r in runs]
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    return out


def compare(label: str, src: Path, include_last: bool, progress: Any, repeat: int = 1) -> dict[str, Any]:
    """Both tools on ``src``, in turn ``repeat`` times, in a scratch directory removed afterwards."""
    raw, counts = scan(src)
    ta_runs, hta_runs = [], []
    with tempfile.TemporaryDirectory(prefix="counters_vs_hta_") as tmp:
        for i in range(repeat):
            print(f"  {label}: traceaug ...", file=progress, flush=True)
            ta_runs.append(measure_traceaug(src, Path(tmp)))
            print(f"  {label}: HTA ... (traceaug took {ta_runs[-1]['wall_s']:.1f} s)", file=progress,
                  flush=True)
            hta_runs.append(measure_hta(src, Path(tmp) / f"hta{i}", include_last))
            print(f"  {label}: done (HTA took {hta_runs[-1]['wall_s']:.1f} s)", file=progress, flush=True)
    ta, hta = _combined(ta_runs), _combined(hta_runs)
    speed = hta["wall_s"] / ta["wall_s"]
    rss = ta["peak_rss_mb"] / hta["peak_rss_mb"]
    return {"trace": label, "path": str(src), "raw_mb": raw / MB,
            "input_counter_events": sum(counts.values()), "traceaug": ta, "hta": hta,
            "speed_ratio": speed, "rss_ratio": rss,
            "pass": {"speed": speed >= TARGET_SPEED_RATIO, "rss": rss <= TARGET_RSS_RATIO}}


def runs_text(values: list[float]) -> str:
    """Each run's figure, for the summary lines of every bench."""
    return ", ".join(f"{v:.2f}" for v in values)


def tool_line(label: str, r: dict[str, Any], side: str) -> str:
    """One tool's summary line from a bench's flat figures (``<side>_wall_s``,
    ``<side>_peak_mb``, ``<side>_walls_s``)."""
    return (f"{label:<19}{r[side + '_wall_s']:6.2f} s   peak RSS {r[side + '_peak_mb']:7.0f} MB"
            f"   (runs: {runs_text(r[side + '_walls_s'])})")


def ratio_line(ratio: float, target: float, what: str = "") -> str:
    """The speed ratio against its target, with its verdict."""
    verdict = "PASS" if ratio >= target else "MISS"
    return f"speed ratio HTA/traceaug {ratio:.2f}x{what} (target >= {target:g}x): {verdict}"


# ----- reporting --------------------------------------------------------------------------------
def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Right-aligned columns except the first."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return [line(header), "-" * (sum(widths) + 2 * (len(widths) - 1)), *(line(r) for r in rows)]


def _runs(figures: dict[str, Any]) -> str:
    return ", ".join(f"{w:.2f}" for w in figures["walls_s"]) + " s"


def report(results: list[dict[str, Any]], include_last: bool, warm_s: float) -> str:
    """The figures as plain-text tables."""
    def mark(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    main_rows = [[r["trace"], f"{r['raw_mb']:.1f}", f"{r['traceaug']['wall_s']:.2f}",
                  f"{r['hta']['wall_s']:.2f}", f"{r['speed_ratio']:.1f}x", mark(r["pass"]["speed"]),
                  f"{r['traceaug']['peak_rss_mb']:.0f}", f"{r['hta']['peak_rss_mb']:.0f}",
                  f"{r['rss_ratio']:.2f}x", mark(r["pass"]["rss"])] for r in results]
    lines = table(["trace", "raw MB", "traceaug s", "HTA s", "speed HTA/ta",
                   f">={TARGET_SPEED_RATIO:g}x", "traceaug RSS MB", "HTA RSS MB", "RSS ta/HTA",
                   f"<={TARGET_RSS_RATIO:g}x"], main_rows)
    lines.append("")

    def said(r: dict[str, Any]) -> str:
        n = r["traceaug"]["cli_says_events"]
        return "?" if n is None else f"{n:,}"

    check_rows = [[r["trace"], f"{r['input_counter_events']:,}", f"{r['traceaug']['counter_events']:,}",
                   said(r), f"{r['hta']['counter_events']:,}", f"{r['traceaug']['out_gz_mb']:.1f}",
                   f"{r['hta']['out_gz_mb']:.1f}"] for r in results]
    lines += table(["trace", "input C events", "traceaug C events", "(CLI says)", "HTA C events",
                    "traceaug out gz MB", "HTA out gz MB"], check_rows)
    lines.append("")
    detail_rows = [[r["trace"], f"{r['traceaug']['rss_run_wall_s']:.2f}",
                    f"{r['traceaug']['rss_run_import_s']:.2f}", f"{r['hta']['import_s']:.2f}",
                    f"{r['hta']['parse_s']:.2f}", f"{r['hta']['generate_s']:.2f}"] for r in results]
    lines += table(["trace", "traceaug in-proc run s", "of which import s", "HTA import s",
                    "HTA parse s", "HTA generate s"], detail_rows)
    lines.append("")
    lines.append("wall = process start to exit, seen from the parent (median of the runs: "
                 + "; ".join(f"{r['trace']} traceaug {_runs(r['traceaug'])}, HTA {_runs(r['hta'])}"
                             for r in results) + ")")
    lines.append(f"RSS = peak of the child's process tree (largest of the runs); wasm warm-up run "
                 f"{warm_s:.2f} s; python {sys.version.split()[0]}")
    lines.append("HTA include_last_profiler_step=" + str(include_last)
                 + ("" if include_last else " (HTA's default: it leaves the last ProfilerStep out, so it\n"
                    "emits fewer counter events than traceaug, which covers the whole trace)"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="trace to run on (and to scale)")
    parser.add_argument("--target-mb", type=float, default=250.0,
                        help="minimum raw JSON size of the scaled trace")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="where the scaled trace goes")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--skip-scaled", action="store_true", help="only the original trace")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each tool on the original trace (median wall time); the scaled "
                             "trace runs once (HTA takes over a minute there)")
    parser.add_argument("--hta-include-last-step", action="store_true",
                        help="pass include_last_profiler_step=True to HTA (same span as traceaug)")
    args = parser.parse_args(argv)
    src = args.trace.resolve()
    if not src.is_file():
        sys.exit(f"error: input trace not found: {src}\n(pass --trace PATH, or put the shared traces at "
                 f"{SHARED})")
    progress = sys.stderr if args.json else sys.stdout
    inputs = [("original", src)]
    if not args.skip_scaled:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        print(f"preparing the >= {args.target_mb:g} MB scaled trace from {src} ...", file=progress,
              flush=True)
        scaled, meta = scaled_at_least(src, args.target_mb, args.out_dir)
        inputs.append((f"scaled x{meta['copies']}", scaled.resolve()))
    with tempfile.TemporaryDirectory(prefix="counters_vs_hta_warm_") as tmp:
        warm_s = warm_up(Path(tmp))
    print("measuring, each tool in a fresh subprocess, one at a time ...", file=progress, flush=True)
    results = [compare(label, path, args.hta_include_last_step, progress,
                       max(args.repeat, 1) if label == "original" else 1) for label, path in inputs]
    if args.json:
        print(json.dumps({"results": results, "hta_include_last_profiler_step": args.hta_include_last_step,
                          "warmup_s": warm_s, "targets": {"speed_ratio_min": TARGET_SPEED_RATIO,
                                                          "rss_ratio_max": TARGET_RSS_RATIO}}, indent=1))
    else:
        print(report(results, args.hta_include_last_step, warm_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
