"""The generated bad-input corpus (tests/bad_inputs.py) through every command that reads a trace.

Each case must end in a non-zero exit with one line under 300 characters naming the file,
or in a correct result; never a traceback, never an output or temporary file left behind,
and the input unchanged. To stay fast (in-process, ~0.4 s a run) each case goes through one
command in turn; the structural cases, where the commands used to disagree, go through every
command and must get one verdict. The job commands (collectives, stragglers, merge,
critical-path --job, whatif JOB, diff --explain of two jobs) read a directory of ranks: the
case is rank 0 of a job whose rank 1 is good (an all-reduce per step), and a case refused is
named once by its file (the job's closing line after it).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zlib
from pathlib import Path

import bad_inputs
import kineto_gen
import pytest
from click.testing import CliRunner
from conftest import S3, declared_args, trace_commands, url_job_args, url_job_commands, writes_a_copy

from traceaug.cli import main

CASES = bad_inputs.cases()
NAMES = sorted(CASES)
STEPS = 3  # kineto_gen.events(): the answer a run that succeeds must give


def file_for(tmp_path: Path, name: str) -> Path:
    data = CASES[name]
    gz = data[:2] == b"\x1f\x8b" or name.startswith("gz") or "_gz" in name
    path = tmp_path / (name.replace("/", "_").replace(" ", "_") + (".json.gz" if gz else ".json"))
    path.write_bytes(data)
    return path


KERNEL_SQL = "SELECT COUNT(*) AS kernels FROM slice WHERE category = 'kernel'"
NEGATIVE_TID = re.compile(rb'("tid"\s*:\s*)-(\d+)')
JOB_KINDS = ("collectives", "stragglers", "merge", "critical-path --job", "whatif JOB",
             "diff --explain")  # the case as rank 0 of a job (job_of)
# Every command that reads a trace, from the CLI's declarations (a new one is here without an edit),
# the job commands as rank 0 of a job, less what cannot take a case:
NOT_A_CASE = {"open": "serves TRACE's bytes unread to the UI until Ctrl-C (the UI judges them); "
                      "a directory is merged first: merge's cases"}
KINDS = (*(n for n in trace_commands() if n not in NOT_A_CASE and n not in JOB_KINDS), *JOB_KINDS)
# The rewriters: OUT keeps every input byte
WRITERS = tuple(k for k in KINDS if k not in JOB_KINDS and writes_a_copy(k))
# What a command line needs beyond its declaration: query an SQL text, report a page to write.
EXTRA = {"query": lambda out: [KERNEL_SQL], "report": lambda out: ["--html", str(out)]}


def command(kind: str, path: Path, out: Path) -> list[str]:
    """The command line that runs ``kind`` on ``path`` (``out``: the file it may write)."""
    if kind in JOB_KINDS:
        return job_command(kind, path, out)
    return [*declared_args(kind, str(path), lambda p: str(out)), *EXTRA.get(kind, lambda out: [])(out)]


# The kernel count each command's JSON reports (the others report none).
KERNELS = {"info": lambda data: data["kernels"], "query": lambda data: data["rows"][0]["kernels"],
           "kernels": lambda data: sum(r["count"] for r in data["kernels"] if r["type"] != "memory"),
           "summary": lambda data: data["rows"][0]["kernel"]["instances"]}


def kernels_of(kind: str, stdout: str) -> int | None:
    """The kernel count a command's JSON reports (None: it reports none)."""
    return KERNELS[kind](json.loads(stdout)) if kind in KERNELS else None


def check_run(kind: str, path: Path, before: bytes) -> tuple[int, str]:
    """Run one command on ``path``; assert the corpus rules; return (exit code, stdout)."""
    out = path.parent / ("out.html" if kind == "report" else "out.json")
    listing = set(os.listdir(path.parent))
    res = CliRunner().invoke(main, command(kind, path, out))
    err = res.stderr
    assert "Traceback" not in err + res.stdout, err
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Warning" not in err, err  # numpy RuntimeWarnings and the like
    assert path.read_bytes() == before  # input unchanged
    if res.exit_code != 0:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert len(lines[0]) < 300, lines[0]
        assert lines[0].startswith(f"traceaug: error: {path}"), lines[0]
        assert set(os.listdir(path.parent)) == listing  # no output, no temporary file
    else:
        made = set(os.listdir(path.parent)) - listing
        assert made == ({out.name} if str(out) in command(kind, path, out) else set()), made
        if kind in WRITERS:  # every original byte kept (a negative tid as its unsigned
            written = out.read_bytes()  # 32-bit value: the UI folds negative ones), still JSON
            raw = gzip.decompress(before) if before[:2] == b"\x1f\x8b" else before
            raw = NEGATIVE_TID.sub(lambda m: m[1] + b"%d" % (-int(m[2]) % 2**32), raw)
            array = raw.lstrip().startswith(b"[")
            tail = raw[raw.index(b"[", 0 if array else raw.index(b"traceEvents")) + 1:]
            assert tail in written
            json.loads(written)
        if out.exists():
            out.unlink()
    return res.exit_code, res.stdout


# Where a command's verdict differs from the rest, by design: counters and critical-path place
# their events by durations and refuse a trace with none; counters sums copies' bytes and
# refuses a size that is text (test_true_messages has the lines).
NEEDS_DURATIONS = {"every_dur_negative": ("counters", "critical-path"),
                   "memcpy.args.bytes=lots": ("counters",)}
REFUSES_JSON = ("convert",)  # reads nsys exports (SQLite) only: every case is refused, in one line


def declared(name: str, kind: str) -> int | None:
    """The case's verdict for ``kind``: its kernel count, or None for refused."""
    if kind in NEEDS_DURATIONS.get(name, ()) or kind in REFUSES_JSON:
        return None
    if kind in JOB_KINDS and not 0 <= _recorded_rank(CASES[name]) < 2:
        return None  # rank 0 of a 2-rank job (job_of) recording a rank outside that world
    return bad_inputs.expected_kernels(CASES[name])


def _recorded_rank(data: bytes) -> int:
    """The rank the case's distributedInfo records (0, rank-0.json's, when it records none)."""
    try:
        info = bad_inputs._document(data).get("distributedInfo")
        rank = info.get("rank")
    except (ValueError, UnicodeError, RecursionError, OSError, EOFError, AttributeError,
            zlib.error):
        return 0
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else 0


def job_of(path: Path) -> Path:
    """The job beside ``path`` (made once): a copy of the case as its rank 0 (named
    ``rank-0.json[.gz]``: a rank by its name where its bytes say none), and a good rank 1
    with an all-reduce in each of its 3 steps."""
    job = path.parent / "job"
    if not job.is_dir():
        job.mkdir()
        shutil.copyfile(path, job / ("rank-0.json.gz" if path.name.endswith(".gz") else "rank-0.json"))
        kineto_gen.write(job / "rank-1.json", kineto_gen.rank_trace(1))
    return job


def good_job(where: Path) -> Path:
    """A job of two good ranks in ``where`` (made once): side B of ``diff --explain``."""
    job = where / "good_job"
    if not job.is_dir():
        job.mkdir()
        for rank in (0, 1):
            kineto_gen.write(job / f"rank-{rank}.json", kineto_gen.rank_trace(rank))
    return job


def job_command(kind: str, job: Path, out: Path, other: Path | None = None) -> list[str]:
    """The command line of job command ``kind`` on ``job`` (``out``: the file it may write;
    ``other``: diff's side B, else ``job`` again)."""
    other = job if other is None else other
    return {"merge": ["merge", str(job), str(out)],
            "critical-path --job": ["critical-path", "--job", "--format", "json", str(job),
                                    str(out)],
            "whatif JOB": ["whatif", "--no-stragglers", "--format", "json", str(job)],
            "diff --explain": ["diff", "--explain", "--format", "json", str(job), str(other)],
            }.get(kind, [kind, "--format", "json", str(job)])


def _events_of(data: bytes) -> list:
    doc = bad_inputs._document(data)
    return doc if isinstance(doc, list) else doc["traceEvents"]


def raw_job_steps(*ranks: bytes) -> dict[int, int]:
    """Each ProfilerStep#k of a job's ranks (their raw bytes) as the job's: the first rank's
    start to the last rank's end, ns (one clock: the case's rank 0 has no collective to
    align by, a good job's ranks start their steps together)."""
    spans: dict[int, list[int]] = {}
    for data in ranks:
        for e in _events_of(data):
            name = e.get("name")
            if e.get("ph") == "X" and isinstance(name, str) and name.startswith("ProfilerStep#"):
                start, end = round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)
                k = int(name.removeprefix("ProfilerStep#"))
                spans[k] = [min(spans.get(k, [start])[0], start), max(spans.get(k, [0, end])[1], end)]
    return {k: end - start for k, (start, end) in sorted(spans.items())}


def raw_kernel_events(data: bytes) -> int:
    """The complete kernel events of a case's bytes (each one kept by merge, which copies
    every event of every rank)."""
    return sum(e.get("ph") == "X" and e.get("cat") == "kernel" for e in _events_of(data))


def check_job_run(kind: str, job: Path, want: int | None) -> None:
    """Run a job command on ``job`` (its rank 0 a corpus case, ``want`` that case's verdict):
    refused, the case's file named once by its problem (and the job's closing line); or the
    good rank's 3 all-reduces reported; merge's and critical-path --job's output holding
    every kernel of both ranks; each step's job time (from the raw ProfilerSteps) as whatif's
    measured time, as the sum of critical-path --job's segments and of diff --explain's
    categories (B a good job)."""
    (case,) = job.glob("rank-0.*")
    out = job.parent / "out.json"
    args = job_command(kind, job, out, good_job(job.parent))
    before = {p.name: p.read_bytes() for p in job.iterdir()}
    listing = set(os.listdir(job.parent))
    res = CliRunner().invoke(main, args)
    err = res.stderr
    assert "Traceback" not in err + res.stdout, err
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Warning" not in err, err
    assert {p.name: p.read_bytes() for p in job.iterdir()} == before  # input unchanged
    assert res.exit_code == (1 if want is None else 0), (kind, res.exit_code, want, err)
    if want is None:
        lines = err.strip().splitlines()
        named = [line for line in lines if line.startswith(
            (f"traceaug: error: {case}: ", f"traceaug: rank 0 failed: {case}: "))]
        assert len(named) == 1 and len(lines) <= 2, err
        assert lines[-1].startswith("traceaug: error: ") and all(len(x) < 300 for x in lines), err
        assert set(os.listdir(job.parent)) == listing and res.stdout == ""  # nothing written
        return
    steps = raw_job_steps(*before.values())
    if kind == "critical-path --job":
        rows = json.loads(res.stdout)["rows"]
        assert {r["step"]: r["step_ns"] for r in rows} == steps, (rows, steps)
        assert all(sum(r["segments"]["weight_ns"]) == r["step_ns"] for r in rows), rows
    elif kind == "whatif JOB":
        rows = json.loads(res.stdout)["rows"]
        assert {r["step"]: r["measured_ns"] for r in rows} == steps, (rows, steps)
        assert all(r["change"] == "no-stragglers" for r in rows), rows
        return
    elif kind == "diff --explain":
        rows = [r for r in json.loads(res.stdout)["rows"] if r["section"] == "category"]
        good = raw_job_steps(*(p.read_bytes() for p in good_job(job.parent).iterdir()))
        for side, want in (("a_ns", steps), ("b_ns", good)):  # the mean step, idle included
            assert sum(r[side] for r in rows) == pytest.approx(sum(want.values()) / len(want))
        return
    if kind == "collectives":
        rows = json.loads(res.stdout)["rows"]
        assert len(rows) == 3 and all(r["ranks"] == 1 for r in rows), rows
    elif kind == "stragglers":
        got = json.loads(res.stdout)
        assert all(v["rank"] is None for v in got["verdict"]), got
        assert [sum(r["collectives"] for r in got["steps"] if r["rank"] == rank)
                for rank in (0, 1)] == [0, 3], got
    else:
        assert set(os.listdir(job.parent)) - listing == {out.name}
        events = json.loads(out.read_bytes())["traceEvents"]
        kernels = sum(e.get("ph") == "X" and e.get("cat") == "kernel" for e in events)
        assert kernels == raw_kernel_events(before[case.name]) + 2 * 3, kernels
        out.unlink()


def check_verdict(kind: str, path: Path, name: str) -> None:
    if kind in JOB_KINDS:
        check_job_run(kind, job_of(path), declared(name, kind))
        return
    code, stdout = check_run(kind, path, path.read_bytes())
    want = declared(name, kind)
    assert code == (1 if want is None else 0), (kind, code, want)
    if code == 0 and (got := kernels_of(kind, stdout)) is not None:
        assert got == want, (kind, got, want)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # none may reach a user's terminal
@pytest.mark.parametrize("name", NAMES)
def test_corpus_case(tmp_path: Path, name: str) -> None:
    """Each case through one command (every command in turn over the corpus): refused when
    its bytes say so, else read with the kernel count its bytes hold."""
    check_verdict(KINDS[NAMES.index(name) % len(KINDS)], file_for(tmp_path, name), name)


# One of each kind of case, through every command: the commands used to disagree on these.
EVERY_COMMAND = ("bare_number_event", "trailing_garbage", "two_objects", "nested_args",
                 "kernel.ts=null", "kernel.ts=huge_float", "kernel.dur=int_2p64",
                 "kernel.ts=negative", "duplicate_keys", "array_form", "gz_two_members",
                 "gz_double", "zip_gz", "lead_space_gz", "truncated_plain_0.8", "bom",
                 "every_dur_negative", "kernel.pid=negative", "kernel.args.stream=huge_float",
                 "kernel.args.correlation=huge_float", "space_run_before_comma",
                 "space_run_no_comma", "binary")


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", EVERY_COMMAND)
def test_one_input_one_verdict(tmp_path: Path, name: str) -> None:
    path = file_for(tmp_path, name)
    for kind in KINDS:
        check_verdict(kind, path, name)


@pytest.mark.parametrize("name,reason", [
    ("kernel.ts=true", "ts is a boolean, not a number"),
    ("kernel.ts=null", "ts is None, not a number"),
    ("kernel.ts=huge_float", "ts is 1e+308 µs, out of range"),
    ("kernel.dur=int_2p64", "out of range"),
    ("kernel.dur=nan", "invalid JSON near byte"),
    ("bare_number_event", "an item of traceEvents is 42, not an event object"),
    ("memcpy.args.bytes=lots", "bytes is 'lots', not a number"),
    ("every_dur_negative", "no event has a duration of 0 or more"),
    ("gz_magic_only", "corrupt gzip data"),
    ("truncated_plain_0.5", "JSON trace file is incomplete"),
    ("not_json", "not a trace (starts with 'h', not { or [: not JSON; nor a format Perfetto"),
    ("binary", "not a trace (starts with byte 0x00, not { or [: not JSON;"),
])
def test_true_messages(tmp_path: Path, name: str, reason: str) -> None:
    path = file_for(tmp_path, name)
    res = CliRunner().invoke(main, command("counters", path, tmp_path / "out.json"))
    assert res.exit_code == 1 and reason in res.stderr, res.stderr


@pytest.mark.perf
def test_nan_costs_no_more_than_a_good_value(tmp_path: Path) -> None:
    """A NaN early in a 20 MB trace is found at once (not by growing a chunk to its limit and
    then by the engine), and its message stays short."""
    import time

    path = kineto_gen.write_large(tmp_path / "big.json", 18_000)
    text = path.read_bytes().replace(b'"dur": 200', b'"dur": NaN', 1)
    path.write_bytes(text)
    start = time.perf_counter()
    res = CliRunner().invoke(main, ["info", str(path)])
    took = time.perf_counter() - start
    assert res.exit_code == 1 and "invalid JSON near byte" in res.stderr
    assert len(res.stderr) < 300
    assert took < 5, took


# ----- special files and stdin ---------------------------------------------------------------

def test_special_inputs(tmp_path: Path) -> None:
    """A directory, devices, a FIFO with no writer and a missing file, through every command
    (summary and convert read no rank directories: they say what the directory is instead)."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    cases = {str(tmp_path): ("cannot read 1 rank file(s), named above",  # the FIFO named (24.22)
                             "is a directory"),  # summary reads no rank directories
             "/dev/null": "empty input",
             "/dev/zero": "NUL bytes only", str(fifo): "no writer",
             str(tmp_path / "missing.json"): "no such file", "/dev/urandom": "not a trace"}
    for arg, reason in cases.items():
        for kind in KINDS:
            res = CliRunner().invoke(main, command(kind, Path(arg), tmp_path / "out.json"))
            assert res.exit_code == 1, (arg, res.stderr)
            *named, line = res.stderr.strip().splitlines()
            if arg == str(tmp_path) and kind not in ("summary", "convert"):  # each bad rank file named once
                assert named == [f"traceaug: error: {fifo}: a FIFO, not a trace file"], named
            else:
                assert named == [], named
            reasons = (reason,) if isinstance(reason, str) else reason
            assert line.startswith(f"traceaug: error: {arg}"), line
            assert any(r in line for r in reasons) and "\n" not in line, line
    assert sorted(os.listdir(tmp_path)) == ["fifo.json"]


def test_every_command_is_covered_or_exempt() -> None:
    """The commands that take no case say why, each tested on its own: a server's bad root, the cache's
    place; every other command reads a trace and goes through the corpus (``KINDS``)."""
    from traceaug import commands

    takes_no_trace = {"mcp": "a server on stdin / stdout: its bad --root (test_mcp_refuses_a_bad_root)",
                      "cache": "no trace: the table cache's place (tests/test_cache.py)"}
    assert set(commands.NAMES) == {*takes_no_trace, *NOT_A_CASE, *(k for k in KINDS if k in commands.NAMES)}


@pytest.mark.parametrize("bad", ["missing", "a_file"])
def test_mcp_refuses_a_bad_root(tmp_path: Path, bad: str) -> None:
    """``mcp --root`` naming no directory: one line naming it, exit 1, before any serving (click's usage
    error took three lines, exit 2)."""
    root = tmp_path / bad
    if bad == "a_file":
        root.write_bytes(b"{}")
    res = CliRunner().invoke(main, ["mcp", "--root", str(tmp_path), "--root", str(root)])
    why = "no such directory" if bad == "missing" else "not a directory"
    assert (res.exit_code, res.stderr) == (1, f"traceaug: error: {root}: --root: {why}\n")


def test_stdin_in_and_stdout_out(tmp_path: Path) -> None:
    data = json.dumps(kineto_gen.trace()).encode()
    res = CliRunner().invoke(main, ["info", "--format", "json", "-"], input=data)
    assert res.exit_code == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["file"] == "stdin" and info["profiler_steps"] == STEPS and info["kernels"] == STEPS
    res = CliRunner().invoke(main, ["counters", "-", "-"], input=data)
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout_bytes)  # only the trace on stdout; the summary on stderr
    names = {e.get("name") for e in out["traceEvents"]}
    assert {"Queue length", "Bandwidth (GB/s)"} <= names and "wrote stdout" in res.stderr
    assert data[data.index(b'"traceEvents": [') + 16:] in res.stdout_bytes


# ----- output-path faults --------------------------------------------------------------------

def valid(tmp_path: Path) -> Path:
    return kineto_gen.write(tmp_path / "in.json", kineto_gen.trace())


def test_output_is_never_an_input(tmp_path: Path) -> None:
    src = valid(tmp_path)
    other = kineto_gen.write(tmp_path / "b.json", kineto_gen.trace())
    (tmp_path / "link.json").symlink_to(src)
    os.link(src, tmp_path / "hard.json")
    (tmp_path / "sub").mkdir()
    before = src.read_bytes()
    same = [str(src), f"{tmp_path}/./in.json", f"{tmp_path}/sub/../in.json",
            str(tmp_path / "link.json"), str(tmp_path / "hard.json")]
    for out in same:
        for args in (["counters", str(src), out], ["diff", str(src), str(other), "--html", out],
                     ["diff", str(other), str(src), "--trace", out],
                     ["diff", str(src), str(other), "--html", str(tmp_path / "r.html"),
                      "--trace", out]):
            res = CliRunner().invoke(main, args)
            assert res.exit_code == 1, (args, res.stdout)
            assert "is the input" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
            assert src.read_bytes() == before
            assert not (tmp_path / "r.html").exists()  # checked before any work or output
    res = CliRunner().invoke(main, ["diff", str(src), str(other), "--html", str(tmp_path / "x"),
                                    "--trace", str(tmp_path / "x")])
    assert res.exit_code == 1 and "is also the output" in res.stderr


def test_output_targets_that_cannot_be_written(tmp_path: Path) -> None:
    src = valid(tmp_path)
    (tmp_path / "adir").mkdir()
    targets = {str(tmp_path / "missing" / "o.json"): "does not exist",
               str(tmp_path / "adir"): "is a directory",
               "/proc/o.json": "cannot write in /proc", "/proc/self/status": "cannot write",
               "/dev/full": "not a regular file"}
    for out, reason in targets.items():
        for args in (["counters", str(src), out], ["diff", str(src), str(src), "--html", out]):
            res = CliRunner().invoke(main, args)
            assert res.exit_code == 1, (args, res.stdout)
            line = res.stderr.strip()
            assert line.startswith(f"traceaug: error: {out}") and reason in line, line
    assert sorted(os.listdir(tmp_path)) == ["adir", "in.json"]
    assert os.listdir(tmp_path / "adir") == []


def test_full_disk_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    """ENOSPC cannot be provoked on the test machine's disk: the write fails as a full disk's
    would, and the run says so in one line and leaves no file."""
    import errno

    from traceaug import atomic

    src = valid(tmp_path)
    real = atomic.os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(atomic.os, "fdopen", lambda fd, mode: Full(real(fd, mode)))
    for args in (["counters", str(src), str(tmp_path / "o.json")],
                 ["diff", str(src), str(src), "--html", str(tmp_path / "r.html")]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1
        assert res.stderr.strip() == f"traceaug: error: {args[-1]}: No space left on device"
    assert os.listdir(tmp_path) == ["in.json"]


def test_failing_second_output_leaves_neither(tmp_path: Path, monkeypatch) -> None:
    """diff --html and --trace: when writing the trace fails, the report is not left behind."""
    from traceaug.rewrite import merge

    src = valid(tmp_path)
    other = kineto_gen.write(tmp_path / "b.json", kineto_gen.trace())

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(merge.splice.Copy, "finish", fail)
    res = CliRunner().invoke(main, ["diff", str(src), str(other), "--html", str(tmp_path / "r.html"),
                                    "--trace", str(tmp_path / "m.json")])
    assert res.exit_code == 1, res.stdout
    assert sorted(os.listdir(tmp_path)) == ["b.json", "in.json"]


def test_read_only_directory(tmp_path: Path) -> None:
    """A directory the process may not write in (skipped as root, who may write anywhere)."""
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories: /proc stands for them above")
    src = valid(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        res = CliRunner().invoke(main, ["counters", str(src), str(ro / "o.json")])
        assert res.exit_code == 1 and "cannot write in" in res.stderr
    finally:
        ro.chmod(0o755)


def test_failing_rank_leaves_no_output_of_the_other(tmp_path: Path) -> None:
    """A rank directory where one rank fails: no rank's output is left (nor the directory)."""
    src = tmp_path / "ranks"
    src.mkdir()
    kineto_gen.write(src / "rank0.json", kineto_gen.trace())
    bad = json.dumps(kineto_gen.trace(distributedInfo={"rank": 1, "world_size": 2})).encode()
    (src / "rank1.json").write_bytes(bad[: len(bad) // 2])
    res = CliRunner().invoke(main, ["counters", str(src), str(tmp_path / "out")])
    assert res.exit_code == 1 and "rank1.json" in res.stderr, res.stderr
    assert sorted(os.listdir(tmp_path)) == ["ranks"]
    assert sorted(os.listdir(src)) == ["rank0.json", "rank1.json"]
    res = CliRunner().invoke(main, ["counters", str(src), str(src)])
    assert res.exit_code == 1 and "is the input directory" in res.stderr


# ----- hostile rank directories (the job commands) --------------------------------------------

NON_UTF8 = os.fsdecode(b"rank-\xff.json")  # a name no UTF-8 terminal can show as it is


def _hostile_job(job: Path, kind: str) -> str | None:
    """Rank 1 good, and beside it one hostile entry of ``kind``; the entry the run must name
    (None: the directory itself is at fault)."""
    kineto_gen.write(job / "rank-1.json", kineto_gen.rank_trace(1))
    good = json.dumps(kineto_gen.rank_trace(0)).encode()
    entry = job / "rank-0.json"
    if kind == "garbage":
        entry.write_bytes(bytes(range(256)) * 4)
    elif kind == "truncated_gz":
        entry = job / "rank-0.json.gz"
        packed = gzip.compress(good, mtime=0)
        entry.write_bytes(packed[: len(packed) // 2])
    elif kind == "truncated":
        entry.write_bytes(good[: len(good) // 2])
    elif kind == "fifo":
        os.mkfifo(entry)
    elif kind == "a_directory":
        entry.mkdir()
    elif kind == "empty_file":
        entry.write_bytes(b"")
    elif kind == "dangling_symlink":
        entry.symlink_to(job / "missing.json")
    elif kind == "symlink_to_dev_zero":
        entry.symlink_to("/dev/zero")
    elif kind == "symlink_loop":
        entry.symlink_to(entry.name)
    elif kind == "non_utf8_name_truncated":
        entry = job / NON_UTF8
        entry.write_bytes(good[: len(good) // 2])
    elif kind == "rank_twice":
        kineto_gen.write(entry, kineto_gen.rank_trace(1))
        return None
    elif kind == "no_rank":
        t = kineto_gen.rank_trace(0)
        del t["distributedInfo"]
        kineto_gen.write(job / "worker.json", t)
        return None
    elif kind == "empty_job":
        (job / "rank-1.json").unlink()
        return None
    elif kind in UNRANKED:  # bad content under a name with no rank: the content is blamed
        entry = job / f"worker.json{'.gz' if kind == 'truncated_gz_unranked' else ''}"
        entry.write_bytes(UNRANKED[kind](good))
    elif kind in OTHER_JOBS:  # a third file beside the good job: refused by its reason
        kineto_gen.write(job / "rank-0.json", kineto_gen.rank_trace(0))
        kineto_gen.write(job / "other.json", OTHER_JOBS[kind][0]())
        return None
    return str(entry)


UNRANKED = {"garbage_unranked": lambda good: bytes(range(256)) * 4,
            "text_unranked": lambda good: b"hello world\n",
            "truncated_gz_unranked": lambda good: gzip.compress(good, mtime=0)[:200]}
WHY_UNRANKED = {"garbage_unranked": "starts with byte 0x00, not { or [: not JSON",
                "text_unranked": "starts with 'h', not { or [: not JSON",
                "truncated_gz_unranked": "corrupt gzip data"}


def _shifted(raw: dict, by_us: int) -> dict:
    for e in raw["traceEvents"]:
        if "ts" in e:
            e["ts"] += by_us
    return raw


def _recorded(rank: int, world: int) -> dict:
    raw = kineto_gen.rank_trace(0)
    raw["distributedInfo"] = {"rank": rank, "world_size": world}
    return raw


# Files of another job beside ranks 0 and 1 of a 2-rank job (all at kineto_gen.BASE_US,
# 2024-04-04): each one's reason, known from how it is made.
OTHER_JOBS = {
    "rank_0_of_another_clock": (lambda: _shifted(kineto_gen.rank_trace(0), -kineto_gen.BASE_US),
                                "dates its events from boot or the trace's start, the other "
                                "ranks since 1970 (epoch µs)"),
    "world_size_16": (lambda: _recorded(1, 16), "records world size 16, the other ranks 2"),
    "rank_12_of_2": (lambda: _recorded(12, 2), "rank 12 is outside the job's world size 2"),
    "a_day_later": (lambda: _shifted(kineto_gen.rank_trace(1), 25 * 3600 * 10**6),
                    "starts 25.0 hours away from the other ranks")}


HOSTILE_JOBS = ("garbage", "truncated_gz", "truncated", "fifo", "a_directory", "empty_file",
                "dangling_symlink", "symlink_to_dev_zero", "symlink_loop",
                "non_utf8_name_truncated", "rank_twice", "no_rank", "empty_job", *UNRANKED,
                *OTHER_JOBS)


def _listing(d: Path) -> dict[str, object]:
    return {p.name: (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file()
                     else p.is_dir()) for p in d.iterdir()}


@pytest.mark.parametrize("hostile", HOSTILE_JOBS)
def test_hostile_rank_directories(tmp_path: Path, hostile: str) -> None:
    """Every job command on a job with one hostile entry: exit 1, the entry
    named once (or the directory, when it is the fault), a closing line, nothing written,
    the job unchanged."""
    job = tmp_path / "job"
    job.mkdir()
    entry = _hostile_job(job, hostile)
    good = good_job(tmp_path)  # diff --explain's side B
    before = _listing(job)
    for kind in JOB_KINDS:
        out = tmp_path / "out.json"
        res = CliRunner().invoke(main, job_command(kind, job, out, good))
        err = res.stderr
        assert res.exit_code == 1 and res.stdout == "", (kind, hostile, err)
        assert "Traceback" not in err and isinstance(res.exception, SystemExit), err
        lines = err.strip().splitlines()
        assert 1 <= len(lines) <= 2 and all(len(x) < 300 for x in lines), err
        assert lines[-1].startswith("traceaug: error: "), err
        shown = entry and entry.encode("utf-8", "backslashreplace").decode()  # as said
        if shown is None:
            assert lines == [lines[-1]] and lines[0].startswith(f"traceaug: error: {job}: "), err
        else:
            named = [x for x in lines if x.startswith((f"traceaug: error: {shown}: ",
                                                       f"traceaug: rank 0 failed: {shown}: "))]
            assert len(named) == 1, err
        assert sorted(os.listdir(tmp_path)) == ["good_job", "job"] and _listing(job) == before


URL_HOSTILE = ("garbage", "truncated")  # refused as the job is listed; failing in the rank's task


@pytest.fixture(scope="module")
def url_hostile_jobs(s3: S3, tmp_path_factory) -> dict[str, str]:
    """Each of ``URL_HOSTILE`` as a 2-rank job under s3://bucket/hostile-KIND/: kind -> the hostile URL."""
    urls = {}
    for kind in URL_HOSTILE:
        job = tmp_path_factory.mktemp(kind)
        entry = Path(_hostile_job(job, kind))
        for f in job.iterdir():
            s3.fs.put(str(f), f"bucket/hostile-{kind}/{f.name}")
        urls[kind] = f"s3://bucket/hostile-{kind}/{entry.name}"
    return urls


@pytest.mark.parametrize("name", url_job_commands())
def test_a_hostile_rank_in_a_url_job(s3: S3, url_hostile_jobs: dict[str, str], tmp_path: Path,
                                     name: str) -> None:
    """Issue 39's done-when: every command that reads jobs, as the CLI declares it, on an s3:// job with
    one hostile rank (outputs s3:// too): exit 1, the rank's URL named once (never its fetched copy), a
    closing line, nothing on stdout, no object written, the job's objects as they were."""
    env = {**s3.env, "TMPDIR": str(tmp_path)}
    runs = {}
    for kind, url in url_hostile_jobs.items():  # at once: each waits on its own process
        job, out = url.rsplit("/", 1)[0] + "/", f"s3://bucket/hostile-out/{name}-{kind}"
        runs[kind] = subprocess.Popen([sys.executable, "-m", "traceaug",
                                       *url_job_args(name, job, out, s3.endpoint)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    before = {k: s3.fs.cat(k) for k in s3.fs.find("bucket") if "/hostile-" in k}
    for kind, proc in runs.items():
        out_text, err = proc.communicate(timeout=300)
        url = url_hostile_jobs[kind]
        assert proc.returncode == 1 and out_text == "", (kind, err)
        lines = err.strip().splitlines()
        assert "Traceback" not in err and "traceaug-fetch" not in err, err
        assert 1 <= len(lines) <= 2 and lines[-1].startswith("traceaug: error: "), err
        assert len([x for x in lines if x.startswith((f"traceaug: error: {url}: ",
                                                      f"traceaug: rank 0 failed: {url}: "))]) == 1, err
    assert {k: s3.fs.cat(k) for k in s3.fs.find("bucket") if "/hostile-" in k} == before
    assert s3.fs.find(f"bucket/hostile-out/{name}-") == []
    assert os.listdir(tmp_path) == []


def test_a_good_rank_under_a_non_utf8_name(tmp_path: Path) -> None:
    """A good rank 0 under a name that is not UTF-8, beside rank 1: read. Each of the 3
    all-reduces (in the raw JSON: rank 1's kernel starts 5 µs after rank 0's) has both ranks,
    rank 1 the straggler 5 µs late; merge draws one arrow for each."""
    job = tmp_path / "job"
    job.mkdir()
    kineto_gen.write(job / "rank-1.json", kineto_gen.rank_trace(1))
    kineto_gen.write(job / NON_UTF8, kineto_gen.rank_trace(0))
    starts = {r: [e["ts"] for e in kineto_gen.rank_trace(r)["traceEvents"]
                  if e.get("name") == kineto_gen.NCCL_KERNEL] for r in (0, 1)}
    skews = [b - a for a, b in zip(starts[0], starts[1], strict=True)]
    res = CliRunner().invoke(main, ["collectives", "--format", "json", str(job)])
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert [(r["ranks"], r["straggler"], r["skew_ns"]) for r in rows] == \
        [(2, 1, round(s * 1000)) for s in skews]
    res = CliRunner().invoke(main, ["merge", str(job), str(tmp_path / "m.json")])
    assert res.exit_code == 0 and f"(2 ranks, {len(skews)} cross-rank arrows)" in res.stderr


@pytest.mark.parametrize("hostile", sorted(UNRANKED))
def test_bad_content_is_blamed_and_skipped(tmp_path: Path, hostile: str) -> None:
    """Random bytes, text or a cut gzip under a name with no rank: the content is named, not
    the rank ("cannot tell the rank of"), and --skip-bad-ranks goes on without it: rank 1's 3
    all-reduces, each seen by one rank."""
    job = tmp_path / "job"
    job.mkdir()
    entry = _hostile_job(job, hostile)
    res = CliRunner().invoke(main, ["collectives", "--format", "json", str(job)])
    assert res.exit_code == 1 and "cannot tell the rank" not in res.stderr, res.stderr
    assert f"traceaug: error: {entry}: {WHY_UNRANKED[hostile]}" in res.stderr, res.stderr
    res = CliRunner().invoke(main, ["collectives", "--skip-bad-ranks", "--format", "json", str(job)])
    assert res.exit_code == 0, res.stderr
    assert f"traceaug: warning: {entry}: {WHY_UNRANKED[hostile]}" in res.stderr, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert len(rows) == 3 and all(r["ranks"] == 1 for r in rows), rows


@pytest.mark.parametrize("case", sorted(OTHER_JOBS))
def test_ranks_of_another_job_are_named(tmp_path: Path, case: str) -> None:
    """A file of another job beside a 2-rank job: every job command refuses in one line naming
    it and why; with --skip-bad-ranks it is named and left out: the job's 3 all-reduces, each
    seen by both ranks."""
    job = tmp_path / "job"
    job.mkdir()
    _hostile_job(job, case)
    why = f"traceaug: error: {job}: not the ranks of one job: other.json {OTHER_JOBS[case][1]}"
    for kind in JOB_KINDS:
        res = CliRunner().invoke(main, job_command(kind, job, tmp_path / "out.json", job))
        assert res.exit_code == 1 and res.stderr.startswith(why), (kind, res.stderr)
        assert len(res.stderr.splitlines()) == 1, res.stderr
    assert sorted(os.listdir(tmp_path)) == ["job"]
    res = CliRunner().invoke(main, ["collectives", "--skip-bad-ranks", "--format", "json", str(job)])
    assert res.exit_code == 0, res.stderr
    assert f"traceaug: warning: {job / 'other.json'}: {OTHER_JOBS[case][1]}; skipped" in res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert len(rows) == 3 and all(r["ranks"] == 2 for r in rows), rows


def _dlrm_with(tmp_path: Path, variant: str) -> tuple[Path, str, str]:
    """The real 8-rank DLRM job (world size 8) and one file of another job: (job, its name,
    why it is refused). small_training: rank 0 of a 2-rank job; the others are one DLRM rank's
    text with its distributedInfo (or every ts) edited."""
    from conftest import TESTDATA, shared_trace

    job = tmp_path / "job"
    shutil.copytree(shared_trace("kineto/jobs/dlrm_v100_8ranks"), job)
    if variant == "small_training":
        shutil.copy(TESTDATA / "small_training.json", job / "small_training.json")
        return job, "small_training.json", "records world size 2, the other ranks 8"
    (rank7,) = job.glob("worker7_*")
    text = gzip.decompress(rank7.read_bytes())
    if variant == "rank_12":
        text = text.replace(b'"rank": 7', b'"rank": 12', 1)
        why = "rank 12 is outside the job's world size 8"
    elif variant == "world_16":
        text = text.replace(b'"rank": 7, "world_size": 8', b'"rank": 8, "world_size": 16', 1)
        why = "records world size 16, the other ranks 8"
    else:  # the same rank 7 with its clock 53 years back (relative timestamps)
        raw = json.loads(text)
        text = json.dumps(_shifted(raw, -1_690_000_000_000_000)).encode()
        why = ("dates its events from boot or the trace's start, the other ranks since 1970 "
               "(epoch µs)")
    (job / "other.json").write_bytes(text)
    return job, "other.json", why


@pytest.mark.parametrize("variant", ["small_training", "rank_12", "world_16", "clock"])
def test_real_job_mixed_with_another(tmp_path: Path, variant: str) -> None:
    """The DLRM job beside a file of another job: collectives and critical-path --job refuse in
    one line naming the file and why, before reading any rank; --skip-bad-ranks names it and
    reads the job (small_training only, as the rest costs the same): every one of its 8 NCCL
    kernels per rank matched across the 8 ranks."""
    job, name, why = _dlrm_with(tmp_path, variant)
    said = f"traceaug: error: {job}: not the ranks of one job: {name} {why} (--skip-bad-ranks"
    for args in (["collectives", str(job)],
                 ["critical-path", "--job", str(job), str(tmp_path / "path.json")]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and res.stderr.startswith(said), res.stderr
        assert len(res.stderr.splitlines()) == 1, res.stderr
    assert sorted(os.listdir(tmp_path)) == ["job"]
    if variant == "small_training":
        res = CliRunner().invoke(main, ["collectives", "--skip-bad-ranks", "--format", "json",
                                        str(job)])
        assert res.exit_code == 0, res.stderr
        assert f"traceaug: warning: {job / name}: {why}; skipped" in res.stderr
        rows = json.loads(res.stdout)["rows"]
        assert len(rows) == 8 and all(r["ranks"] == 8 for r in rows), rows


def test_diff_html_of_a_rank_named_in_no_utf8(tmp_path: Path) -> None:
    """diff --html of a job whose rank 0 has a name that is not UTF-8: the page is written (it
    raised UnicodeEncodeError), naming the file with its byte as \\xff."""
    job = tmp_path / "job"
    job.mkdir()
    kineto_gen.write(job / "rank-1.json", kineto_gen.rank_trace(1))
    kineto_gen.write(job / NON_UTF8, kineto_gen.rank_trace(0))
    page = tmp_path / "x.html"
    res = CliRunner().invoke(main, ["diff", "--format", "json", str(job), str(good_job(tmp_path)),
                                    "--html", str(page)])
    assert res.exit_code == 0, res.stderr
    assert f"A = {job}/rank-\\xff.json<br>" in page.read_text(encoding="utf-8")


# ----- whitespace runs inside traceEvents ----------------------------------------------------

def _with_run(path: Path, where: str, size: int) -> Path:
    """kineto_gen's trace with a run of ``size`` bytes of whitespace in ``where``: after the
    [, after an event's comma, before a comma, before the ]."""
    evs = [json.dumps(e) for e in kineto_gen.events()]
    run = {"lead": " ", "after_comma": "\n", "before_comma": " ", "before_end": "\t"}[where] * size
    body = {"lead": run + ",".join(evs), "after_comma": ",".join(evs[:5]) + "," + run + ",".join(evs[5:]),
            "before_comma": ",".join(evs[:9]) + run + "," + ",".join(evs[9:]),
            "before_end": ",".join(evs) + run}[where]
    path.write_text('{"traceEvents":[' + body + "]}")
    return path


RUN_PLACES = ("lead", "after_comma", "before_comma", "before_end")


@pytest.mark.parametrize("where", RUN_PLACES)
def test_whitespace_runs_are_passed_streaming(tmp_path: Path, where: str) -> None:
    """Pass 1 and pass 2 cut a trace with a 3 MB run of whitespace into the same chunks, the
    run in none of them (the engine never reads it): every event of the raw JSON, once."""
    from traceaug.read import chunks, source

    path = _with_run(tmp_path / "t.json", where, 3 << 20)
    found = list(chunks.scan(source.iter_blocks(path)))
    layout = found.pop()
    again = list(chunks.recut(source.iter_blocks(path), layout))
    assert [c.text for c in found] == [c.text for c in again]
    assert all(len(c.text) < 1 << 20 for c in found)
    assert sum(len(c.events) for c in found) == len(json.loads(path.read_bytes())["traceEvents"])


@pytest.mark.parametrize("text,near", [(b'{"traceEvents":[{"ph":"M"}' + b" " * (3 << 20) + b'{"ph":"M"}]}',
                                        "expected , or ] after an event"),
                                       (b'{"traceEvents":[{"ph":"M"},' + b" " * (3 << 20) + b"]}",
                                        "a comma before ]")])
def test_a_run_of_whitespace_hides_no_missing_comma(tmp_path: Path, text: bytes, near: str) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(text)
    res = CliRunner().invoke(main, ["counters", str(path), str(tmp_path / "o.json")])
    assert res.exit_code == 1 and near in res.stderr, res.stderr


def test_a_run_longer_than_any_event(tmp_path: Path) -> None:
    """130 MB of whitespace before a comma in traceEvents (more than any one event may span):
    info read it through Perfetto's own reader (~40 s on 200 MB) and counters refused it as
    not Chrome JSON; now both read it as any trace, counters keeping every byte."""
    path = _with_run(tmp_path / "t.json", "before_comma", 130 << 20)
    res = CliRunner().invoke(main, ["info", "--format", "json", str(path)])
    assert res.exit_code == 0 and json.loads(res.stdout)["kernels"] == STEPS, res.stderr
    out = tmp_path / "o.json"
    res = CliRunner().invoke(main, ["counters", str(path), str(out)])
    assert res.exit_code == 0, res.stderr
    raw = path.read_bytes()
    tail = raw[raw.index(b"[") + 1:]
    with open(out, "rb") as f:
        written = f.read()
    assert tail in written
    del raw, written


# ----- messages that blamed the wrong thing (issue 39, item 18) --------------------------------

def test_open_refuses_a_busy_port_before_merging(tmp_path: Path) -> None:
    """open JOB --port P with P taken: refused at once, before the job's merge, which would
    have failed on its truncated rank 0 first."""
    import socket

    job = tmp_path / "job"
    job.mkdir()
    _hostile_job(job, "truncated")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = CliRunner().invoke(main, ["open", str(job), "--port", str(port), "--no-browser"])
    assert res.exit_code == 1, res.stderr
    assert res.stderr.startswith(f"traceaug: error: --port {port}: cannot listen"), res.stderr


def test_merge_to_stdout_says_stdout(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["merge", str(good_job(tmp_path)), "-"])
    assert res.exit_code == 0, res.stderr
    assert res.stderr == "wrote stdout (2 ranks, 3 cross-rank arrows)\n"
    assert len(json.loads(res.stdout_bytes)["traceEvents"]) > 0


def test_info_of_a_job_with_a_failed_rank_claims_no_output(tmp_path: Path) -> None:
    """info writes nothing whatever happens: its closing line names the failed rank only."""
    job = tmp_path / "job"
    job.mkdir()
    _hostile_job(job, "truncated")
    res = CliRunner().invoke(main, ["info", str(job)])
    assert res.exit_code == 1, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "traceaug: error: 1 of 2 ranks failed: rank(s) 0"


def test_a_full_tmpdir_is_blamed_for_an_export_conversion(tmp_path: Path) -> None:
    """The nsys export's JSON conversion (in $TMPDIR) cannot be written: the line names the
    export and $TMPDIR, not a temporary file. A file size limit (RLIMIT_FSIZE) is the real
    fault here, as a full disk cannot be made without mounting one."""
    import resource
    import signal
    import subprocess
    import sys

    from conftest import shared_trace

    export = shared_trace("nsys/a100_saxpy_mpi_rank0.sqlite")

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails: EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "traceaug", "info", str(export)], env=env,
                         capture_output=True, text=True, preexec_fn=limited, timeout=300)
    assert res.returncode == 1, res.stderr
    assert res.stderr == (f"traceaug: error: {export}: cannot write its JSON conversion in "
                          f"{tmp_path} (File too large); set TMPDIR to a larger disk\n")
    assert os.listdir(tmp_path) == []


def test_a_header_of_whitespace_has_one_verdict(tmp_path: Path) -> None:
    """70 MB of whitespace between the header's keys and traceEvents: info read it (through
    Perfetto's reader), counters refused it as not Chrome JSON; now every command refuses it."""
    text = json.dumps(kineto_gen.trace())
    at = text.index('"traceEvents"')
    path = tmp_path / "t.json"
    path.write_text(text[:at] + " " * (70 << 20) + text[at:])
    for args in (["info", str(path)], ["kernels", str(path)],
                 ["counters", str(path), str(tmp_path / "o.json")]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and res.stderr == (
            f"traceaug: error: {path}: not a trace: more than 64 MB before traceEvents, most "
            "of it whitespace\n"), (args[0], res.stderr)


def test_no_wrote_for_a_stdout_that_is_full(tmp_path: Path) -> None:
    """OUT is - and stdout is /dev/full: the last line names stdout, never "wrote stdout" (it was
    said before the copy to stdout failed); a summary for the terminal may come first."""
    import subprocess
    import sys

    from conftest import shared_trace

    src = kineto_gen.write(tmp_path / "in.json", kineto_gen.trace())
    job = good_job(tmp_path)
    for args in (["counters", str(src), "-"], ["merge", str(job), "-"],
                 ["convert", str(shared_trace("nsys/a100_saxpy_mpi_rank0.sqlite")), "-"]):
        with open("/dev/full", "wb") as full:
            res = subprocess.run([sys.executable, "-m", "traceaug", *args], stdout=full,
                                 stderr=subprocess.PIPE, text=True, timeout=300)
        assert res.returncode == 1, res.stderr
        assert res.stderr.endswith("\ntraceaug: error: stdout: No space left on device\n") or \
            res.stderr == "traceaug: error: stdout: No space left on device\n", res.stderr
        assert "wrote" not in res.stderr, res.stderr
    assert sorted(os.listdir(tmp_path)) == ["good_job", "in.json"]


@pytest.mark.parametrize("gz", [True, False])
def test_skip_bad_ranks_skips_a_rank_cut_past_its_first_mb(tmp_path: Path, gz: bool) -> None:
    """A rank cut at 70 % of its 2.4 MB of JSON (plain, or gzip cut at 70 %): its first MB
    reads well, so only reading it to the end tells. --skip-bad-ranks now names it and goes on
    with the job's two good ranks (each one's 3 steps, from the raw JSON); without it the run
    still fails naming it."""
    job = good_job(tmp_path)
    big = kineto_gen.write_large(tmp_path / "big.json", 2500)
    data = big.read_bytes()
    big.unlink()
    assert len(data) > 2 << 20
    if gz:
        packed = gzip.compress(data, mtime=0)
        cut = job / "worker.json.gz"
        cut.write_bytes(packed[: len(packed) * 7 // 10])
    else:
        cut = job / "worker.json"
        cut.write_bytes(data[: len(data) * 7 // 10])
    res = CliRunner().invoke(main, ["info", "--skip-bad-ranks", "--format", "json", str(job)])
    assert res.exit_code == 0, res.stderr
    assert res.stderr.startswith(f"traceaug: warning: {cut}: "), res.stderr
    assert "; skipped" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert [(r["rank"], r["profiler_steps"]) for r in rows] == [(0, STEPS), (1, STEPS)], rows
    res = CliRunner().invoke(main, ["info", "--format", "json", str(job)])
    assert res.exit_code == 1 and cut.name in res.stderr, res.stderr


def test_clocks_since_boot_are_not_compared(tmp_path: Path) -> None:
    """Ranks on hosts' clocks since boot (Kineto's monotonic µs, as most shared traces have)
    may lie weeks apart: a job whose two ranks start 38 days apart on such clocks is read,
    its 3 all-reduces matched across both ranks (their clocks aligned by them)."""
    job = tmp_path / "job"
    job.mkdir()
    for rank, at_us in ((0, 1_200_000_000_000), (1, 4_500_000_000_000)):
        raw = _shifted(kineto_gen.rank_trace(rank), at_us - kineto_gen.BASE_US)
        kineto_gen.write(job / f"rank-{rank}.json", raw)
    res = CliRunner().invoke(main, ["collectives", "--format", "json", str(job)])
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert len(rows) == 3 and all(r["ranks"] == 2 for r in rows), rows
