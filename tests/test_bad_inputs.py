"""The generated bad-input corpus (tests/bad_inputs.py) through every command that reads a trace.

Each case must end in a non-zero exit with one line under 300 characters naming the file,
or in a correct result; never a traceback, never an output or temporary file left behind,
and the input unchanged. To stay fast (in-process, ~0.4 s a run) each case goes through one
of info / query / counters in turn; the structural cases, where the commands used to
disagree, go through all four commands including diff and must get one verdict.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
from pathlib import Path

import bad_inputs
import kineto_gen
import pytest
from click.testing import CliRunner

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
WRITERS = ("counters", "critical-path", "patterns")  # rewriters: OUT keeps every input byte


def command(kind: str, path: Path, out: Path) -> list[str]:
    """The command line that runs ``kind`` on ``path`` (``out``: the file it may write)."""
    if kind in WRITERS:
        return [kind, "--format", "json", str(path), str(out)]
    return {"info": ["info", "--format", "json", str(path)],
            "query": ["query", "--format", "json", str(path), KERNEL_SQL],
            "report": ["report", "--format", "json", str(path), "--html", str(out)],
            "diff": ["diff", "--format", "json", str(path), str(path)],
            }.get(kind, [kind, "--format", "json", str(path)])


def kernels_of(kind: str, stdout: str) -> int | None:
    """The kernel count a command's JSON reports (None: it reports none)."""
    if kind in ("report", *WRITERS, "gaps", "breakdown", "launches", "diff"):
        return None  # report --html writes a page; the rest report no kernel count
    data = json.loads(stdout)
    if kind == "info":
        return data["kernels"]
    if kind == "query":
        return data[0]["kernels"]
    if kind == "kernels":
        return sum(r["count"] for r in data["kernels"] if r["type"] != "memory")
    if kind == "summary":
        return data[0]["kernel"]["instances"]
    return None


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
        assert made == ({out.name} if kind in (*WRITERS, "report") else set()), made
        if kind in WRITERS:  # every original byte kept, the result still JSON
            written = out.read_bytes()
            raw = gzip.decompress(before) if before[:2] == b"\x1f\x8b" else before
            array = raw.lstrip().startswith(b"[")
            tail = raw[raw.index(b"[", 0 if array else raw.index(b"traceEvents")) + 1:]
            assert tail in written
            json.loads(written)
        if out.exists():
            out.unlink()
    return res.exit_code, res.stdout


KINDS = ("info", "query", "kernels", "gaps", "breakdown", "launches", "report", "counters",
         "critical-path", "patterns", "diff", "summary")  # every command that reads a trace
# Where a command's verdict differs from the rest, by design: counters and critical-path place
# their events by durations and refuse a trace with none (test_true_messages has the line).
NEEDS_DURATIONS = {"every_dur_negative": ("counters", "critical-path")}


def declared(name: str, kind: str) -> int | None:
    """The case's verdict for ``kind``: its kernel count, or None for refused."""
    if kind in NEEDS_DURATIONS.get(name, ()):
        return None
    return bad_inputs.expected_kernels(CASES[name])


def check_verdict(kind: str, path: Path, name: str) -> None:
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
                 "every_dur_negative")


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
    (summary reads no rank directories: it says what the directory is instead)."""
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
            if arg == str(tmp_path) and kind != "summary":  # each bad rank file named once
                assert named == [f"traceaug: error: {fifo}: a FIFO, not a trace file"], named
            else:
                assert named == [], named
            reasons = (reason,) if isinstance(reason, str) else reason
            assert line.startswith(f"traceaug: error: {arg}"), line
            assert any(r in line for r in reasons) and "\n" not in line, line
    assert sorted(os.listdir(tmp_path)) == ["fifo.json"]


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
