"""`traceaug diff`: deltas against the raw events and HTA's TraceDiff, outputs, bad pairs."""

from __future__ import annotations

import csv
import functools
import gzip
import html
import io
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TESTDATA, require_hta, shared_trace
from conftest import run_cli as cli
from rawjson import _KIND_OF as KIND_OF
from rawjson import load_raw, ns

import traceaug
from traceaug.analysis.diff import Side, op_table
from traceaug.cli import main

GPU_KINDS = {"kernel", "memcpy", "memset"}


def diff_json(a: Path, b: Path, *extra: str) -> dict:
    result = cli("diff", str(a), str(b), "--format", "json", *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def invoke(*args: str):
    """``traceaug ARGS`` in-process (click's CliRunner), stdout and stderr apart."""
    return CliRunner().invoke(main, list(args))


def diff_rows(a: Path, b: Path, *extra: str) -> tuple[dict, dict]:
    """``diff --format json``'s one rank: its summary and its rows keyed by (device, key)."""
    r = invoke("diff", str(a), str(b), "--format", "json", *extra)
    assert r.exit_code == 0, r.output
    (rank,) = json.loads(r.stdout)["ranks"]
    return rank["summary"], {(row["device"], row["key"]): row for row in rank["ops"]}


def short(name: str) -> str:
    """The test's own short name: the name without its (nested) template and argument lists."""
    if name.startswith(("Memcpy", "Memset")):
        return name
    out, n = name.replace("->", ""), 1
    while n:
        out, n = re.subn(r"<[^<>()]*>|\([^<>()]*\)", "", out)
    return " ".join(out.split()) or name


@functools.lru_cache(maxsize=4)
def raw_events(path: Path) -> list[dict]:
    """The complete (X) events of a raw trace, read once per test session."""
    return [e for e in load_raw(path)["traceEvents"] if e.get("ph") == "X"]


def raw_steps(events: list[dict]) -> dict[int, tuple[int, int]]:
    """Step number -> (start, end) ns of its first ProfilerStep annotation."""
    out: dict[int, tuple[int, int]] = {}
    for e in sorted(events, key=lambda e: ns(e["ts"])):
        m = re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
        if m and e.get("cat") in ("user_annotation", "cpu_op", "Operator"):
            out.setdefault(int(m.group(1)), (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    return out


def raw_self_ns(events: list[dict]) -> dict[int, int]:
    """id(event) -> a CPU op's self time (ns): its duration less the CPU ops directly inside it on
    its thread (a stack over the ops in (ts, longest first) order)."""
    out: dict[int, int] = {}
    threads: dict = defaultdict(list)
    for e in events:
        if KIND_OF.get(e.get("cat")) == "cpu_op" and not e["name"].startswith("ProfilerStep#"):
            threads[(e.get("pid"), e.get("tid"))].append(e)
    for ops in threads.values():
        stack: list[tuple[int, dict]] = []
        for e in sorted(ops, key=lambda e: (ns(e["ts"]), -ns(e["dur"]))):
            start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            while stack and stack[-1][0] <= start:
                stack.pop()
            out[id(e)] = ns(e["dur"])
            if stack and end <= stack[-1][0]:
                out[id(stack[-1][1])] -= ns(e["dur"])
            stack.append((end, e))
    return out


def raw_per_step(path: Path, step: int | None = None, index: int | None = None,
                 by_short: bool = False, inclusive: bool = False) -> dict:
    """(device, name) -> (count per step, total ns per step), computed from the raw JSON: CPU
    ops by the step holding their start (self time unless ``inclusive``), GPU ops by the step of
    the first runtime call with their correlation id; ``step`` (a number) or ``index`` (a
    position) compares one step."""
    events = raw_events(path)
    own = raw_self_ns(events)
    steps = raw_steps(events)
    if index is not None:
        step = sorted(steps, key=lambda n: steps[n])[index]
    chosen = {step: steps[step]} if step is not None else steps

    def step_at(ts: int) -> int | None:
        held = [n for n, (lo, hi) in steps.items() if lo <= ts]
        last = max(held, key=lambda n: steps[n][0], default=None)
        return last if last is not None and ts < steps[last][1] else None

    launch: dict = {}
    for e in sorted(events, key=lambda e: ns(e["ts"])):
        if KIND_OF.get(e.get("cat")) == "runtime" and "correlation" in e.get("args", {}):
            launch.setdefault(e["args"]["correlation"], step_at(ns(e["ts"])))
    out: dict = defaultdict(lambda: [0, 0])
    for e in events:
        kind = KIND_OF.get(e.get("cat"))
        if kind == "cpu_op" and not e["name"].startswith("ProfilerStep#"):
            device, at = "cpu", step_at(ns(e["ts"]))
        elif kind in GPU_KINDS:
            device, at = "gpu", launch.get(e.get("args", {}).get("correlation"))
        else:
            continue
        if at in chosen:
            key = (device, short(e["name"]) if by_short else e["name"])
            out[key][0] += 1
            out[key][1] += ns(e["dur"]) if inclusive or device == "gpu" else own[id(e)]
    n = len(chosen)
    return {k: (c / n, t / n) for k, (c, t) in out.items()}


def expected_status(want_a: dict, want_b: dict, key, threshold: float = 5.0) -> str:
    if key not in want_a:
        return "added"
    if key not in want_b:
        return "removed"
    ta, tb = want_a[key][1], want_b[key][1]
    pct = 100 * (tb - ta) / ta if ta else 0.0
    return "increased" if pct > threshold else "decreased" if pct < -threshold else "unchanged"


def assert_rows_equal_raw(rows: dict, want_a: dict, want_b: dict, threshold: float = 5.0) -> None:
    """Every row's counts, totals, delta and status equal the raw events' (and no other rows)."""
    assert set(rows) == set(want_a) | set(want_b)
    for key, row in rows.items():
        ca, ta = want_a.get(key, (0, 0))
        cb, tb = want_b.get(key, (0, 0))
        assert (row["count_a"], row["count_b"]) == (pytest.approx(ca), pytest.approx(cb)), key
        assert row["total_a_ns"] == pytest.approx(ta) and row["total_b_ns"] == pytest.approx(tb)
        assert row["delta_ns"] == pytest.approx(tb - ta), key
        assert row["status"] == expected_status(want_a, want_b, key, threshold), key


def test_identical_inputs_are_unchanged() -> None:
    a = shared_trace("kineto/diff/tiny_base/base.json.gz")
    data = diff_json(a, a)
    (rank,) = data["ranks"]
    assert {r["status"] for r in rank["ops"]} == {"unchanged"}
    assert all(r["delta_ns"] == 0 and r["delta_count"] == 0 for r in rank["ops"])
    assert rank["summary"]["a"] == rank["summary"]["b"]


def test_tiny_pair_deltas_equal_the_raw_events() -> None:
    a = shared_trace("kineto/diff/tiny_base/base.json.gz")
    b = shared_trace("kineto/diff/tiny_test/test.json.gz")
    _, rows = diff_rows(a, b)
    assert_rows_equal_raw(rows, raw_per_step(a), raw_per_step(b))
    assert {r["status"] for r in rows.values()} >= {"added"}


@pytest.mark.parametrize("pair", ["h100_runs", "v100_resnet50_2021", "a100_vs_v100"])
def test_real_pairs(pair: str) -> None:
    """Every row of three real pairs equals the raw events' counts, totals and statuses; on
    the two smaller, also by short name, and the table's top lists hold changed rows only,
    largest first."""
    folder = shared_trace(f"kineto/diff/{pair}")
    a, b = sorted(p for p in folder.iterdir() if p.is_dir())
    if pair == "a100_vs_v100":
        a, b = folder / "control", folder / "test"
    fa, fb = next(a.iterdir()), next(b.iterdir())
    summary, rows = diff_rows(a, b)
    assert_rows_equal_raw(rows, raw_per_step(fa), raw_per_step(fb))
    steps_a, steps_b = (raw_steps(raw_events(f)) for f in (fa, fb))
    assert (summary["a"]["steps"], summary["b"]["steps"]) == (len(steps_a), len(steps_b))
    mean_ns = sum(hi - lo for lo, hi in steps_a.values()) / len(steps_a)
    assert summary["a"]["step_ns"] == pytest.approx(mean_ns)
    if pair == "a100_vs_v100":
        return  # the largest pair: its rows are enough (HTA's test below covers it too)
    _, gpu_short = diff_rows(a, b, "--device", "gpu", "--by", "short-name")
    want_a = {k: v for k, v in raw_per_step(fa, by_short=True).items() if k[0] == "gpu"}
    want_b = {k: v for k, v in raw_per_step(fb, by_short=True).items() if k[0] == "gpu"}
    assert_rows_equal_raw(gpu_short, want_a, want_b)
    table = invoke("diff", str(a), str(b), "--top", "3")
    assert table.exit_code == 0, table.output
    assert "ProfilerStep#" not in table.stdout  # the windows, never rows (2021: an op's category)
    listed = top_rows(table.stdout)
    changed = sorted((r for r in rows.values() if r["status"] != "unchanged"),
                     key=lambda r: -abs(r["delta_ns"]))
    assert listed["Top regressions"] == [r["status"] for r in changed if r["delta_ns"] > 0][:3]
    assert listed["Top improvements"] == [r["status"] for r in changed if r["delta_ns"] < 0][:3]


def top_rows(table: str) -> dict[str, list[str]]:
    """The status column of each "Top ..." list of a diff table."""
    out: dict[str, list[str]] = {}
    title = None
    for line in table.splitlines():
        if line.startswith("Top "):
            title = line.split(" (")[0]
            out[title] = []
        elif title and line.strip() and not line.lstrip().startswith("device"):
            status = [w for w in line.split() if w in STATUSES]
            out[title] += status[-1:] if status else []
    return out


STATUSES = {"added", "removed", "increased", "decreased", "unchanged"}


def test_a100_vs_v100_matches_hta_compare_traces(tmp_path: Path) -> None:
    """Per-name counts and total durations equal HTA's for the same ranks and iteration."""
    require_hta()
    from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff

    folder = shared_trace("kineto/diff/a100_vs_v100")
    dirs = []
    for side in ("control", "test"):
        d = tmp_path / side
        d.mkdir()
        for f in (folder / side).iterdir():
            (d / f.name).write_bytes(f.read_bytes())
        dirs.append(d)
    control, test = (LabeledTrace(label, trace_dir=str(d)) for label, d in zip(("c", "t"), dirs,
                                                                                strict=True))
    step = control.iterations()[0]
    a = Side.of(traceaug.load(next(dirs[0].iterdir()), progress=False, only="ops"))  # as diff loads
    b = Side.of(traceaug.load(next(dirs[1].iterdir()), progress=False, only="ops"))
    try:
        for device, dtype in (("gpu", DeviceType.GPU), ("cpu", DeviceType.CPU)):
            hta = TraceDiff.compare_traces(control, test, device_type=dtype, control_iteration=step,
                                           test_iteration=step)
            for side, label in ((a, "c"), (b, "t")):
                ours = op_table(side, "name", device, step, inclusive=True)
                theirs = hta.loc[ours["key"]]
                assert (ours["count"] == theirs[f"{label}_counts"].to_numpy()).all()
                # HTA keeps durations in whole microseconds
                assert (abs(ours["total"] / 1000 - theirs[f"{label}_total_duration"].to_numpy()) <= 0.5).all()
                assert len(ours["key"]) > 100
    finally:
        a.trace.close()
        b.trace.close()


def test_bad_pairs(tmp_path: Path) -> None:
    good = shared_trace("kineto/diff/tiny_base/base.json.gz")
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    r = cli("diff", str(good), str(empty))
    assert r.returncode == 1 and f"{empty}: empty file" in r.stderr
    cpu = shared_trace("kineto/cpu_only_gloo.json.gz")
    r = cli("diff", str(cpu), str(cpu))
    assert r.returncode == 1 and "no GPU kernels" in r.stderr
    ranks01 = shared_trace("kineto/multi_rank_sampled")
    other = tmp_path / "b"
    other.mkdir()
    for rank in (3, 7):  # ranks of one job (DLRM's), none of them A's
        (found,) = shared_trace("kineto/jobs/dlrm_v100_8ranks").glob(f"worker{rank}_*")
        other.joinpath(f"rank-{rank}.json.gz").write_bytes(found.read_bytes())
    r = cli("diff", str(ranks01), str(other))
    assert r.returncode == 1 and "no common ranks (A has [0, 1], B has [3, 7])" in r.stderr
    assert "Traceback" not in r.stderr


def test_html_report_and_merged_trace(tmp_path: Path) -> None:
    folder = shared_trace("kineto/diff/h100_runs")
    a, b = folder / "a" / "trace.json.gz", folder / "b" / "trace.json.gz"
    report, merged = tmp_path / "report.html", tmp_path / "merged.json.gz"
    r = cli("diff", str(a), str(b), "--html", str(report), "--trace", str(merged))
    assert r.returncode == 0, r.stderr
    page = report.read_text()
    assert "<script src=" not in page and "http" not in page  # self-contained, fetches nothing
    with traceaug.load(a, progress=False, full=True) as ta, \
            traceaug.load(b, progress=False, full=True) as tb, \
            traceaug.load(merged, progress=False, full=True) as tm:
        def counts(t):  # but the view's critical-path lanes and arrows from A to B (diff_view)
            return t.query(
                "SELECT (SELECT COUNT(*) FROM slice s LEFT JOIN process_track k ON k.id = s.track_id "
                "LEFT JOIN process p USING (upid) "
                "WHERE p.name IS NULL OR p.name NOT GLOB '?: Critical path') "
                "AS s, (SELECT COUNT(*) FROM flow) AS f, "
                "(SELECT COUNT(*) FROM flow f JOIN slice o ON o.id = f.slice_out "
                "JOIN slice i ON i.id = f.slice_in JOIN thread_track ko ON ko.id = o.track_id "
                "JOIN thread_track ki ON ki.id = i.track_id JOIN thread a ON a.utid = ko.utid "
                "JOIN thread b ON b.utid = ki.utid WHERE "
                "((SELECT pid FROM process WHERE upid = a.upid) >= 1000000000) "
                "!= ((SELECT pid FROM process WHERE upid = b.upid) >= 1000000000)) AS x")
        ca, cb, cm = counts(ta), counts(tb), counts(tm)
        assert cm["s"][0] == ca["s"][0] + cb["s"][0]
        assert cm["f"][0] - cm["x"][0] == ca["f"][0] + cb["f"][0] and cm["x"][0] > 0
        procs = tm.query("SELECT name FROM process WHERE name GLOB 'B: *'")["name"].tolist()
        assert "B: python" in procs
        first = tm.query("SELECT p.name, MIN(s.ts) AS t FROM slice s "
                         "JOIN thread_track tt ON s.track_id = tt.id "
                         "JOIN thread USING (utid) JOIN process p USING (upid) "
                         "WHERE s.name GLOB 'ProfilerStep#*' GROUP BY p.name GLOB 'B: *'")
        assert first["t"].nunique() == 1  # both sides' first steps start together
    assert gzip.open(merged).read(64).lstrip().startswith(b"{\"traceaug\":")
    events = json.load(gzip.open(merged))["traceEvents"]
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"}
    pids = {e["pid"] for e in events if "pid" in e}
    b_pids = {p for p in pids if isinstance(p, int) and 10**9 <= p < 2 * 10**9 or str(p).startswith("B: ")}
    assert b_pids and b_pids <= set(sort)  # every B process says where it sorts: after every A one
    view = {p for p in pids if isinstance(p, int) and p >= 2 * 10**9}  # the Δ and path lanes: pinned
    assert min(sort[p] for p in b_pids) > max(sort.get(p, p if isinstance(p, int) else 0)
                                              for p in pids - b_pids - view)


def test_html_page_headline_first_and_small(tmp_path: Path) -> None:
    """A100 vs V100 (380 ops): the page was 5.0 MB (plotly.js inlined) and 19,780 px tall (every
    op in one table). Now: under 1 MB; the verdict, the headline and the top changes come
    before the all-ops table, which holds every op row of ``--format csv``, collapsed."""
    folder = shared_trace("kineto/diff/a100_vs_v100")
    a, b = folder / "control", folder / "test"
    page_file = tmp_path / "r.html"
    r = cli("diff", str(a), str(b), "--html", str(page_file), "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    page = page_file.read_text()
    assert len(page.encode()) < 1_000_000
    order = [page.index(s) for s in ("class='verdict'", "<td>step time</td>", "Top regressions",
                                     "Top improvements", "<section class='ops'><details>")]
    assert order == sorted(order)
    top = max((r for r in rows if float(r["delta_ns"]) > 0 and r["status"] != "unchanged"),
              key=lambda r: float(r["delta_ns"]))
    assert f"largest regression: <span class='worse'>{top['device']} " in page
    assert f"title='{html.escape(top['key'])}'>{html.escape(top['key'])}</span>" in page
    all_ops = page[page.index("<section class='ops'>"):]
    assert all_ops.count("<tr data-text=") == len(rows) == 380
    assert "<details open" not in page and "<script src=" not in page


def test_step_of_picks_the_last_step_starting_at_or_before() -> None:
    """The SQL step assignment: of the steps starting at or before a timestamp, the last one
    (equal starts: the later in ts order), if its window [ts, ts + dur) holds it; else -1."""
    import numpy as np

    from traceaug.analysis.steps import step_of, step_table

    st = {"step": np.array([3, 4, 5, 7]), "ts": np.array([100, 200, 200, 500]),
          "dur": np.array([100, 50, 120, 10])}
    points = [0, 99, 100, 150, 199, 200, 249, 250, 319, 320, 499, 500, 509, 510, 10**6]
    values = ", ".join(f"({p})" for p in points)
    with traceaug.load(TESTDATA / "small_training.json", progress=False) as t:
        table = step_table(t, st)
        got = t.columns(f"WITH p(x) AS (VALUES {values}) SELECT {step_of('x', table)} AS s FROM p")
        table = step_table(t, {k: v[:0] for k, v in st.items()})
        none = t.columns(f"SELECT {step_of('1', table)} AS s")
    assert got["s"].tolist() == [-1, -1, 3, 3, 3, 5, 5, 5, 5, -1, -1, 7, 7, -1, -1]
    assert none["s"].tolist() == [-1]


def test_merged_trace_is_the_same_bytes_every_run(tmp_path: Path, monkeypatch) -> None:
    """B's processes get their names in order of appearance: string pids ("Traces", "Spans")
    once came out in a set's order, which changes with the interpreter's hash seed."""
    a = shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")
    b = shared_trace("kineto/a100_alexnet_cuda_sync.json.gz")
    outs = []
    for seed in ("1", "2", "3"):
        monkeypatch.setenv("PYTHONHASHSEED", seed)
        out = tmp_path / f"merged{seed}.json"
        r = cli("diff", str(a), str(b), "--trace", str(out))
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]
    assert outs[0].count(b'"name":"process_name","pid":"B: ') >= 2


# A generated pair with known answers: A numbers its steps 5-7, B 16-18 (or ``steps`` of them); per
# step, CPU ops (aten::mm +50% and growing by step, aten::add<int>(y) +5%, aten::relu -67%, aten::old only in
# A, aten::new only in B, two aten::add overloads one short name) and, unless cpu_only, two
# kernels launched by cudaLaunchKernel (gemm<128>(a) +60%, gemm<64>(b) unchanged).
def synthetic(path: Path, side: str, cpu_only: bool = False, steps: int = 3) -> Path:
    first, step_us = (5, 900) if side == "a" else (16, 1200)
    durations = {"aten::mm": 100 if side == "a" else 150, "aten::add<float>(x)": 40,
                 "aten::add<int>(y)": 20 if side == "a" else 21,
                 "aten::relu": 30 if side == "a" else 10,
                 "aten::old" if side == "a" else "aten::new": 25}
    kernels = {"gemm<128>(a)": 50 if side == "a" else 80, "gemm<64>(b)": 10}
    cpu = {"ph": "X", "pid": 1, "tid": 1}
    events = [{**cpu, "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 5}]  # before any step
    correlation = 0
    for k in range(steps):
        start = 1000 + k * 2000
        events.append({**cpu, "cat": "user_annotation", "name": f"ProfilerStep#{first + k}",
                       "ts": start, "dur": step_us})
        t = start + 1
        for name, dur in durations.items():
            dur += 10 * k if name == "aten::mm" else 0
            events.append({**cpu, "cat": "cpu_op", "name": name, "ts": t, "dur": dur})
            t += dur + 1
        for name, dur in ({} if cpu_only else kernels).items():
            correlation += 1
            events.append({**cpu, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t,
                           "dur": 5, "args": {"correlation": correlation}})
            events.append({"ph": "X", "pid": 0, "tid": 7, "cat": "kernel", "name": name,
                           "ts": t + 10, "dur": dur,
                           "args": {"device": 0, "stream": 7, "correlation": correlation}})
            t += 6
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return synthetic(tmp_path / "a.json", "a"), synthetic(tmp_path / "b.json", "b")


def test_statuses_and_threshold_equal_the_raw_events(pair) -> None:
    a, b = pair
    want_a, want_b = raw_per_step(a), raw_per_step(b)
    _, rows = diff_rows(a, b)
    assert_rows_equal_raw(rows, want_a, want_b)
    statuses = {k[1]: r["status"] for k, r in rows.items()}
    assert statuses == {"aten::mm": "increased", "aten::add<float>(x)": "unchanged",
                        "aten::add<int>(y)": "unchanged", "aten::relu": "decreased",
                        "aten::old": "removed", "aten::new": "added", "gemm<128>(a)": "increased",
                        "gemm<64>(b)": "unchanged"}
    _, rows = diff_rows(a, b, "--threshold", "4.9")  # aten::add<int>(y) grew 5%
    assert_rows_equal_raw(rows, want_a, want_b, threshold=4.9)
    assert rows[("cpu", "aten::add<int>(y)")]["status"] == "increased"
    _, rows = diff_rows(a, b, "--threshold", "60")  # gemm<128>(a) grew 60%, aten::mm less
    assert_rows_equal_raw(rows, want_a, want_b, threshold=60)
    assert rows[("gpu", "gemm<128>(a)")]["status"] == "unchanged"
    _, short_rows = diff_rows(a, b, "--by", "short-name")
    assert_rows_equal_raw(short_rows, raw_per_step(a, by_short=True), raw_per_step(b, by_short=True))
    assert short_rows[("cpu", "aten::add")]["count_a"] == 2 and ("gpu", "gemm") in short_rows


def test_top_lists_show_changed_rows_only_never_profiler_steps(pair) -> None:
    a, b = pair
    r = invoke("diff", str(a), str(b), "--top", "2")
    assert r.exit_code == 0, r.output
    lists = top_rows(r.stdout)
    assert lists == {"Top regressions": ["increased", "increased"],  # gemm<128>(a) 90 µs, mm 60
                     "Top improvements": ["removed", "decreased"]}  # aten::old 25, relu 20
    assert "gemm<128>(a)" in r.stdout and "aten::relu" in r.stdout and "ProfilerStep#" not in r.stdout
    lists = top_rows(invoke("diff", str(a), str(b), "--top", "10").stdout)
    assert lists == {"Top regressions": ["increased", "increased", "added"],
                     "Top improvements": ["removed", "decreased"]}  # unchanged rows never listed


def test_steps_per_side_and_by_index(pair) -> None:
    """Runs numbering their steps apart compare by --step-a/--step-b or --step-index;
    ProfilerStep annotations are windows, not rows."""
    a, b = pair
    summary, rows = diff_rows(a, b, "--step-a", "6", "--step-b", "18")
    assert_rows_equal_raw(rows, raw_per_step(a, step=6), raw_per_step(b, step=18))
    assert (rows[("cpu", "aten::mm")]["total_a_ns"], rows[("cpu", "aten::mm")]["total_b_ns"]) == (
        110_000, 170_000)  # one step each: exact ns
    assert (summary["a"]["step"], summary["b"]["step"]) == (6, 18)
    assert (summary["a"]["step_ns"], summary["b"]["step_ns"]) == (900_000, 1_200_000)
    _, by_index = diff_rows(a, b, "--step-index", "-1")
    assert_rows_equal_raw(by_index, raw_per_step(a, index=-1), raw_per_step(b, index=-1))
    assert by_index[("cpu", "aten::mm")]["total_b_ns"] == 170_000
    _, same = diff_rows(a, a, "--step", "7")
    assert_rows_equal_raw(same, raw_per_step(a, step=7), raw_per_step(a, step=7))
    assert not any("ProfilerStep" in key for _, key in rows)
    r = invoke("diff", str(a), str(b), "--step-a", "7", "--step-b", "18")
    assert "(ProfilerStep#7 vs ProfilerStep#18)" in r.stdout
    for bad, message in ((("--step", "6"), "no ProfilerStep#6 (steps: 16, 17, 18)"),
                         (("--step-index", "3"), "no step at index 3 (3 ProfilerSteps: 5, 6, 7)"),
                         (("--step", "6", "--step-b", "18"), "choose the steps one way")):
        r = invoke("diff", str(a), str(b), *bad)
        assert r.exit_code == 1 and message in r.stderr, r.output


def test_device_cpu_on_cpu_only_traces(tmp_path: Path) -> None:
    a = synthetic(tmp_path / "a.json", "a", cpu_only=True)
    b = synthetic(tmp_path / "b.json", "b", cpu_only=True)
    summary, rows = diff_rows(a, b, "--device", "cpu")
    assert_rows_equal_raw(rows, raw_per_step(a), raw_per_step(b))
    assert len(rows) == 6 and summary["a"]["gpu_busy_ns"] == 0
    r = invoke("diff", str(a), str(b))
    assert r.exit_code == 1 and "no GPU kernels" in r.stderr and "--device cpu" in r.stderr


@pytest.fixture
def six(tmp_path: Path) -> tuple[Path, Path]:
    """The pair over six steps: aten::mm 100..150 -> 150..200 µs (+40 %), gemm<128>(a) 50 -> 80 µs
    in every step, the step 900 -> 1200 µs (+33 %)."""
    return (synthetic(tmp_path / "a6.json", "a", steps=6), synthetic(tmp_path / "b6.json", "b", steps=6))


def test_fail_on_regression_exit_code(six) -> None:
    """Exit 3 when the step time (+33 %) or an op in both (gemm<128>(a) +60 %, aten::mm +40 %) grew by
    more than PCT, significantly over the six steps; the message names the ops by time per step (mm's
    +50 µs first); the output is printed all the same. The floor: 1 % of the mean step (10.5 µs)."""
    a, b = six
    ok = invoke("diff", str(a), str(b), "--fail-on-regression", "61")
    assert ok.exit_code == 0 and "Top regressions" in ok.stdout and ok.stderr == ""
    ops = invoke("diff", str(a), str(b), "--fail-on-regression", "55")
    assert ops.exit_code == 3 and "Top regressions" in ops.stdout
    assert ("1 op(s) grew by over 55% and 10.5 us per step, significant over 6 vs 6 steps (q <= 0.05): "
            "gpu gemm<128>(a) (+30.0 us, +60.0%, p=0.0022)" in ops.stderr and "step time" not in ops.stderr)
    step = invoke("diff", str(a), str(b), "--fail-on-regression", "30", "--format", "json")
    assert step.exit_code == 3 and json.loads(step.stdout)["ranks"]
    assert "step time 900.000 -> 1,200.000 us (+33.3%)" in step.stderr
    line = next(x for x in step.stderr.splitlines() if "op(s)" in x)
    assert "2 op(s)" in line and line.index("aten::mm (+50.0 us, +40.0%") < line.index("gemm<128>(a)")


def test_three_steps_are_too_few_to_gate_an_op(pair) -> None:
    """Over three steps a side no op change can be told from noise (Mann–Whitney U: p >= 0.1): it is
    reported, not gated, and the output says so; the step time still gates on its own."""
    a, b = pair
    r = invoke("diff", str(a), str(b), "--fail-on-regression", "55", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert ("1 op(s) grew by over 55% and 10.5 us per step, reported, not gated: 3 vs 3 steps are too "
            "few to tell a change from noise (p >= 0.1 > 0.05): gpu gemm<128>(a) (+30.0 us, +60.0%, "
            "p=0.1)" in r.stderr)
    gate = json.loads(r.stdout)["ranks"][0]["gate"]
    assert (gate["steps_a"], gate["steps_b"], gate["enough_steps"]) == (3, 3, False)
    assert [(o["key"], o["change"], o["gates"], o["p_value"]) for o in gate["ops"]] == [
        ("gemm<128>(a)", "regression", False, 0.1), ("aten::relu", "improvement", False, 0.1)]
    assert invoke("diff", str(a), str(b), "--fail-on-regression", "30").exit_code == 3  # step +33 %


def test_gate_floor_and_step_mode_on_a_built_regression(six) -> None:
    """``--min-delta`` drops the ops that grew by less (gemm<128>(a) +30 µs, aten::mm +50 µs);
    ``--gate step`` looks at the step time alone."""
    a, b = six
    floor = invoke("diff", str(a), str(b), "--fail-on-regression", "35", "--min-delta", "40")
    assert floor.exit_code == 3
    assert ("1 op(s) grew by over 35% and 40.0 us per step, significant over 6 vs 6 steps (q <= 0.05): "
            "cpu aten::mm (+50.0 us, +40.0%" in floor.stderr)
    assert invoke("diff", str(a), str(b), "--fail-on-regression", "35", "--min-delta", "60").exit_code == 0
    step_only = invoke("diff", str(a), str(b), "--fail-on-regression", "35", "--gate", "step")
    assert step_only.exit_code == 0 and step_only.stderr == ""  # ops grew 40-60%, the step 33%
    step = invoke("diff", str(a), str(b), "--fail-on-regression", "30", "--gate", "step")
    assert step.exit_code == 3 and "step time 900.000 -> 1,200.000 us (+33.3%)" in step.stderr
    assert "op(s)" not in step.stderr
    lone = invoke("diff", str(a), str(b), "--gate", "step")
    assert lone.exit_code == 2 and "need --fail-on-regression" in lone.stderr


def test_gate_ignores_microsecond_noise_on_two_runs_of_one_script() -> None:
    """h100_runs: one script run twice, three steps each. Ops grow by over 50 % per step, a few µs
    in a ~1 ms step (from the raw events): the default floor (1 % of the step) keeps them out; with
    no floor they are reported, not gated (too few steps), either way round."""
    folder = shared_trace("kineto/diff/h100_runs")
    a, b = folder / "a" / "trace.json.gz", folder / "b" / "trace.json.gz"
    want_a, want_b = raw_per_step(a), raw_per_step(b)
    steps = raw_steps(raw_events(a))
    step_ns = sum(e - s for s, e in steps.values()) / len(steps)
    grew = [k for k, wb in want_b.items() if k in want_a and wb[1] > 1.5 * want_a[k][1]]
    assert grew and max(wb[1] - want_a[k][1] for k, wb in want_b.items() if k in want_a) < step_ns / 100
    r = cli("diff", str(a), str(b), "--fail-on-regression", "50")
    assert r.returncode == 0 and "regression" not in r.stderr and "note" not in r.stderr, r.stderr
    for x, y in ((a, b), (b, a)):
        noisy = cli("diff", str(x), str(y), "--fail-on-regression", "50", "--min-delta", "0")
        assert noisy.returncode == 0 and "reported, not gated: 3 vs 3 steps are too few" in noisy.stderr


def test_gate_exit_keeps_every_output(pair, tmp_path: Path) -> None:
    """Exit 3 is a verdict, not a failure: the --html and --trace files it announced exist."""
    a, b = pair
    report, merged = tmp_path / "r.html", tmp_path / "m.json"
    r = cli("diff", str(a), str(b), "--html", str(report), "--trace", str(merged),
            "--fail-on-regression", "30")
    assert r.returncode == 3 and f"wrote {report}" in r.stderr and f"wrote {merged}" in r.stderr
    assert report.read_text().rstrip().endswith("</html>")
    assert len(json.loads(merged.read_text())["traceEvents"]) > len(json.loads(a.read_text())["traceEvents"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json", "m.json", "r.html"]


def test_api_diff_returns_the_comparison_as_dataframes(pair) -> None:
    a, b = pair
    summary, ops = traceaug.diff(a, b, step_a=6, step_b=18, progress=False)
    want_a, want_b = raw_per_step(a, step=6), raw_per_step(b, step=18)
    assert list(ops.columns) == ["rank", "device", "key", "status", "count_a", "count_b",
                                 "delta_count", "total_a_ns", "total_b_ns", "delta_ns", "delta_pct",
                                 "mean_a_ns", "mean_b_ns", "p_value"]
    rows = {(r["device"], r["key"]): r for r in ops.to_dict("records")}
    assert_rows_equal_raw(rows, want_a, want_b)
    assert ops["total_a_ns"].dtype == "float64" and ops["status"].tolist()[0] == "increased"
    assert summary[["side", "step", "steps"]].to_dict("records") == [
        {"side": "a", "step": 6, "steps": 1}, {"side": "b", "step": 18, "steps": 1}]
    assert summary["step_ns"].tolist() == [900_000, 1_200_000]
    assert summary["gpu_busy_ns"].tolist() == [50_000, 80_000]  # gemm<64>(b) runs within gemm<128>(a)
    cli_rows = diff_rows(a, b, "--step-a", "6", "--step-b", "18")[1]
    def plain(v):  # NaN (the API) is null (JSON)
        return None if isinstance(v, float) and v != v else v

    assert {k: {c: plain(v) for c, v in r.items() if c != "rank"} for k, r in rows.items()} == {
        k: {c: r[c] for c in ops.columns if c != "rank"} for k, r in cli_rows.items()}


def test_explain_is_on_the_page_and_single_files_have_no_rank(tmp_path: Path) -> None:
    """``diff --explain --html`` wrote the page without ``--explain`` byte for byte (with ``--format
    json``: no page at all): now the page shows the split (every category of ``--explain --format
    json``, in µs); and a pair of single files was headed "rank None"."""
    folder = shared_trace("kineto/diff/h100_runs")
    a, b = str(folder / "a" / "trace.json.gz"), str(folder / "b" / "trace.json.gz")
    plain, explained = tmp_path / "plain.html", tmp_path / "explained.html"
    r = invoke("diff", a, b, "--html", str(plain))
    assert r.exit_code == 0 and "rank None" not in r.stdout and f"A = {a}\nB = {b}" in r.stdout
    assert invoke("diff", a, b, "--explain", "--html", str(explained)).exit_code == 0
    page = explained.read_text()
    assert page != plain.read_text() and "rank None" not in page + plain.read_text()
    split = json.loads(invoke("diff", a, b, "--explain", "--format", "json").stdout)["rows"]
    as_json = tmp_path / "json.html"  # csv / json print the split alone, but the page is written
    r = invoke("diff", a, b, "--explain", "--format", "json", "--html", str(as_json))
    assert r.exit_code == 0 and json.loads(r.stdout)["rows"] == split and as_json.read_text() == page

    def shown(ns: float) -> str:
        return f"{ns / 1e3:.3f}".rstrip("0").rstrip(".")

    section = page[page.index("<h2>Step time along the critical paths</h2>"):]
    for row in (r for r in split if r["section"] == "category"):
        assert (f"<tr><td>{row['category']}</td><td>{shown(row['a_ns'])}</td><td>{shown(row['b_ns'])}</td>"
                f"<td>{shown(row['delta_ns'])}</td>") in section


def test_inclusive_times_count_nested_ops(tmp_path: Path) -> None:
    """CPU ops are timed by self time (the real pairs' test checks it against the raw events);
    ``--inclusive`` gives their whole duration, nested CPU ops included, as the raw events say."""
    folder = shared_trace("kineto/diff/h100_runs")
    a, b = folder / "a" / "trace.json.gz", folder / "b" / "trace.json.gz"
    _, rows = diff_rows(a, b, "--inclusive")
    assert_rows_equal_raw(rows, raw_per_step(a, inclusive=True), raw_per_step(b, inclusive=True))
    _, own = diff_rows(a, b)
    nested = [k for k in rows if own[k]["total_a_ns"] < rows[k]["total_a_ns"]]
    assert ("cpu", "aten::layer_norm") in nested and all(k[0] == "cpu" for k in nested)
