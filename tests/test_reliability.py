"""Issue 24 through the real command line: stdin's file is never an output, sums never wrap,
odd names / paths / streams / option values get one line, ``-`` means stdout for every output,
messages name what failed, and ``--open`` checks its port before any work."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import kineto_gen
import pytest
from conftest import ROOT, shared_trace

from traceaug.analysis.breakdown import ALL_STEPS, PER_STEP

TRACEAUG = [sys.executable, "-m", "traceaug"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run(args: list, cwd: Path, **kw) -> subprocess.CompletedProcess:
    """``traceaug ARGS`` in a fresh process (real stdin / stdout file descriptors)."""
    if "stdout" not in kw:
        kw["capture_output"] = True
    return subprocess.run([*TRACEAUG, *map(str, args)], cwd=cwd, env=kw.pop("env", ENV),
                          timeout=300, **kw)


def one_error_line(res: subprocess.CompletedProcess, start: str = "traceaug: error: ") -> str:
    err = res.stderr.decode(errors="replace") if isinstance(res.stderr, bytes) else res.stderr
    assert res.returncode == 1, (res.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(start) and len(lines[0]) < 300, lines[0]
    return lines[0]


def valid(d: Path, name: str = "v.json") -> Path:
    return kineto_gen.write(d / name, kineto_gen.trace())


# ----- 24.2: the input overwritten through stdin ----------------------------------------------

@pytest.mark.parametrize("command", ["critical-path", "counters", "patterns"])
def test_the_file_stdin_reads_is_never_an_output(tmp_path: Path, command: str) -> None:
    src = valid(tmp_path)
    before = src.read_bytes()
    os.link(src, tmp_path / "hard.json")
    for out in ("v.json", "hard.json"):
        with open(src, "rb") as stdin:
            res = run([command, "-", out], tmp_path, stdin=stdin)
        line = one_error_line(res)
        assert line.startswith(f"traceaug: error: {out}: is the input (stdin reads it)"), line
        assert src.read_bytes() == before
    with open(src, "rb") as stdin:  # another output from the same stdin is written
        res = run([command, "-", "other.json"], tmp_path, stdin=stdin)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "other.json").read_bytes())["traceEvents"]


# ----- 24.3: sums that would pass int64 -------------------------------------------------------

def overlapping_kernels(path: Path, n: int, dur_us: float) -> Path:
    """``n`` kernels of ``dur_us`` each on one stream, starting 1 µs apart."""
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1000.0 + i,
               "dur": dur_us, "args": {"device": 0, "stream": 7, "correlation": i + 1}}
              for i in range(n)]
    return kineto_gen.write(path, {"traceEvents": events})


def test_sums_past_int64_are_refused_never_wrapped(tmp_path: Path) -> None:
    """6 kernels of 4e15 µs (each in range) add up to 2.4e19 ns: int64 wrapped it to
    5,553,255,926,290,448,384 ns. Every analysis that sums them refuses in one line."""
    big = overlapping_kernels(tmp_path / "six.json", 6, 4e15)
    for command in ("kernels", "breakdown", "report"):
        line = one_error_line(run([command, big.name], tmp_path))
        assert line.startswith("traceaug: error: six.json: ") and "past 2^63" in line, line
    two = overlapping_kernels(tmp_path / "two.json", 2, 4e15)  # 8e18 ns: fits, and exact
    res = run(["kernels", two.name, "--format", "json"], tmp_path)
    assert res.returncode == 0, res.stderr
    row = json.loads(res.stdout)["kernels"][0]
    assert row["total_ns"] == 2 * 4_000_000_000_000_000_000 and row["time_pct"] == 100.0


def test_gaps_near_int64_are_exact(tmp_path: Path) -> None:
    """Two gaps of ~4.5e18 ns: their median was (a + b) / 2 in int64 (negative), the idle
    share 100 * idle in int64 (negative)."""
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": 1,
               "args": {"device": 0, "stream": 7, "correlation": i + 1}}
              for i, ts in enumerate([1.0, 4.5e15, 9.0e15])]
    path = kineto_gen.write(tmp_path / "g.json", {"traceEvents": events})
    res = run(["gaps", path.name, "--format", "json"], tmp_path)
    assert res.returncode == 0, res.stderr
    stream = json.loads(res.stdout)["gaps per stream"][0]
    first, second = (4.5e15 - 2.0) * 1e3, (9.0e15 - 4.5e15 - 1.0) * 1e3
    assert stream["gaps"] == 2 and stream["median_ns"] == pytest.approx((first + second) / 2)
    res = run(["breakdown", path.name, "--format", "json"], tmp_path)
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout)
    assert found[PER_STEP] == []  # no ProfilerStep: the row over the whole trace alone
    row = found[ALL_STEPS][0]
    assert row["idle_pct"] == pytest.approx(100 * (1 - 3e3 / row["window_ns"]))


# ----- 24.13: tracebacks ----------------------------------------------------------------------

def test_diff_trace_with_a_list_pid_on_side_b(tmp_path: Path) -> None:
    good = valid(tmp_path, "good.json")
    t = kineto_gen.trace()
    kernel = next(e for e in t["traceEvents"] if e.get("cat") == "kernel")
    kernel["pid"] = [0]
    b = kineto_gen.write(tmp_path / "b.json", t)
    res = run(["diff", good.name, b.name, "--trace", "m.json"], tmp_path)
    assert res.returncode == 0, res.stderr
    merged = json.loads((tmp_path / "m.json").read_bytes())["traceEvents"]
    moved = [e for e in merged if e.get("pid") == "B: [0]"]
    assert [e["name"] for e in moved if e.get("ph") == "X"] == [kernel["name"]]
    assert {"ph": "M", "name": "process_name", "pid": "B: [0]", "args": {"name": "B: [0]"}} in moved


def test_a_rank_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for rank, name in ((0, b"rank-0.json"), (1, b"rank-\xff.json")):
        t = kineto_gen.trace(distributedInfo={"rank": rank})
        (ranks / os.fsdecode(name)).write_bytes(json.dumps(t).encode())
    strict = {**ENV, "PYTHONIOENCODING": "utf-8"}  # stdout that refuses surrogates
    res = run(["info", "ranks", "--format", "json"], tmp_path, env=strict)
    assert res.returncode == 0, res.stderr
    assert [r["file"] for r in json.loads(res.stdout)["rows"]] == ["ranks/rank-0.json",
                                                           "ranks/rank-\\xff.json"]
    res = run(["info", "ranks"], tmp_path, env=strict)
    assert res.returncode == 0, res.stderr
    assert b" rank-\xff.json " in res.stdout  # the name's own bytes, as ls prints them
    res = run(["patterns", "ranks", "out/", "--format", "json"], tmp_path, env=strict)
    assert res.returncode == 0, res.stderr
    assert sorted(os.listdir(os.fsencode(tmp_path / "out"))) == [b"rank-0.json", b"rank-\xff.json"]


WRITERS = {"counters": ["counters", "v.json", "{out}"],
           "patterns": ["patterns", "v.json", "{out}"],
           "critical-path": ["critical-path", "v.json", "{out}"],
           "convert": ["convert", "{nsys}", "{out}"],
           "report": ["report", "v.json", "--html", "{out}"],
           "diff --html": ["diff", "v.json", "v.json", "--html", "{out}"],
           "diff --trace": ["diff", "v.json", "v.json", "--trace", "{out}"]}


def writer(name: str, out: str, nsys: Path | None = None) -> list[str]:
    return [a.format(out=out, nsys=nsys) for a in WRITERS[name]]


def test_output_paths_too_long_fail_first_in_one_line(tmp_path: Path) -> None:
    valid(tmp_path)
    nsys = shared_trace("nsys/a100_saxpy_mpi_rank0.sqlite")
    long_path = "x/" + "a/" * 2100 + "o.json"  # past PATH_MAX (4096)
    long_name = "b" * 250 + ".json"  # under NAME_MAX, but not with the temporary file's 14 more
    for name in WRITERS:
        for out, problem in ((long_path, "path too long"), (long_name, "file name too long")):
            res = run(writer(name, out, nsys), tmp_path)
            line = one_error_line(res)
            assert problem in line and out[:40] in line, (name, line)
            assert res.stdout == b"", name  # refused before any work: nothing printed
    assert sorted(os.listdir(tmp_path)) == ["v.json"]


ALL_COMMANDS = {"info": ["info", "-"], "query": ["query", "-", "SELECT 1"],
                "kernels": ["kernels", "-"], "gaps": ["gaps", "-"],
                "breakdown": ["breakdown", "-"], "launches": ["launches", "-"],
                "report": ["report", "-"], "diff": ["diff", "-", "v.json"],
                "counters": ["counters", "-", "o.json"], "patterns": ["patterns", "-", "o.json"],
                "critical-path": ["critical-path", "-", "o.json"], "open": ["open", "-"],
                "convert": ["convert", "-", "o.json"], "summary": ["summary", "-"]}


def test_a_closed_stdin_is_one_line_for_every_command(tmp_path: Path) -> None:
    valid(tmp_path)
    for name, args in ALL_COMMANDS.items():
        res = run(args, tmp_path, stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(0))
        assert one_error_line(res) == "traceaug: error: stdin: is closed, nothing to read", name
    assert sorted(os.listdir(tmp_path)) == ["v.json"]


@contextlib.contextmanager
def tmpfs(d: Path, size: str):
    """A tmpfs of ``size`` at ``d`` (root only): a real disk that fills up."""
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path):
    with tmpfs(tmp_path / "small", "1m") as d:
        yield d


def test_a_full_tmpdir_while_spooling_is_one_line(tmp_path: Path, small_disk: Path) -> None:
    big = kineto_gen.write_large(tmp_path / "big.json", 3000)  # 2.8 MB: more than the disk
    env = {**ENV, "TMPDIR": str(small_disk)}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for how in ("stdin", "fifo"):
        if how == "stdin":
            with open(big, "rb") as stdin:
                res = run(["info", "-"], tmp_path, env=env, stdin=stdin)
        else:
            feeder = subprocess.Popen(["sh", "-c", f"cat {big} > {fifo}"])
            res = run(["info", str(fifo)], tmp_path, env=env)
            feeder.kill()
            feeder.wait()
        name = "stdin" if how == "stdin" else str(fifo)
        line = one_error_line(res)
        assert line.startswith(f"traceaug: error: {name}: cannot spool it to {small_disk}"), line
        assert "No space left on device" in line
    assert os.listdir(small_disk) == []  # the partial copy removed


def test_a_spool_stops_before_its_disk_is_full(tmp_path: Path) -> None:
    """A stream that would fit in $TMPDIR but leave it (nearly) full is refused before the disk fills
    (issue 39 item 13: free space is checked as the spool writes, 5 % kept for everything else)."""
    big = kineto_gen.write_large(tmp_path / "big.json", 3000)
    size_kb = big.stat().st_size // 1024 + 100  # room for the copy, not for 5 % more
    with tmpfs(tmp_path / "small", f"{size_kb}k") as disk:
        env = {**ENV, "TMPDIR": str(disk)}
        with open(big, "rb") as stdin:
            res = run(["info", "-"], tmp_path, env=env, stdin=stdin)
        line = one_error_line(res)
        assert line.startswith(f"traceaug: error: stdin: cannot spool it to {disk}"), line
        assert line.endswith("(No space left on device); set TMPDIR to a larger disk"), line
        assert os.listdir(disk) == []
        with open(valid(tmp_path), "rb") as stdin:  # a small one still fits
            res = run(["info", "-"], tmp_path, env=env, stdin=stdin)
        assert res.returncode == 0, res.stderr


def test_a_full_tmpdir_under_stdout_is_blamed_on_tmpdir(tmp_path: Path, small_disk: Path) -> None:
    """``counters X -`` holds stdout's output in $TMPDIR until the run commits: a full $TMPDIR is named,
    not stdout (issue 39 item 18: "stdout: No space left on device"); nothing printed, nothing left."""
    big = kineto_gen.write_large(tmp_path / "big.json", 3000)  # its output: more than the disk
    res = run(["counters", big, "-"], tmp_path, env={**ENV, "TMPDIR": str(small_disk)})
    assert one_error_line(res) == (f"traceaug: error: {small_disk}: cannot hold stdout's output there "
                                   "until the run ends (No space left on device); set TMPDIR to a "
                                   "larger disk")
    assert res.stdout == b""
    assert os.listdir(small_disk) == []


# ----- 24.14: option values -------------------------------------------------------------------

HUGE = str(2**70)
BAD_OPTIONS = [["kernels", "v.json", "--top", HUGE], ["kernels", "v.json", "--top", "-1"],
               ["gaps", "v.json", "--top", HUGE], ["launches", "v.json", "--top", HUGE],
               ["report", "v.json", "--top", HUGE], ["diff", "v.json", "v.json", "--top", HUGE],
               ["critical-path", "v.json", "--summary-only", "--top", HUGE],
               ["patterns", "v.json", "--summary-only", "--min-len", HUGE],
               ["patterns", "v.json", "--summary-only", "--top-k", HUGE],
               ["summary", "v.json", "--gpus", HUGE], ["summary", "v.json", "--iters", HUGE],
               ["gaps", "v.json", "--hist-min", "1e308", "--hist-max", "-1e308"],
               ["gaps", "v.json", "--hist-min", "10", "--hist-max", "5"],
               ["gaps", "v.json", "--hist-min", "nan"], ["gaps", "v.json", "--hist-max", "inf"],
               ["critical-path", "v.json", "--summary-only", "--max-gap-us", "nan"],
               ["critical-path", "v.json", "--summary-only", "--max-gap-us", "inf"],
               ["diff", "v.json", "v.json", "--threshold", "nan"],
               ["diff", "v.json", "v.json", "--fail-on-regression", "nan"],
               ["breakdown", "v.json", "--kernel-wait-us", "nan"],
               ["launches", "v.json", "--runtime-cutoff", "inf"],
               ["launches", "v.json", "--delay-cutoff", "-inf"]]


def test_option_values_out_of_range_are_usage_errors(tmp_path: Path) -> None:
    valid(tmp_path)
    for args in BAD_OPTIONS:
        res = run(args, tmp_path)
        err = res.stderr.decode()
        assert res.returncode == 2 and "Traceback" not in err, (args, err)
        errors = [line for line in err.splitlines() if line.startswith("Error:")]
        named = [a for a in args if a.startswith("--") and a in errors[0]]
        assert len(errors) == 1 and named, (args, err)  # one line naming the option refused
    res = run(["summary", "v.json", "--gpus", str(2**62), "--iters", "2"], tmp_path)
    assert "--iters × --gpus is 9,223,372,036,854,775,808, more than 2^62" in one_error_line(res)


def test_a_histogram_far_out_still_has_its_bins(tmp_path: Path) -> None:
    valid(tmp_path)
    res = run(["gaps", "v.json", "--format", "json", "--hist-min", "9e15", "--bins", "1000"],
              tmp_path)
    assert res.returncode == 0, res.stderr
    bins = json.loads(res.stdout)["gap histogram (µs, log-spaced bins, gaps > 0 on every stream)"]
    assert len(bins) == 1000 and bins[0]["lo_us"] == 9e15 and sum(b["count"] for b in bins) == 0


# ----- 24.16: "-" as an output ----------------------------------------------------------------

def test_dash_is_stdout_for_every_output(tmp_path: Path) -> None:
    valid(tmp_path)
    nsys = shared_trace("nsys/a100_saxpy_mpi_rank0.sqlite")
    for name in WRITERS:
        res = run(writer(name, "-", nsys), tmp_path)
        assert res.returncode == 0, (name, res.stderr)
        out = res.stdout
        if name in ("report", "diff --html"):
            assert out.startswith(b"<!doctype html>") and out.rstrip().endswith(b"</html>"), name
        else:  # a whole trace; the command's own text went to stderr
            assert json.loads(out)["traceEvents"], name
        assert "wrote stdout" in res.stderr.decode(), (name, res.stderr)
        assert sorted(os.listdir(tmp_path)) == ["v.json"], name  # no file named "-"
    both = run(["diff", "v.json", "v.json", "--html", "-", "--trace", "-"], tmp_path)
    assert "two outputs cannot both go to stdout" in one_error_line(both)
    assert both.stdout == b""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    valid(ranks, "rank-0.json")
    res = run(["counters", "ranks", "-"], tmp_path)
    assert "stdout cannot hold it" in one_error_line(res)
    res = run(["convert", nsys, "-", "--open", "--no-browser"], tmp_path)
    assert res.returncode == 2 and b"not stdout" in res.stderr


# ----- 24.19: messages that name the right thing ----------------------------------------------

def test_a_full_stdout_is_named_stdout(tmp_path: Path) -> None:
    valid(tmp_path)
    for args in (["info", "v.json"], ["kernels", "v.json"], ["query", "v.json", "SELECT 1"]):
        with open("/dev/full", "wb") as full:
            res = run(args, tmp_path, stdout=full, stderr=subprocess.PIPE)
        assert one_error_line(res) == "traceaug: error: stdout: No space left on device", args


def test_a_full_disk_names_the_output_it_hit(tmp_path: Path) -> None:
    """``--html`` (well under 1 MB) fits on the 4 MB disk, ``--trace`` (5.5 MB) then does not: the
    message names the trace, not the page."""
    big = kineto_gen.write_large(tmp_path / "big.json", 3000)
    with tmpfs(tmp_path / "disk", "4m") as disk:
        html, merged = disk / "r.html", disk / "m.json"
        res = run(["diff", big, big, "--html", html, "--trace", merged], tmp_path)
        line = one_error_line(res)
        assert line == f"traceaug: error: {merged}: No space left on device", line
        assert os.listdir(disk) == []


def test_perfetto_errors_without_its_traceback(tmp_path: Path) -> None:
    valid(tmp_path)
    res = run(["query", "v.json", "SELECT nonsense FROM nowhere"], tmp_path)
    assert one_error_line(res) == ("traceaug: error: v.json: SQL error: no such table: nowhere "
                                   "(line 1 col 1)")
    (tmp_path / "q.sql").write_text("SELECT 1;\nSELECT\n  foo(1)")
    res = run(["query", "v.json", "-f", "q.sql"], tmp_path)
    assert one_error_line(res) == ("traceaug: error: v.json: SQL error: no such function: foo "
                                   "(line 3 col 3)")
    overlapping_kernels(tmp_path / "six.json", 6, 4e15)  # summary's SUM(dur) overflows in SQL
    res = run(["summary", "six.json"], tmp_path)
    assert one_error_line(res) == ("traceaug: error: six.json: SQL error: integer overflow "
                                   "(line 1 col 1)")


def test_convert_of_a_directory_says_so(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    line = one_error_line(run(["convert", "adir", "o.json"], tmp_path))
    assert line == "traceaug: error: adir: is a directory, expected an nsys SQLite export"


# ----- 24.20: --open's port, open's exit code -------------------------------------------------

def test_open_port_busy_or_reserved_is_refused_before_any_work(tmp_path: Path) -> None:
    valid(tmp_path)
    nsys = shared_trace("nsys/a100_saxpy_mpi_rank0.sqlite")
    with contextlib.closing(socket.socket()) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        for port, problem in ((busy, "Address already in use"), (9001, "native trace processor")):
            for args in (["counters", "v.json", "o.json"], ["patterns", "v.json", "o.json"],
                         ["critical-path", "v.json", "o.json"],
                         ["diff", "v.json", "v.json", "--trace", "o.json"],
                         ["convert", nsys, "o.json"]):
                res = run([*args, "--open", "--no-browser", "--port", port], tmp_path)
                line = one_error_line(res)
                assert line.startswith(f"traceaug: error: --port {port}: ") and problem in line
                assert res.stdout == b"" and not (tmp_path / "o.json").exists(), args
            res = run(["open", "v.json", "--no-browser", "--port", port], tmp_path)
            assert problem in one_error_line(res)


INT64_MAX = 2**63 - 1


def test_a_stream_past_int64_is_one_id_for_every_command(tmp_path: Path) -> None:
    """A kernel whose ``stream`` is 1e308 and one whose ``stream`` is 2^64 (``device`` 1e308):
    kernels, gaps, breakdown and launches read them, with no numpy warning, as the one stream
    id info and counters already give them: Kineto's value held at int64's largest."""
    events = kineto_gen.events(3)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    kernels[0]["args"]["stream"] = "__BIG_FLOAT__"
    kernels[1]["args"]["stream"] = "__BIG_INT__"
    kernels[2]["args"]["device"] = "__BIG_FLOAT__"
    text = json.dumps(kineto_gen.trace(events)).replace('"__BIG_FLOAT__"', "1e308")
    trace = tmp_path / "t.json"
    trace.write_text(text.replace('"__BIG_INT__"', str(2**64)))
    # the oracle, from the raw JSON: (device, stream) of every GPU op, held at int64's largest
    raw = json.loads(trace.read_text())["traceEvents"]
    want: dict[tuple[int, int], int] = {}
    for e in raw:
        if e.get("cat") in ("kernel", "gpu_memcpy"):
            key = tuple(min(int(e["args"][k]), INT64_MAX) for k in ("device", "stream"))
            want[key] = want.get(key, 0) + 1
    assert want == {(0, 7): 3, (0, INT64_MAX): 2, (INT64_MAX, 7): 1}
    for command in ("kernels", "gaps", "breakdown", "launches"):
        res = run([command, "--format", "json", trace], tmp_path)
        assert res.returncode == 0 and res.stderr == b"", (command, res.stderr.decode())
        if command == "gaps":
            rows = json.loads(res.stdout)["gaps per stream"]
            assert {(r["device"], r["stream"]): r["ops"] for r in rows} == want


def test_critical_path_job_writes_over_an_old_out(tmp_path: Path) -> None:
    """``critical-path --job JOB OUT`` with an OUT left by an earlier run: OUT is one file
    (the merged job trace), replaced; it was taken for a rank directory and refused ("IN is
    a directory, so OUT must be one too"). The new OUT holds every kernel of both ranks."""
    job = tmp_path / "job"
    job.mkdir()
    raw = [kineto_gen.rank_trace(rank) for rank in (0, 1)]
    for rank, t in enumerate(raw):
        kineto_gen.write(job / f"rank-{rank}.json", t)
    (tmp_path / "out.json").write_bytes(b"OLD\n")
    res = run(["critical-path", "--job", "--summary-only", "job", "out.json"], tmp_path)
    assert res.returncode == 0, res.stderr
    res = run(["critical-path", "--job", "job", "out.json"], tmp_path)
    assert res.returncode == 0, res.stderr
    events = json.loads((tmp_path / "out.json").read_bytes())["traceEvents"]
    kernels = sum(e.get("cat") == "kernel" for e in events)
    assert kernels == sum(e.get("cat") == "kernel" for t in raw for e in t["traceEvents"]) == 12


WIDE = (2**63, 2**64 - 1, 2**64 + 5, -(2**63) - 1, 10**30, 7)  # kernel streams, as written


def wide_trace(d: Path, exponent: bool = False) -> tuple[Path, list[int]]:
    """A trace whose kernels' streams are ``WIDE`` (one kernel named with such digits, one
    copy's bandwidth a fraction of 19 digits: text, not integers), and what int64 holds of
    each stream: the value held at int64's bounds, from the raw numbers. ``exponent``: the
    first kernel's ts written with one (its chunk rebased one timestamp at a time)."""
    events = kineto_gen.events(len(WIDE))
    kernels = [e for e in events if e.get("cat") == "kernel"]
    for i, k in enumerate(kernels):
        k["args"]["stream"] = f"__WIDE{i}__"
    kernels[0]["name"] = f"gemm {2**64 + 5}"
    copy = next(e for e in events if e.get("cat") == "gpu_memcpy")
    copy["args"]["memory bandwidth (GB/s)"] = "__FRACTION__"
    text = json.dumps(kineto_gen.trace(events)).replace('"__FRACTION__"', "0.0011061946902654867")
    for i, v in enumerate(WIDE):
        text = text.replace(f'"__WIDE{i}__"', str(v))
    if exponent:
        ts = kernels[0]["ts"]
        text = text.replace(f'"ts": {ts}', f'"ts": {ts / 1e15!r}e15', 1)
        assert json.loads(text)["traceEvents"][5]["ts"] == ts
    path = d / "wide.json"
    path.write_text(text)
    raw = [e["args"]["stream"] for e in json.loads(text)["traceEvents"] if e.get("cat") == "kernel"]
    assert raw == list(WIDE)  # Python's json reads them exactly
    return path, [min(max(v, -(2**63)), INT64_MAX) for v in raw]


def test_an_integer_past_int64_is_one_value_in_query_too(tmp_path: Path) -> None:
    """A kernel ``stream`` past int64 (2^63, 2^64 - 1, 2^64 + 5, -2^63 - 1, 10^30): `query`
    (a full load, which Perfetto parses itself: it wrapped 2^64 + 5 to 5) reads int64's
    largest / smallest value, as gaps does (which read 2^63 and 2^64 - 1 wrapped too, as
    -2^63 and -1); a name with those digits and a long fraction stay as written."""
    path, want = wide_trace(tmp_path)
    sql = ("SELECT name, EXTRACT_ARG(arg_set_id, 'args.stream') AS stream FROM slice "
           "WHERE category = 'kernel' ORDER BY ts")
    res = run(["query", "--format", "json", path, sql], tmp_path)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert [r["stream"] for r in rows] == want
    assert rows[0]["name"] == f"gemm {2**64 + 5}"
    sql = "SELECT real_value FROM args WHERE key = 'args.memory bandwidth (GB/s)' LIMIT 1"
    res = run(["query", "--format", "json", path, sql], tmp_path)
    assert json.loads(res.stdout)["rows"][0]["real_value"] == 0.0011061946902654867
    res = run(["gaps", "--format", "json", path], tmp_path)
    assert res.returncode == 0, res.stderr
    per_stream = {(r["device"], r["stream"]): r["ops"] for r in json.loads(res.stdout)["gaps per stream"]}
    tally: dict[tuple[int, int], int] = {(0, 7): len(WIDE)}  # every copy on stream 7
    for s in want:
        tally[(0, s)] = tally.get((0, s), 0) + 1
    assert per_stream == tally


@pytest.mark.parametrize("kind", ["full", "analysis", "gpu_steps"])
@pytest.mark.parametrize("workers,exponent", [(0, False), (2, False), (0, True)])
def test_the_engine_reads_no_integer_past_int64(tmp_path: Path, kind: str, workers: int,
                                                exponent: bool) -> None:
    """What pass 2 gives the engine, from pass 1 in this process or in worker processes, a
    chunk rebased at once or one timestamp at a time: each wide stream held at int64's
    bounds, every other byte of meaning unchanged."""
    from traceaug.read import normalize

    path, want = wide_trace(tmp_path, exponent)
    p = normalize.plan(path, kind=kind, workers=workers)
    fed = json.loads(b"".join(normalize.engine_stream(p)))["traceEvents"]
    assert [e["args"]["stream"] for e in fed if e.get("cat") == "kernel"] == want
    assert [e["name"] for e in fed if e.get("cat") == "kernel"][0] == f"gemm {2**64 + 5}"
