"""One convention for numbers (issue 23 item 11), checked on every command's CSV and JSON and on
every DataFrame of the Python API, run on small real traces: a column holding a time names its
unit, a share is a percent named ``*_pct``, a missing value is empty in CSV and null in JSON
(never ``nan`` / ``None`` / ``NULL`` text), and a terminal table cuts long text the same way."""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import shared_trace

import traceaug
import traceaug.analyses as ta
from traceaug.cli import main

TRACE = "kineto/a100_simple_add_cuda_sync.json.gz"  # 3 streams, steps, syncs: every table has rows
JOB = "kineto/jobs/dlrm_v100_8ranks"  # every rank of a job: its collectives
PAIR = ("kineto/diff/h100_runs/a/trace.json.gz", "kineto/diff/h100_runs/b/trace.json.gz")
STEPS = "kineto/diff/tiny_base/base.json.gz"  # two ProfilerSteps: a per-step table
MEMORY = "kineto/h100_bert_small_inference.json.gz"  # [memory] events: the memory tables have rows
CUPTI = "kineto/a100_cupti_counters.json.gz"  # cuda_profiler_range events: ``cupti``'s tables
SERVING = "kineto/inference/vllm_decode_full/graph_execution.json.gz"  # a serving step, a graph replay
SGLANG = "kineto/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"  # another: diff's serving phases
# Frames that are empty on these traces (no bandwidth counter; no step limits the per-step view...).
MAY_BE_EMPTY = {"counters.bandwidth", "whatif.errors"}
UNITS = ("ns", "us", "ms", "s", "pct", "gbps", "bytes", "flops", "tflops", "tbps")
SHAPES = "kineto/h100_qwen05b_inference.json.gz"  # recorded shapes and a known GPU: efficiency's figures
# Names that hold no time and no share: identities, labels, counts, sizes.
UNITLESS = {
    # identities and labels
    "rank", "world_size", "file", "out", "outputs", "devices", "device", "stream", "streams",
    "name", "type", "key", "kind", "category", "source", "series", "metric", "section", "event",
    "transition", "from", "to", "launch_name", "correlation", "status", "scope", "operator",
    "operators", "pattern", "kernel_ids", "kernels", "window", "title", "notes", "warnings",
    "perfetto_ui", "max_total_rank", "waited_for_rank", "path", "side", "a", "b", "schema_version",
    "group", "straggler", "cause", "cause_ops", "change", "speedup", "position", "findings",
    "call", "waited_for", "replay", "annotation", "op", "kernel", "top_op", "bottom_op",
    # counts and sizes
    "count", "count_a", "count_b", "delta_count", "ops", "gaps", "cpu_ops", "runtime_calls",
    "memcpys", "memsets", "profiler_steps", "step", "steps", "launched_ops", "unlaunched_ops",
    "short_gpu_ops", "runtime_outliers", "delay_outliers", "ranks", "length", "instances",
    "bytes", "edges", "nodes", "skipped_backwards", "iters", "gpus",
    "per_iter_instances", "mean_queued", "max_queued", "seq", "start", "instance", "first_op",
    "gpu_pid", "cpu_pid", "cpu_tid", "pid", "tid", "value", "events", "collectives",
    "straggler_count", "inferred", "allocations",
    # a job's verdict (``job_verdict``): ranks, counts, its text
    "first_rank", "last_rank", "most_lost_rank", "arrived_last", "waiting_ranks", "verdict", "text",
    "p_value",  # a probability (diff: Mann–Whitney U over the per-step times)
    # diff's gate (``--fail-on-regression``): its test, level, q-values, verdicts and step counts
    "test", "level", "q_value", "gates", "step_regressed", "enough_steps", "steps_a", "steps_b",
    # efficiency: an op's model (FLOPs and bytes are counts), its inputs, what bounds it, the peaks' row
    "flops", "flops_per_byte", "shapes", "dtypes", "family", "families", "bound", "found_by",
    "bound_a", "bound_b",  # (diff: a changed op's bound in A and in B)
    # a serving trace's steps (``analysis.serving``) and graph replays (``analysis.graph_replay``)
    "phase", "mean_batch", "serving_steps", "graph_replays", "phases", "graph_replayed", "attributed",
    # findings (``render.findings``): labels, and a verify query's ``expect``, in the unit its ``column`` says
    "id", "confidence", "evidence", "open", "command", "trace", "sql", "column", "expect",
}
# Times in ns that are a statistic of exact times (a mean, a median, a sum of means), so float64.
FRACTIONAL_NS = {"mean_ns", "std_ns", "median_ns", "mean_total_ns", "mean_cpu_duration_ns",
                 "mean_launch_delay_ns", "mean_wait_ns", "mean_transfer_ns", "gpu_mean_ns",
                 "transfer_ns", "caused_wait_ns", "lost_per_rank_ns", "nccl_wait_ns",
                 "nccl_transfer_ns", "roofline_ns", "latency_mean_ns", "latency_p50_ns", "latency_p90_ns",
                 "latency_p99_ns", "cpu_between_steps_mean_ns"}
# Frames whose times are all means per step (``diff``: an op's time per step over the steps compared).
PER_STEP_MEANS = {"diff.summary", "diff.ops"}
# Times not in ns: histogram bin edges in µs (log-spaced, as they print). No other (issue 34: info's
# duration, counters' full / busy time and diff's per-step times were in ms).
OTHER_UNITS = {"lo_us", "hi_us"}
# Texts a missing value must never print as in CSV or JSON.
MISSING_TEXTS = {"nan", "NaN", "None", "NULL", "<NA>", "null"}


def bad_name(name: str) -> str | None:
    """Why ``name`` breaks the convention, or None."""
    if name in UNITLESS or any(word in UNITS for word in name.split("_")):  # mean_gbps_busy
        return None
    if "share" in name or "ratio" in name:
        return "a share that is not a percent named *_pct"
    return "neither a unit suffix (_ns, _us, _ms, _s, _pct, _gbps) nor a known unitless name"


def not_ns(name: str) -> str | None:
    """Why a time column ``name`` of CSV / JSON is not in ns as the API's (the terminal's µs aside)."""
    unit = name.rsplit("_", 1)[-1]
    return f"a time in {unit}, not exact ns" if unit in ("us", "ms", "s") and \
        name not in OTHER_UNITS else None


def cli(*args: str) -> str:
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


def csv_names(text: str) -> tuple[set[str], list[str]]:
    """Every header of a CSV output (blocks after ``# title`` lines) and every cell."""
    names, cells = set(), []
    for block in re.split(r"(?m)^# .*\n", text):
        rows = list(csv.reader(io.StringIO(block.strip("\n"))))
        if rows:
            names.update(rows[0])
            cells += [c for r in rows[1:] for c in r]
    return names, cells


def json_names(data, names: set[str], values: list) -> None:
    """Keys holding a value (a scalar or a list of scalars) anywhere in ``data``; every value."""
    if isinstance(data, dict):
        for k, v in data.items():
            if k == "inferred" and isinstance(v, dict):  # what was inferred (a text) -> how many
                names.add(k)
                values += list(v.values())
            elif isinstance(v, list) and not v:  # a table without rows: no value, no name
                continue
            elif isinstance(v, dict) or (isinstance(v, list) and v and isinstance(v[0], dict)):
                json_names(v, names, values)
            else:
                names.add(k)
                values += v if isinstance(v, list) else [v]
    elif isinstance(data, list):
        for v in data:
            json_names(v, names, values)


def commands(tmp: Path) -> dict[str, list[str]]:
    """Every command that prints a table, with its arguments."""
    src = str(shared_trace(TRACE))
    a, b = (str(shared_trace(p)) for p in PAIR)
    return {
        "info": ["info", src], "kernels": ["kernels", src], "gaps": ["gaps", src],
        "breakdown": ["breakdown", src], "launches": ["launches", src], "report": ["report", src],
        "report (serving)": ["report", str(shared_trace(SERVING))],
        "info (serving)": ["info", str(shared_trace(SERVING))],
        "serving": ["serving", str(shared_trace(SERVING)), str(tmp / "s.json")],
        "counters": ["counters", src, str(tmp / "c.json")],
        "patterns": ["patterns", src, str(tmp / "p.json")],
        "critical-path": ["critical-path", src, str(tmp / "cp.json")],
        "diff": ["diff", a, b],
        "diff --fail-on-regression": ["diff", a, b, "--fail-on-regression", "1000"],
        "breakdown (serving)": ["breakdown", str(shared_trace(SERVING))],
        "diff (serving)": ["diff", str(shared_trace(SERVING)), str(shared_trace(SGLANG)),
                           "--fail-on-regression", "50000"],
        "report (memory)": ["report", str(shared_trace(MEMORY))],
        "counters (memory)": ["counters", str(shared_trace(MEMORY)), str(tmp / "m.json"),
                              "--series", "memory"],
        "cupti": ["cupti", str(shared_trace(CUPTI))],
        "whatif": ["whatif", src, "--scale", "comp=0.5"],
        "collectives": ["collectives", str(shared_trace(JOB))],
        "collectives --by rank": ["collectives", str(shared_trace(JOB)), "--by", "rank"],
        "stragglers": ["stragglers", str(shared_trace(JOB))],
        "efficiency": ["efficiency", str(shared_trace(SHAPES))],
    }


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[tuple[str, str], str]:
    tmp = tmp_path_factory.mktemp("conventions")
    return {(name, fmt): cli(*args, "--format", fmt)
            for name, args in commands(tmp).items() for fmt in ("csv", "json")}


def test_every_csv_and_json_column_says_its_unit(outputs) -> None:
    bad = {}
    for (command, fmt), text in outputs.items():
        if fmt == "csv":
            names, cells = csv_names(text)
            if command.split()[0] in ("counters", "critical-path"):  # long form: metrics are values too
                rows = list(csv.DictReader(io.StringIO(text)))
                names |= {r["metric"] for r in rows if "metric" in r}
            found = MISSING_TEXTS & set(cells)
        else:
            names, values = set(), []
            json_names(orjson.loads(text), names, values)
            found = MISSING_TEXTS & {v for v in values if isinstance(v, str)}
            found |= {"NaN"} if any(isinstance(v, float) and math.isnan(v) for v in values) else set()
        assert names, (command, fmt)
        for n in sorted(names):
            if (why := bad_name(n) or not_ns(n)) is not None:
                bad[(command, fmt, n)] = why
        assert not found, f"{command} --format {fmt} prints a missing value as {found}"
    assert not bad, "\n".join(f"{c} --format {f}: {n}: {w}" for (c, f, n), w in bad.items())


def test_totals_are_exact_int_ns(outputs) -> None:
    """``info``'s duration (was ``duration_ms``, rounded to the µs) is the raw trace's span in exact
    ns, first start to last end; ``counters``' times at a full queue and busy copying are integers."""
    raw = orjson.loads(gzip.decompress(shared_trace(TRACE).read_bytes()))["traceEvents"]
    timed = [e for e in raw if "ts" in e]
    start = min(round(e["ts"] * 1000) for e in timed)
    end = max(round(e["ts"] * 1000) + round(e.get("dur", 0) * 1000) for e in timed)
    info = orjson.loads(outputs[("info", "json")])
    assert type(info["duration_ns"]) is int and info["duration_ns"] == end - start == 41_602_740_000
    counters = orjson.loads(outputs[("counters", "json")])
    assert counters["queue"] and all(type(r["full_ns"]) is int for r in counters["queue"])
    assert all(type(r["busy_ns"]) is int for r in counters["bandwidth"])


def test_summary_columns_say_their_unit() -> None:
    """``summary`` (JSON; its text keeps the Analyzer's ms) on the Analyzer's example config."""
    config = shared_trace("nsys/gpa/gpt5b_fp8_config.json")
    names, values = set(), []
    json_names(orjson.loads(cli("summary", "--config", str(config), "--format", "json")), names,
               values)
    assert "per_iter_pct" in names
    assert not {n: why for n in names if (why := bad_name(n) or not_ns(n))}  # ms before issue 34


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> dict[str, pd.DataFrame]:
    """Every DataFrame the Python API returns (``traceaug.__all__``'s functions and
    ``traceaug.analyses``), on small real traces, by a name saying where it comes from."""
    tmp = tmp_path_factory.mktemp("api")
    src, steps = shared_trace(TRACE), shared_trace(STEPS)
    a, b = (shared_trace(p) for p in PAIR)
    out = {f: getattr(ta, f)(src) for f in (
        "kernels", "kernels_across_ranks", "stream_gaps", "device_gaps", "kernel_transitions",
        "gap_histogram", "idle_breakdown", "launches", "launch_summary")}
    out |= {f: getattr(ta, f)(steps) for f in ("temporal_breakdown", "comm_comp_overlap")}
    for name in ("kernels", "gaps", "breakdown", "launches", "report"):
        out |= {f"{name}[{title}]": df for title, df in
                getattr(traceaug, name)(steps, progress=False).items()}
    res = traceaug.counters(src, tmp / "c.json", progress=False)
    out |= {"counters.queue": res.queue, "counters.bandwidth": res.bandwidth}
    memory = shared_trace(MEMORY)
    out["counters.memory"] = traceaug.counters(memory, tmp / "m.json", series=("memory",),
                                               progress=False).memory
    out |= {f"report({title})": df for title, df in traceaug.report(memory, progress=False).items()
            if title.startswith("Memory")}
    out |= {f"cupti[{title}]": df for title, df in traceaug.cupti(shared_trace(CUPTI),
                                                                  progress=False).items()}
    found = traceaug.patterns(src, tmp / "p.json", progress=False)
    out |= {"patterns": found.patterns, "occurrences": found.occurrences}
    path, summary = traceaug.critical_path(src, progress=False)
    out |= {"critical_path": path, "critical_path.summary": summary}
    comparison = traceaug.diff(a, b, progress=False)
    out |= {"diff.summary": comparison.summary, "diff.ops": comparison.ops}
    out["info"] = pd.DataFrame(traceaug.info(src, progress=False))
    out |= {f"report(serving)[{title}]": df for title, df in
            traceaug.report(shared_trace(SERVING), progress=False).items() if title.startswith("serving")}
    out |= dict(zip(("whatif.steps", "whatif.changes", "whatif.errors"),
                    traceaug.whatif(steps, scale=["comp=0.5"], progress=False)))
    job = shared_trace(JOB)
    out |= {"collectives": traceaug.collectives(job, progress=False),
            "collectives(by=rank)": traceaug.collectives(job, by="rank", progress=False),
            "stragglers": traceaug.stragglers(job, progress=False)}
    out["stragglers.attrs[verdict]"] = pd.DataFrame(out["stragglers"].attrs["verdict"])
    eff = traceaug.efficiency(shared_trace(SHAPES), progress=False)
    out |= {f"efficiency.{k}": getattr(eff, k) for k in ("groups", "families", "steps")}
    return out


def test_every_api_dataframe_column_says_its_unit(frames) -> None:
    bad = {(f, c): bad_name(c) for f, df in frames.items() for c in df.columns if bad_name(c)}
    assert not bad, "\n".join(f"{f}: {c}: {w}" for (f, c), w in bad.items())
    empty = [f for f, df in frames.items() if not len(df) and f not in MAY_BE_EMPTY
             and "[" not in f]  # a command's sections may be (``launches``' outliers)
    assert not empty, empty


def bad_dtype(name: str, dtype, means: bool = False) -> str | None:
    """Why column ``name`` of ``dtype`` breaks the API's convention (issue 34), or None: times in exact
    int64 ns (float only for a mean, median or the like; every time of a frame of ``means``),
    percents float, ranks and steps int64 (nullable Int64 where one can be missing), no time in
    another unit."""
    kind = dtype.name  # "int64", "Int64" (nullable), "float64", "str", "object"...
    unit = name.rsplit("_", 1)[-1] if "_" in name else ""
    if name in ("rank", "step") or name.endswith("_rank") or name == "straggler":
        return None if kind in ("int64", "Int64") else f"a rank or step as {kind}"
    if unit == "ns":
        if kind in ("int64", "Int64") or (kind == "float64" and (means or name in FRACTIONAL_NS)):
            return None
        return f"a time in ns as {kind}"
    if not_ns(name):
        return not_ns(name)
    if unit == "pct" and kind != "float64":
        return f"a percent as {kind}"
    return None


def test_every_api_frame_keeps_one_convention(frames) -> None:
    """One convention for every frame (issue 34 item 6): ``stragglers`` and ``collectives`` gave float
    ``_us``, ``rank`` was object in the analyses' frames, and ``temporal_breakdown`` mixed the
    all-steps row (``step`` None) into the per-step rows."""
    bad = {(f, c): why for f, df in frames.items() for c, t in df.dtypes.items()
           if (why := bad_dtype(c, t, f in PER_STEP_MEANS))}
    assert not bad, "\n".join(f"{f}: {c}: {w}" for (f, c), w in bad.items())
    for f, df in frames.items():
        if "rank" in df.columns and not df["rank"].isna().any():
            assert df["rank"].dtype == np.int64, f  # nullable only where a rank is missing


def test_temporal_breakdown_keeps_all_steps_apart(frames) -> None:
    """The per-step frame holds steps only; ``all_steps=True`` the row over all of them (HTA's)."""
    raw = orjson.loads(gzip.decompress(shared_trace(STEPS).read_bytes()))["traceEvents"]
    steps = sorted(int(e["name"].split("#")[1]) for e in raw if e.get("ph") == "X"
                   and e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation")
    assert len(steps) == 2 and frames["temporal_breakdown"]["step"].tolist() == steps  # no "all steps"
    src = shared_trace(STEPS)
    whole = ta.temporal_breakdown(src, all_steps=True)
    assert "step" not in whole.columns and len(whole) == 1
    assert not {c: w for c, t in whole.dtypes.items() if (w := bad_dtype(c, t))}
    per_step = frames["temporal_breakdown"]
    assert whole["window_ns"].item() == per_step["window_ns"].sum()  # the steps' windows tile it
    overlap = ta.comm_comp_overlap(src, all_steps=True)
    assert list(overlap.columns) == ["rank", "communication_ns", "comp_comm_ns", "comm_overlap_pct"]


def test_job_frames_are_exact_ns() -> None:
    """``stragglers``' and ``collectives``' times are the trace's integer ns, not µs floats: each
    rank's step time is its ProfilerStep's ``dur`` (µs in the raw JSON) × 1000, exactly."""
    job = shared_trace(JOB)
    table = traceaug.stragglers(job, progress=False)
    for path in sorted(job.glob("*.json.gz")):
        raw = orjson.loads(gzip.decompress(path.read_bytes()))
        rank = raw["distributedInfo"]["rank"]
        (dur,) = [e["dur"] for e in raw["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
                  and e.get("ph") == "X" and e.get("cat") == "user_annotation"]
        got = table.loc[table["rank"] == rank, "step_ns"]
        assert got.dtype == np.int64 and got.tolist() == [round(dur * 1000)], path.name


def _cells(line: str) -> list[str]:
    return [c for c in re.split(r"\s{2,}", line.strip()) if c]


def test_terminal_tables_cut_long_text_alike() -> None:
    """``query`` and ``patterns`` printed 416-character lines: every table cell is at most
    ``output.CELL_WIDTH`` characters, a longer text cut to 79 and "…"; csv keeps it whole."""
    from traceaug.output import CELL_WIDTH

    src = shared_trace(TRACE)
    sql = "SELECT name FROM slice ORDER BY LENGTH(name) DESC, name LIMIT 3"
    longest = cli("query", str(src), sql, "--format", "csv").splitlines()[1].strip('"')
    assert len(longest) > CELL_WIDTH  # the trace has names to cut
    table = cli("query", str(src), sql).splitlines()
    assert table[1].strip() == longest[:CELL_WIDTH - 1] + "…"
    for args in (["query", str(src), sql], ["kernels", str(src)], ["gaps", str(src)],
                 ["launches", str(src)], ["breakdown", str(src)]):
        for line in cli(*args).splitlines():
            assert all(len(c) <= CELL_WIDTH for c in _cells(line)), (args[0], line)
    full = cli("kernels", str(src), "--wide")
    assert any(len(c) > CELL_WIDTH for line in full.splitlines() for c in _cells(line))
