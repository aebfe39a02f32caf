"""What the terminal shows (issue 34, item 6): ``critical-path --job`` a summary honouring
``--top`` and ``--summary-only`` with a ``wrote`` line, its every segment in csv / json; tables
within 160 columns unless ``--wide``, names cut only there; ``info``'s step numbers."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import kineto_gen
from click.testing import CliRunner
from conftest import shared_trace
from rawjson import load_raw

from traceaug.cli import main

JOB = "kineto/jobs/dlrm_v100_8ranks"
A100 = "kineto/a100_rank0_of16_6streams.json.gz"
WIDTH = 160


def _cli(*args: str):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def test_job_critical_path_prints_a_summary_and_says_what_it_wrote(tmp_path: Path) -> None:
    """The DLRM job's path has 1,412 timed segments (1,434 lines were printed): the terminal
    shows the ``--top`` longest, the same with ``--summary-only`` (which writes nothing), and
    says ``wrote OUT``; json holds every segment."""
    job, out = shared_trace(JOB), tmp_path / "path.json"
    printed = _cli("critical-path", job, "--job", "--summary-only", "--format", "json").stdout
    full = json.loads(printed)["rows"][0]
    seg = full["segments"]
    timed = sorted((w, ts) for w, ts, c in zip(seg["weight_ns"], seg["ts_ns"], seg["category"])
                   if c != "idle")
    timed.sort(key=lambda x: -x[0])  # the longest first; ties in time order (stable)
    r = _cli("critical-path", job, out, "--job", "--top", "5")
    lines = r.stdout.splitlines()
    assert len(lines) < 40
    assert max(map(len, lines)) <= WIDTH
    head = next(i for i, line in enumerate(lines) if line.startswith("top 5 of "))
    assert lines[head].startswith(f"top 5 of {len(timed):,} segments by time")
    rows = [line.split() for line in lines[head + 2:head + 7]]
    assert [float(x[2]) for x in rows] == [w / 1e3 for w, _ in timed[:5]]
    assert [float(x[1]) for x in rows] == [(ts - full["start_ns"]) / 1e3 for _, ts in timed[:5]]
    assert lines[head + 7:] == []  # the last table
    events = json.loads(out.read_text())["traceEvents"]
    lanes = [e for e in events if str(e.get("cat", "")).startswith("critical_path")]
    assert lanes
    wrote = r.stderr.strip().splitlines()
    assert len(wrote) == 1 and re.fullmatch(
        rf"wrote {re.escape(str(out))} \(\d+ events added by critical-path --job\)", wrote[0])
    # --summary-only: the same summary, nothing written, nothing said
    none = tmp_path / "none.json"
    s = _cli("critical-path", job, none, "--job", "--top", "5", "--summary-only")
    assert s.stdout == r.stdout and s.stderr == "" and not none.exists()
    two = _cli("critical-path", job, "--job", "--top", "2", "--summary-only").stdout.splitlines()
    head = next(i for i, line in enumerate(two) if line.startswith("top 2 of "))
    assert [float(x.split()[2]) for x in two[head + 2:]] == [w / 1e3 for w, _ in timed[:2]]
    # csv: every segment, its event name whole
    rows = list(csv.DictReader(io.StringIO(
        _cli("critical-path", job, "--job", "--summary-only", "--format", "csv").stdout)))
    segs = [x for x in rows if x["section"] == "segment"]
    assert len(segs) == len(seg["rank"]) and [x["event"] for x in segs] == \
        ["" if e is None else e for e in seg["event"]]


def _widths(text: str) -> list[int]:
    return [len(line) for line in text.splitlines()]


def test_tables_fit_160_columns_unless_wide() -> None:
    """``patterns`` (282 columns) and ``report`` (236) on the A100 trace fit 160 columns, every
    column kept (a table too wide for its numbers printed in blocks); names cut with "…" in the
    terminal only; ``--wide`` prints them whole, as csv does."""
    a100 = shared_trace(A100)
    table = _cli("patterns", a100, "--summary-only").stdout
    assert max(_widths(table)) <= WIDTH
    wide = _cli("patterns", a100, "--summary-only", "--wide").stdout
    assert max(_widths(wide)) > WIDTH
    first = json.loads(_cli("patterns", a100, "--summary-only", "--format", "json").stdout)[
        "patterns"][0]  # P1, its names whole (json: csv's field of 134 kB trips Python's csv limit)
    cut = table.splitlines()[3]  # P1's row
    assert first["operators"] not in cut and first["operators"][:12] in cut and "…" in cut
    line = next(x for x in wide.splitlines() if x.lstrip().startswith("P1 "))
    assert first["operators"] in line and first["kernel_ids"] in line

    report = _cli("report", a100).stdout
    assert max(_widths(report)) <= WIDTH
    sections = _cli("report", a100, "--format", "csv").stdout.split("\n# ")
    temporal = next(s for s in sections if s.startswith("temporal breakdown"))
    names = temporal.splitlines()[1].split(",")
    shown = {n for line in report.splitlines() for n in line.split()}
    assert {n.replace("_ns", "_us") for n in names if n != "window_start_ns"} <= shown
    assert max(_widths(_cli("report", a100, "--wide").stdout)) > WIDTH


def _step_numbers(path: Path) -> list[int]:
    """The ProfilerStep numbers in the raw JSON."""
    found = (re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name")))
             for e in load_raw(path)["traceEvents"] if e.get("ph") == "X")
    return sorted({int(m.group(1)) for m in found if m})


def test_info_lists_the_step_numbers(tmp_path: Path) -> None:
    """``--step`` needs the numbers: the A100 trace's 550 to 554, a trace's 5 to 12 and 20 as
    runs; a job's per rank."""
    a100 = shared_trace(A100)
    numbers = _step_numbers(a100)
    assert numbers == list(range(numbers[0], numbers[-1] + 1)) and len(numbers) == 5
    lines = _cli("info", a100).stdout.splitlines()
    assert f"steps           {numbers[0]}-{numbers[-1]}" in lines
    gap = kineto_gen.write(tmp_path / "gap.json", kineto_gen.trace(
        [*kineto_gen.METADATA, *(e for i in [*range(5, 13), 20] for e in kineto_gen.step(i))]))
    assert _step_numbers(gap) == [*range(5, 13), 20]
    assert json.loads(_cli("info", gap, "--format", "json").stdout)["steps"] == "5-12, 20"
    job = shared_trace(JOB)
    rows = _cli("info", job).stdout.splitlines()
    at = rows[0].split().index("steps")
    expected = [_step_numbers(f) for f in sorted(job.iterdir())]
    assert [[int(r.split()[at])] for r in rows[1:9]] == expected
