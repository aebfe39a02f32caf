"""Ctrl-C and SIGTERM at many points of real runs: exit 130 / 143 at once, never a crash
(the engine is stopped by epoch interruption, never by an exception in a host call), no
output or temporary file, no process left running."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import jobgen
import kineto_gen
import pytest
from conftest import S3, declared_args, shared_trace, trace_commands, url_job_args, url_job_commands

STEPS = 25_000  # ~24 MB of JSON (counters, info): seconds of engine. Below
# normalize.PARALLEL_ABOVE (48 MiB), so their pass 1 runs in-process; diff's runs in a worker
MID_STEPS = 6_000  # critical-path, patterns, report, diff: a few seconds each
WHATIF_STEPS = 500  # whatif replays each step (~4 ms a step): a few seconds in all
RANK_STEPS = 2_500  # each of the two ranks of the rank-directory forms
JOB_STEPS = 100  # each rank of the job commands' job: seconds each (critical-path --job, stragglers
# and diff --explain cost ~20-30 ms a step)
NSYS_COPIES = 2_000  # the saxpy export's GPU work 2,001 times: ~300k events, seconds to convert
WHOLE_RUN_CAP = 12.0  # s: a run longer than this (a slow or loaded machine) is stopped there,
# its signals land in its first 12 s; every command's input is sized to end well before
SAXPY = "nsys/a100_saxpy_mpi_rank0.sqlite"
OLD = b"OLD OUTPUT\n"


def nsys_large(src: Path, dst: Path, copies: int) -> Path:
    """A copy of the nsys export ``src`` whose kernels, memcpys and runtime calls repeat
    ``copies`` more times, each copy later than the last, with its own correlation ids."""
    shutil.copy(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    (span,), = con.execute("SELECT MAX(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    (ids,), = con.execute("SELECT MAX(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    shifted = {"start": f"start + k * {span}", "end": f"end + k * {span}",
               "correlationId": f"correlationId + k * {ids}"}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_RUNTIME"):
        cols = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
        con.execute(f"WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < {copies}) "
                    f"INSERT INTO {table} ({', '.join(cols)}) "
                    f"SELECT {', '.join(shifted.get(c, c) for c in cols)} FROM {table}, n")
    con.commit()
    con.close()
    return dst


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """The inputs of every command, in one directory (the outputs go there too)."""
    d = tmp_path_factory.mktemp("signals")
    path = kineto_gen.write_large(d / "big.json", STEPS)
    kineto_gen.write_large(d / "mid.json", MID_STEPS)
    shutil.copy(d / "mid.json", d / "mid_b.json")
    kineto_gen.write_large(d / "short.json", WHATIF_STEPS)
    (d / "ranks").mkdir()
    for rank in (0, 1):
        kineto_gen.write_large(d / "ranks" / f"rank-{rank}.json", RANK_STEPS, rank)
    (d / "job").mkdir()  # the job commands': the same ranks, an all-reduce in every step
    for rank in (0, 1):
        kineto_gen.write_large(d / "job" / f"rank-{rank}.json", JOB_STEPS, rank, collectives=True)
    shutil.copytree(d / "job", d / "job_b")  # diff --explain's side B
    nsys_large(shared_trace(SAXPY), d / "export.sqlite", NSYS_COPIES)
    return path


@pytest.fixture(scope="module")
def tmpdir_env(tmp_path_factory) -> dict[str, str]:
    """The runs' environment: their own $TMPDIR (spools, conversions), checked empty after."""
    return {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("signals_tmpdir"))}


def live_in_session(sid: int) -> list[str]:
    """Processes of the run's session still alive (zombies are dead: here no init reaps them)."""
    out = subprocess.run(["ps", "-s", str(sid), "-o", "pid=,stat="], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if "Z" not in line.split()[1]]


def interrupt(args: list[str], cwd: Path, after: float, sig: int = signal.SIGINT,
              env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """Start ``traceaug ARGS`` in its own session, send ``sig`` after ``after`` s; return
    (exit code, stderr, seconds from the signal to the exit)."""
    proc = subprocess.Popen([sys.executable, "-m", "traceaug", *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    handling(proc.pid)
    time.sleep(after)
    sent = time.perf_counter()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"{args} still running 15 s after the signal")
    took = time.perf_counter() - sent
    no_process_left(proc.pid, args)
    return proc.returncode, err, took


def _script(script: str, sig: int, cwd: Path, *on_path: Path,
            timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -c script SIG`` in ``cwd``, traceaug (and ``on_path``) importable: exit, stdout, stderr."""
    path = ":".join(str(p) for p in (*on_path, Path(__file__).parents[1]))
    return subprocess.run([sys.executable, "-c", script, str(int(sig))], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, "PYTHONPATH": path})


def handling(pid: int) -> None:
    """Wait until process ``pid`` catches SIGTERM: traceaug's handlers are in place. Before,
    Python itself is starting (some tens of ms, longer on a loaded machine), where no Python
    program can turn a signal into its own exit: the signals land after that point."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f)
        except OSError:  # gone already
            return
        if status["State"].split()[0] == "Z" or int(status["SigCgt"], 16) >> (signal.SIGTERM - 1) & 1:
            return
        time.sleep(0.002)


def no_process_left(sid: int, args: list[str]) -> None:
    deadline = time.monotonic() + 3
    while live_in_session(sid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_in_session(sid) == [], f"{args}: processes left after the exit"


# Every command that reads a trace, from the CLI's declarations (a new one is signalled without an
# edit): its declared line on INPUT's file (else mid.json), each output argument a file named after it,
# or its LINES where it needs more (diff's and report's pages, query's SQL); with its outputs. Then
# the other FORMS: a rank directory, a job. Not alone: open of a file (it serves the bytes unread until
# Ctrl-C: test_open.py), the job commands (collectives, stragglers, merge: their job forms).
INPUT = {"counters": "big.json", "info": "big.json", "whatif": "short.json", "convert": "export.sqlite"}
LINES = {"diff": (["diff", "mid.json", "mid_b.json", "--html", "r.html", "--trace", "m.json"],
                  ["r.html", "m.json"]),
         "report": (["report", "mid.json", "--html", "rep.html"], ["rep.html"]),
         "query": (["query", "mid.json", "SELECT COUNT(*) FROM slice"], [])}
NOT_ALONE = ("open", "collectives", "stragglers", "merge")


def _declared(name: str) -> tuple[list[str], list[str]]:
    """``name``'s line and outputs (NAME.DST.json; .json.gz for counters, which deflates)."""
    if name in LINES:
        return LINES[name]
    outs: list[str] = []
    args = declared_args(name, INPUT.get(name, "mid.json"), lambda p: outs.append(
        f"{name}.{p.name}.json{'.gz' * (name == 'counters')}") or outs[-1], as_json=False)
    return args, outs


SGLANG = "kineto/inference/sglang_decode"
FORMS = {"counters DIR": (["counters", "ranks", "c_out/"], ["c_out/"]),
         "critical-path DIR": (["critical-path", "ranks", "cp_out/"], ["cp_out/"]),
         "patterns DIR": (["patterns", "ranks", "pat_out/"], ["pat_out/"]),
         "collectives": (["collectives", "job"], []),
         "stragglers": (["stragglers", "job"], []),
         "merge": (["merge", "job", "merged.json"], ["merged.json"]),
         "critical-path --job": (["critical-path", "--job", "job", "cpj.json"], ["cpj.json"]),
         "whatif JOB": (["whatif", "--no-stragglers", "job"], []),
         "diff --explain": (["diff", "--explain", "job", "job_b", "--html", "x.html"], ["x.html"]),
         "open JOB": (["open", "job", "--no-browser"], []),
         # a serving step and its capture, read ahead in a thread (``graph_replay.read_ahead``)
         "report --capture": (["report", str(shared_trace(f"{SGLANG}/sglang_Qwen3-8B_decode.json.gz")),
                               "--capture", str(shared_trace(f"{SGLANG}/capture_traces"))], [])}
RUNS = {**{n: _declared(n) for n in trace_commands() if n not in NOT_ALONE}, **FORMS}
COMMANDS = {cmd: args for cmd, (args, _) in RUNS.items()}
OUTPUTS = {cmd: outs for cmd, (_, outs) in RUNS.items()}
# A server's whole run is its work before serving: the time of the command that does that work (its
# signals land in the work, and while it serves).
SERVES_AFTER = {"open JOB": "merge"}
SERVING = ("Perfetto UI with ", "Press Ctrl-C to stop.")
# Where in each command's run the signals land, as fractions of its uninterrupted run on this
# machine (measured first), from the moment its handlers are in place (one point past the middle
# unless given). SIGINT and SIGTERM take turns; from the middle on, the outputs already exist (an old
# version) and must come out unchanged.
GIVEN = {"counters": (0.05, 0.18, 0.33, 0.5, 0.95), "diff": (0.08, 0.25, 0.55, 0.9), "info": (0.3, 0.7),
         "critical-path": (0.3, 0.8), "patterns": (0.3, 0.8), "report": (0.3, 0.8), "convert": (0.3, 0.8),
         "counters DIR": (0.3, 0.8), "whatif": (0.3, 0.8), "collectives": (0.3, 0.7), "stragglers": (0.5,),
         "merge": (0.1, 0.55, 0.8), "critical-path --job": (0.3, 0.8), "whatif JOB": (0.5,),
         "open JOB": (0.4, 2.0), "report --capture": (0.15, 0.35, 0.5, 0.65, 0.8, 0.95)}
FRACTIONS = {cmd: GIVEN.get(cmd, (0.55,)) for cmd in COMMANDS}
RANK_NAMES = ("rank-0.json", "rank-1.json")  # what a rank-directory output holds


@pytest.fixture(scope="module")
def whole_run(big: Path, tmpdir_env: dict[str, str]) -> dict[str, float]:
    """Seconds each command takes uninterrupted here, at most ``WHOLE_RUN_CAP`` (a longer run
    is stopped there: every signal lands inside it anyway); its outputs removed after."""
    d, before = big.parent, set(os.listdir(big.parent))
    took = {}
    for cmd, args in COMMANDS.items():
        if cmd in SERVES_AFTER:
            continue
        proc = subprocess.Popen([sys.executable, "-m", "traceaug", *args], cwd=d, env=tmpdir_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        handling(proc.pid)
        start = time.perf_counter()
        try:
            assert proc.wait(timeout=WHOLE_RUN_CAP) == 0, f"{args} failed uninterrupted"
            for out in OUTPUTS[cmd]:  # the outputs the test expects are the ones it writes
                assert (d / out).is_dir() if out.endswith("/") else (d / out).is_file(), (cmd, out)
            for out in (o for o in OUTPUTS[cmd] if o.endswith("/")):
                assert sorted(os.listdir(d / out)) == list(RANK_NAMES), cmd
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        took[cmd] = min(time.perf_counter() - start, WHOLE_RUN_CAP)
        _remove_new(d, before)
        _clear(Path(tmpdir_env["TMPDIR"]))
    return {**took, **{cmd: took[work] for cmd, work in SERVES_AFTER.items()}}


def _remove_new(d: Path, before: set[str]) -> None:
    for name in set(os.listdir(d)) - before:
        if (d / name).is_dir():
            shutil.rmtree(d / name)
        else:
            (d / name).unlink()


def _clear(d: Path) -> None:
    for name in os.listdir(d):
        shutil.rmtree(d / name) if (d / name).is_dir() else (d / name).unlink()


def _put_old(d: Path, outputs: list[str]) -> None:
    """An old version of each output: a file of ``OLD``; a rank directory of such files."""
    for out in outputs:
        if out.endswith("/"):
            (d / out).mkdir()
            for name in RANK_NAMES:
                (d / out / name).write_bytes(OLD)
        else:
            (d / out).write_bytes(OLD)


def _state(d: Path) -> dict[str, object]:
    """Every file and directory under ``d``: small files by content, big ones (the inputs) by
    size and modification time."""
    state: dict[str, object] = {}
    for path in sorted(d.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(d))
        if path.is_dir():
            state[rel + "/"] = None
        else:
            state[rel] = path.read_bytes() if st.st_size < 1 << 20 else (st.st_size, st.st_mtime_ns)
    return state


def test_signals_at_many_points_of_every_command(
        big: Path, whole_run: dict[str, float], tmpdir_env: dict[str, str]) -> None:
    d, temp = big.parent, Path(tmpdir_env["TMPDIR"])
    baseline = set(os.listdir(d))
    crashed, interrupted, took_s = [], {cmd: 0 for cmd in COMMANDS}, []
    terminated = {cmd: 0 for cmd in COMMANDS}  # of those, by SIGTERM (exit 143)

    def once(cmd: str, fraction: float, sig: int) -> None:
        """One run of ``cmd`` signalled at ``fraction`` of its whole run, judged; a run that
        ended before the signal (the machine got faster) is tried again, earlier."""
        for earlier in (1, 0.5, 0.25):
            if fraction >= 0.5:
                _put_old(d, OUTPUTS[cmd])
            before = _state(d)
            at = fraction * earlier * whole_run[cmd]
            code, err, took = interrupt(COMMANDS[cmd], d, at, sig, tmpdir_env)
            if code != 0:
                break
            _remove_new(d, baseline)
            _clear(temp)
        else:
            return
        where = (cmd, fraction, round(at, 2), signal.Signals(sig).name)
        if cmd in SERVES_AFTER:  # what it said once it serves, before the signal
            err = "".join(line for line in err.splitlines(True) if not line.startswith(SERVING))
        if (code, err) != (128 + sig, "traceaug: interrupted\n"):
            crashed.append((*where, code, err[-300:]))
        else:
            interrupted[cmd] += 1
            terminated[cmd] += sig == signal.SIGTERM
        after = _state(d)
        assert after == before, (where, sorted(set(after) ^ set(before)),  # no output, no temp
                                 [k for k in before if after.get(k, k) != before[k]])  # file
        assert os.listdir(temp) == [], (where, os.listdir(temp))
        took_s.append(took)
        assert took < 5, (where, took)  # typically 0.1 s; slack for a loaded machine
        _remove_new(d, baseline)

    points = [(cmd, fraction) for cmd, fractions in FRACTIONS.items() for fraction in fractions]
    for i, (cmd, fraction) in enumerate(points):  # (in turns over every point: one-point commands too)
        once(cmd, fraction, signal.SIGTERM if i % 2 else signal.SIGINT)
    assert crashed == []
    assert sum(interrupted.values()) >= 0.8 * len(points), str(interrupted)  # they landed mid-run
    assert all(interrupted[cmd] >= 1 for cmd in COMMANDS), str(interrupted)
    assert terminated["counters"] >= 1, str(terminated)  # SIGTERM: 143, no output, as Ctrl-C
    print(f"exit after the signal: median {sorted(took_s)[len(took_s) // 2]:.2f} s, "
          f"max {max(took_s):.2f} s over {len(took_s)} runs")


# A signal in the commit itself: right after the run's n-th rename that touches one of its
# outputs (a temporary file put in place, or an old version moved aside). Timing cannot hit
# that window (microseconds); the signal is sent from inside the process at that moment.
AT_RENAME = """
import os, signal, sys
names, nth, sig = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
sys.argv = ["traceaug", *sys.argv[4:]]
seen = [0]

def hook(real):
    def rename(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        if any(n in os.path.basename(os.fspath(p)) for p in (src, dst) for n in names):
            seen[0] += 1
            if seen[0] == nth:
                os.kill(os.getpid(), sig)
    return rename

os.replace, os.rename = hook(os.replace), hook(os.rename)
from traceaug.__main__ import main
main()
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("signals_commit")
    kineto_gen.write_large(d / "a.json", 50)
    kineto_gen.write_large(d / "b.json", 60)
    (d / "ranks").mkdir()
    for rank in (0, 1):
        kineto_gen.write_large(d / "ranks" / f"rank-{rank}.json", 40, rank)
    return d


DIFF = ["diff", "a.json", "b.json", "--html", "r.html", "--trace", "m.json"]


@pytest.mark.parametrize("args, old, nth, sig", [
    (["counters", "a.json", "out.json"], True, 1, signal.SIGINT),
    (DIFF, True, 1, signal.SIGINT),
    (DIFF, True, 2, signal.SIGTERM),
    (DIFF, False, 1, signal.SIGTERM),
    (["counters", "ranks", "out/"], True, 1, signal.SIGTERM),
    (["counters", "ranks", "out/"], False, 1, signal.SIGINT),
    (["merge", "ranks", "out.json"], True, 1, signal.SIGTERM),
    (["merge", "ranks", "out.json"], False, 1, signal.SIGINT),
    (["critical-path", "--job", "ranks", "out.json"], True, 1, signal.SIGINT),
], ids=["counters", "diff-after-1st", "diff-after-2nd", "diff-new", "counters-DIR", "counters-new-DIR",
        "merge", "merge-new", "critical-path-job"])
def test_signal_in_the_commit(small: Path, tmpdir_env: dict[str, str], args: list[str], old: bool,
                              nth: int, sig: int) -> None:
    """Ctrl-C / SIGTERM in the middle of the commit (after its ``nth`` rename): the run says
    it was interrupted, and its outputs are as before it: every old one still there,
    unchanged (``old``), or none at all (not even the rank directory it made)."""
    d = small
    outputs = [a for a in args if a in ("out.json", "r.html", "m.json", "out/")]
    if old:
        _put_old(d, outputs)
    names = [*(o for o in outputs if not o.endswith("/")), *(RANK_NAMES if "out/" in outputs else ())]
    before = _state(d)
    proc = subprocess.Popen([sys.executable, "-c", AT_RENAME, ",".join(names), str(nth), str(int(sig)),
                             *args], cwd=d, env=tmpdir_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    _, err = proc.communicate(timeout=120)
    try:
        no_process_left(proc.pid, args)
        assert proc.returncode == 128 + sig and err.endswith("traceaug: interrupted\n"), err
        assert "Traceback" not in err and "Exception" not in err, err  # ("wrote OUT" is said
        after = _state(d)  # before the commit: the run's work was done)
        assert after == before, (sorted(set(after) ^ set(before)),
                                 {k: after.get(k) for k in before if after.get(k, k) != before[k]})
        assert os.listdir(tmpdir_env["TMPDIR"]) == []
    finally:
        _remove_new(d, {"a.json", "b.json", "ranks"})
        _clear(Path(tmpdir_env["TMPDIR"]))


BEFORE_A_THREAD = """
import os, sys
sig, sys.argv = int(sys.argv[1]), ["traceaug", *sys.argv[2:]]

def send(frame, event, arg):  # the signal lands as ``started`` is called: its thread made, never started
    if event == "call" and frame.f_code.co_name == "started" and frame.f_back.f_code.co_name == OWNER:
        sys.settrace(None)
        os.kill(os.getpid(), sig)
    return None

sys.settrace(send)
from traceaug.__main__ import main
main()
"""


@pytest.mark.parametrize("owner, sig", [("prepare", signal.SIGINT), ("__init__", signal.SIGTERM)])
def test_a_signal_before_a_rewriters_thread_starts(small: Path, tmpdir_env: dict[str, str], owner: str,
                                                   sig: int) -> None:
    """A signal after a rewriter made its thread but before it started it (the UI edits' thread, the
    gzip body's): the run says it was interrupted in one line and writes nothing; cleanup joined the
    thread that never ran ("cannot join thread before it is started" and a traceback)."""
    d = small
    before = _state(d)
    script = BEFORE_A_THREAD.replace("OWNER", repr(owner))
    proc = subprocess.run([sys.executable, "-c", script, str(int(sig)), "counters", "a.json", "out.json.gz"],
                          cwd=d, env=tmpdir_env, capture_output=True, text=True, timeout=120)
    try:
        assert (proc.returncode, proc.stderr) == (128 + sig, "traceaug: interrupted\n")
        assert _state(d) == before and os.listdir(tmpdir_env["TMPDIR"]) == []
    finally:
        _remove_new(d, {"a.json", "b.json", "ranks"})
        _clear(Path(tmpdir_env["TMPDIR"]))


URL_JOB_STEPS = 600  # each rank's steps: every job command runs over 1.5 s on the 2-rank job
URL_SIGNALS = ((0.2, signal.SIGINT), (0.7, signal.SIGTERM))  # s after the handlers: listing, loading


@pytest.fixture(scope="module")
def url_job(s3: S3, tmp_path_factory) -> str:
    """A 2-rank generated job (``jobgen``) under s3://bucket/sigjob/."""
    local = jobgen.write(tmp_path_factory.mktemp("url_job"), jobgen.job(2, 1, 50, steps=URL_JOB_STEPS))
    for f in local.iterdir():
        s3.fs.put(str(f), f"bucket/sigjob/{f.name}")
    return "s3://bucket/sigjob/"


@pytest.mark.parametrize("name", url_job_commands())
def test_a_signal_in_every_job_command_on_a_url_job(s3: S3, url_job: str, tmp_path: Path,
                                                     name: str) -> None:
    """Issue 39's done-when: every command that reads jobs, as the CLI declares it, on an s3:// job
    (moto's server), its outputs s3:// too, stopped by Ctrl-C / SIGTERM early and mid-run: exit 130 /
    143 with one line, no object or multipart upload written, nothing left in $TMPDIR, no process."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**s3.env, "TMPDIR": str(temp)}
    stopped = 0
    for i, (at, sig) in enumerate(URL_SIGNALS):
        out = f"s3://bucket/sig-out/{name}/{i}"
        code, err, took = interrupt(url_job_args(name, url_job, out, s3.endpoint), tmp_path, at, sig, env)
        if code == 0:  # ended before the signal (a fast machine)
            continue
        stopped += 1
        assert (code, err) == (128 + sig, "traceaug: interrupted\n"), (at, err)
        assert took < 5, (at, took)
        assert s3.fs.find(out.removeprefix("s3://")) == [], at
        assert os.listdir(temp) == [], (at, os.listdir(temp))
    assert stopped >= 1, name
    assert s3.fs.list_multipart_uploads("bucket") == []


# ``traceaug ARGV[2:]`` with signal ARGV[1] sent once the commit is done: as the first old version is
# removed (``.NAME.….old``), or as the run's temporary files are (``paths.cleanup``).
AFTER_THE_COMMIT = """
import os, sys
from traceaug import paths
sig, where, sys.argv = int(sys.argv[1]), sys.argv[2], ["traceaug", *sys.argv[3:]]
unlink, cleanup, sent = os.unlink, paths.cleanup, []

def signal_once():
    if not sent:
        sent.append(os.kill(os.getpid(), sig))

def unlink_then_signal(path, *args, **kwargs):
    unlink(path, *args, **kwargs)
    if str(path).endswith(".old"):
        signal_once()

def signal_then_cleanup():
    signal_once()
    cleanup()

if where == "old":
    os.unlink = unlink_then_signal
else:
    paths.cleanup = signal_then_cleanup
from traceaug.__main__ import main
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("where, args, said", [
    ("old", DIFF, "wrote r.html\nwrote m.json\n"),
    ("cleanup", ["merge", "ranks", "out.json"], "wrote out.json (2 ranks, 0 cross-rank arrows)\n")])
def test_a_signal_once_the_commit_is_done(small: Path, tmpdir_env: dict[str, str], where: str,
                                          args: list[str], said: str, sig: int) -> None:
    """Item 12: the outputs in place, a signal as the old versions were removed ended the run 130 / 143
    "interrupted", with nothing said written and an old version left beside its output (``.r.html.….old``);
    one in the final cleanup got click's "Aborted!", exit 1, after "wrote". The run is done: it says what
    it wrote, exits 0, leaves nothing."""
    d = small
    outputs = [a for a in args if a in ("out.json", "r.html", "m.json")]
    _put_old(d, outputs)
    try:
        proc = subprocess.run([sys.executable, "-c", AFTER_THE_COMMIT, str(int(sig)), where, *args],
                              cwd=d, env=tmpdir_env, capture_output=True, text=True, timeout=120)
        assert (proc.returncode, proc.stderr) == (0, said)
        assert sorted(os.listdir(d)) == sorted(["a.json", "b.json", "ranks", *outputs])
        assert all((d / o).read_bytes() != OLD for o in outputs)
        assert os.listdir(tmpdir_env["TMPDIR"]) == []
    finally:
        _remove_new(d, {"a.json", "b.json", "ranks"})
        _clear(Path(tmpdir_env["TMPDIR"]))


def test_ctrl_c_stops_a_long_query_within_a_second(tmp_path: Path) -> None:
    trace = kineto_gen.write(tmp_path / "t.json", kineto_gen.trace())
    sql = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000) "
           "SELECT SUM(x) FROM c")
    code, err, took = interrupt(["query", trace.name, sql], tmp_path, 3.0)
    assert (code, err) == (130, "traceaug: interrupted\n")
    assert took < 1.0


FORK_WITH_A_SIGNAL = """
import os, signal, sys
from traceaug import interrupt, processes
interrupt.install(command_line=True)
sig = int(sys.argv[1])
# The signal lands while Python runs its at-fork callbacks in the parent (logging's
# _releaseLock is one): the moment a Ctrl-C ~0.3 s into `counters` hit 4 times in 200.
os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), sig))
try:
    child = processes.fork(lambda _, out: out.write(b"done"))
    print("not interrupted")
except interrupt.Interrupted as e:
    print("interrupted", e.exit_code)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_workers_fork_is_no_ignored_exception(tmp_path: Path, sig: int) -> None:
    """A signal during a fork's at-fork callbacks is held until the fork is done, then stops
    the command as anywhere else: no "Exception ignored in: <function _releaseLock>"."""
    proc = _script(FORK_WITH_A_SIGNAL, sig, tmp_path)
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["interrupted", str(128 + sig)], (proc.stdout, proc.stderr)


POOL_FORK_WITH_A_SIGNAL = """
import os, sys
from traceaug import interrupt
from traceaug.job.executor import LocalPool
interrupt.install(command_line=True)
sig = int(sys.argv[1])
os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), sig))
pool = None
try:
    pool = LocalPool(1)  # the pool forks its worker here
    pool.submit(abs, -1)
    print("not interrupted")
except interrupt.Interrupted as e:
    print("interrupted", e.exit_code)
finally:
    if pool is not None:
        pool.close(cancel=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_job_pool_forks_is_no_ignored_exception(tmp_path: Path, sig: int) -> None:
    """The job's local pool forks its workers: a signal in the at-fork callbacks was
    "Exception ignored in: <function _releaseLock>" and a traceback (`patterns DIR` in a CI run
    of the many-points test). Held until the fork is done, then raised."""
    proc = _script(POOL_FORK_WITH_A_SIGNAL, sig, tmp_path)
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["interrupted", str(128 + sig)], (proc.stdout, proc.stderr)


WAIT_WITH_A_SIGNAL = """
import concurrent.futures._base as base, os, sys, time
from traceaug import interrupt
from traceaug.job.executor import LocalPool
interrupt.install(command_line=True)
sig = int(sys.argv[1])
sent = []

def signalled(self):  # cf.wait takes each future's lock: the signal lands once it holds the first
    futures = list(self.futures)
    futures[0]._condition.acquire()
    if not sent:
        sent.append(os.kill(os.getpid(), sig))
    for f in futures[1:]:
        f._condition.acquire()

base._AcquireFutures.__enter__ = signalled
pool = LocalPool(2)
futures = [pool.submit(time.sleep, 0.5) for _ in range(4)]
try:
    pool.wait(futures)
    print("not interrupted")
except interrupt.Interrupted as e:
    pool.close(cancel=True)  # as job.run does: the children killed, the pool shut down
    print("interrupted", e.exit_code)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_job_waits_for_its_ranks_never_hangs(tmp_path: Path, sig: int) -> None:
    """Issue 39 item 9: a Ctrl-C landing while the job's wait held a future's lock left it held; the
    pool's reader thread setting that future waited on it, the shutdown joining the reader waited
    forever (parent in a futex wait, its children zombies). The signal is sent from inside the wait:
    the moment lasts microseconds (1 run in ~190 hit it)."""
    proc = _script(WAIT_WITH_A_SIGNAL, sig, tmp_path, timeout=30)
    assert proc.stdout.split() == ["interrupted", str(128 + sig)], (proc.stdout, proc.stderr)
    assert proc.stderr == ""


CLOSE_WITH_A_SIGNAL = """
import gc, os, signal, sys, time
from traceaug import interrupt, processes
interrupt.install(command_line=True)
sig = int(sys.argv[1])
pool = processes.Pool(1, spawn=True)
real_kill = pool.kill

def kill():  # the signal lands while the pool closes (inside the garbage collector's close)
    os.kill(os.getpid(), sig)
    time.sleep(0.1)
    real_kill()

pool.kill = kill

def reading():  # as pass 1 reads: its pool closes when the generator is dropped
    with pool:
        pool.submit(time.sleep, 5)  # a task still running when the pool closes
        yield 1
        yield 2

gen = reading()
next(gen)
try:
    del gen  # the garbage collector closes it
    gc.collect()
    print("closed", all(c.poll() is not None for c in pool.children))
    interrupt.check()
    print("not interrupted")
except interrupt.Interrupted as e:
    print("interrupted", e.exit_code)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_dropped_reader_closes_its_pool_is_no_ignored_exception(
        tmp_path: Path, sig: int) -> None:
    """A signal while a pass-1 pool closes from a dropped generator (the garbage collector
    runs the close): raised inside the close it was "Exception ignored in <generator>" and a
    traceback (1 of 2 signal-test runs with pass-1 workers). The children are killed, the pool
    closes, and the command stops at its next check."""
    proc = _script(CLOSE_WITH_A_SIGNAL, sig, tmp_path)
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["closed", "True", "interrupted", str(128 + sig)], \
        (proc.stdout, proc.stderr)


DESCRIPTOR_MODULE = """
import os, signal, sys

class Named:
    def __set_name__(self, owner, name):  # a signal here (dataclasses' fields do this)
        os.kill(os.getpid(), int(sys.argv[1]))
        self.name = name

class Made:
    field = Named()
"""
IMPORT_WITH_A_SIGNAL = """
import sys, time
from traceaug import interrupt
interrupt.install(command_line=True)
try:
    import made_with_a_signal
    time.sleep(5)
    print("not interrupted")
except interrupt.Interrupted as e:
    print("interrupted", e.exit_code, made_with_a_signal.Made.field.name)
except RuntimeError as e:
    print("RuntimeError", e)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_inside_an_import_stops_the_command_after_it(tmp_path: Path, sig: int) -> None:
    """A signal while a module is imported (a lazy import mid-command) lands in a class's
    ``__set_name__``: raised there it became ``RuntimeError: Error calling __set_name__`` and a
    traceback (2 of 200 Ctrl-C's into `counters`). It now stops the command once the import
    is done."""
    (tmp_path / "made_with_a_signal.py").write_text(DESCRIPTOR_MODULE)
    proc = _script(IMPORT_WITH_A_SIGNAL, sig, tmp_path, tmp_path)
    assert proc.stdout.split() == ["interrupted", str(128 + sig), "field"], (proc.stdout, proc.stderr)
    assert proc.stderr == ""


IMPORTS = """
import runpy, signal, sys

class Watch:  # says, for each module imported from here on, whether SIGTERM is caught yet
    def find_spec(self, name, path=None, target=None):
        print(repr((name, signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL)), flush=True)

sys.meta_path.insert(0, Watch())
sys.argv = ["traceaug", "--version"]
runpy.run_module("traceaug", run_name="__main__", alter_sys=True)  # as python -m traceaug
"""


def test_handlers_are_in_place_before_traceaug_imports_its_modules() -> None:
    """A signal while the command line imports ends it with one line, not a traceback: the
    handlers are set before any module of traceaug but the one setting them (and what it
    needs) loads; before, ``threading`` and ``weakref`` loaded first (a signal 0.3 s into
    ``report`` got a KeyboardInterrupt traceback from ``import threading``)."""
    res = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    seen = [eval(line) for line in res.stdout.splitlines() if line.startswith("(")]  # noqa: S307
    before = [name for name, caught in seen if not caught]
    assert len(seen) > 20 and "traceaug.cli" in [n for n, _ in seen], seen
    assert all(name in ("traceaug", "traceaug.__main__", "traceaug.startup") for name in before), \
        before


FINALIZER_WITH_A_SIGNAL = """
import gc, os, sys, time
import wasmtime
from traceaug import interrupt
interrupt.install(command_line=True)
sig = int(sys.argv[1])

def send_in_the_finalizer(frame, event, arg):  # the signal lands inside wasmtime's ctypes callback
    if event == "call" and frame.f_code.co_name == "deallocate":
        os.kill(os.getpid(), sig)
    return None

store = wasmtime.Store()
func = wasmtime.Func(store, wasmtime.FuncType([], []), lambda: None)
sys.settrace(send_in_the_finalizer)
try:
    del func, store
    gc.collect()
    sys.settrace(None)
    time.sleep(5)
    print("not interrupted")
except interrupt.Interrupted as e:
    print("interrupted", e.exit_code)
"""


WEAKREF_CALLBACK_WITH_A_SIGNAL = """
import os, sys, weakref
from traceaug import interrupt
interrupt.install(command_line=True)
sig = int(sys.argv[1])

class Value:
    pass

def send_in_the_callback(frame, event, arg):  # the signal lands inside the dictionary's weakref callback
    if event == "call" and frame.f_code.co_name == "remove" and frame.f_code.co_filename == weakref.__file__:
        os.kill(os.getpid(), sig)
    return None

values = weakref.WeakValueDictionary()
value = values["a"] = Value()
sys.settrace(send_in_the_callback)
try:
    del value
    sys.settrace(None)
    interrupt.check()  # (a loop's, or an engine call's after it traps)
    print("not interrupted")
except interrupt.Interrupted as e:
    print("interrupted", e.exit_code)
"""


DEL_WITH_A_SIGNAL = """
import os, sys
from traceaug import interrupt
interrupt.install(command_line=True)
sig = int(sys.argv[1])

class Closer:  # any object's finalizer, where Python cannot pass an exception on
    def __del__(self):
        os.kill(os.getpid(), sig)
        sum(range(100))

closer = Closer()
try:
    del closer
    interrupt.check()  # (a loop's, or an engine call's after it traps)
    print("not interrupted")
except interrupt.Interrupted as e:
    print("interrupted", e.exit_code)
"""


STARTING_WITH_A_SIGNAL = """
import os, sys, threading, traceback
from traceaug import interrupt
interrupt.install(command_line=True)
sig = int(sys.argv[1])

def send_in_start(frame, event, arg):  # the signal lands while start() waits for the new thread to run
    if event == "call" and frame.f_code.co_name == "wait" and frame.f_back.f_code.co_name == "start":
        os.kill(os.getpid(), sig)
    return None

go = threading.Event()
thread = threading.Thread(target=go.wait)
sys.settrace(send_in_start)
try:
    interrupt.started(thread)
    print("not interrupted")
except interrupt.Interrupted as e:
    sys.settrace(None)
    go.set()
    thread.join()
    print("interrupted", e.exit_code, traceback.extract_tb(e.__traceback__)[-1].name)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_thread_starts_leaves_a_thread_to_join(tmp_path: Path, sig: int) -> None:
    """A signal while ``Thread.start`` waits for the new thread raised inside it, and the caller's cleanup
    joining that thread failed: "RuntimeError: cannot join thread before it is started" and a traceback
    (SIGINT 0.24 s into `serving`, the rewriter's gzip thread). ``interrupt.started`` raises after start."""
    proc = _script(STARTING_WITH_A_SIGNAL, sig, tmp_path)
    assert proc.stderr == ""
    assert proc.stdout.split() == ["interrupted", str(128 + sig), "check"], (proc.stdout, proc.stderr)


FEED_JOIN_WITH_A_SIGNAL = """
import os, sys, threading, time
import traceaug
from traceaug import interrupt
from traceaug.engine import backend
interrupt.install(command_line=True)
sig = int(sys.argv[1])
parse = backend.WasmBackend.parse
def slow_parse(self, chunk):  # the worker is still parsing when the load waits for it
    time.sleep(0.3)
    return parse(self, chunk)
backend.WasmBackend.parse = slow_parse
join = threading.Thread.join
def join_with_a_signal(self, *args, **kwargs):  # the signal lands as the load waits for its feed worker
    if self.name == "traceaug-feed":
        os.kill(os.getpid(), sig)
    return join(self, *args, **kwargs)
threading.Thread.join = join_with_a_signal
close = backend.TraceProcessor.close
def reporting_close(self):
    alive = any(t.name == "traceaug-feed" and t.is_alive() for t in threading.enumerate())
    print("worker alive at close:", alive)
    return close(self)
backend.TraceProcessor.close = reporting_close
try:
    traceaug.load("t.json")
    print("not interrupted")
except interrupt.Interrupted as e:
    print("interrupted", e.exit_code)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_load_waits_for_its_feed_worker(tmp_path: Path, sig: int) -> None:
    """A signal as the load waits for the thread feeding the engine raised inside that wait: the load closed
    the engine under a parse still running, which wrote into freed memory (SIGSEGV, about one run in 700 of
    a signal 0.02-0.32 s into a serving command). The wait ends first, then the signal raises."""
    kineto_gen.write_large(tmp_path / "t.json", 200)
    proc = _script(FEED_JOIN_WITH_A_SIGNAL, sig, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["worker alive at close: False", f"interrupted {128 + sig}"], \
        (proc.stdout, proc.stderr)


THREADS_LEFT_WITH_A_SIGNAL = """
import os, sys, threading, time
from traceaug import interrupt
from traceaug.processes import Threads
interrupt.install(command_line=True)
sig, done = int(sys.argv[1]), []
join = threading.Thread.join
def join_with_a_signal(self, *args, **kwargs):  # a second signal as the pool waits for its task
    os.kill(os.getpid(), sig)
    return join(self, *args, **kwargs)
try:
    with Threads(1) as pool:
        pool.submit(lambda: time.sleep(0.3) or done.append(1))
        threading.Thread.join = join_with_a_signal
        os.kill(os.getpid(), sig)  # the first: raised in the block
except interrupt.Interrupted as e:
    print("task done when the block was left:", bool(done), e.exit_code)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_thread_pool_block_is_left_after_its_tasks_whatever_signals_come(tmp_path: Path, sig: int) -> None:
    """A second signal as a ``Threads`` block waits for its tasks cut the wait short: the caller went on
    (``diff`` closing both traces) while a task still used one (``Side.of``'s queries): SIGSEGV. The wait
    ends first."""
    proc = _script(THREADS_LEFT_WITH_A_SIGNAL, sig, tmp_path)
    assert proc.stdout.split() == ["task", "done", "when", "the", "block", "was", "left:", "True",
                                   str(128 + sig)], (proc.stdout, proc.stderr)


# Where Python cannot pass an exception on, a script sending a signal there and what it prints after.
CANNOT_RAISE = {
    # wasmtime frees a host function through a ctypes callback run by the garbage collector: "Exception
    # ignored on calling ctypes callback function" and a traceback (counters SIGINT at 0.95 s in a CI run)
    "engine finalizer": (FINALIZER_WITH_A_SIGNAL, []),
    # a WeakValueDictionary drops an entry: "Exception ignored in" (SIGTERM 0.7 s into `efficiency` on an
    # s3:// job, a CI run); the stop stays requested: the next check raises it
    "weakref callback": (WEAKREF_CALLBACK_WITH_A_SIGNAL, []),
    # any object's ``__del__``
    "finalizer": (DEL_WITH_A_SIGNAL, []),
}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("where", list(CANNOT_RAISE))
def test_a_signal_where_python_cannot_raise_is_no_ignored_exception(tmp_path: Path, where: str,
                                                                     sig: int) -> None:
    """A signal in a callback Python runs without passing its exception on is no "Exception ignored" and
    no traceback: the command stops once the callback has returned (wasmtime's: the signal comes again;
    any other: the next check raises it)."""
    script, after = CANNOT_RAISE[where]
    proc = _script(script, sig, tmp_path)
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["interrupted", str(128 + sig), *after], (proc.stdout, proc.stderr)


# ``traceaug ARGV[2:]`` (mcp) with signal ARGV[1] sent from inside once its stdio server has opened its
# streams, its event loop running: a moment a signal from outside cannot pick.
AT_SERVER_START = """
import contextlib, os, sys
import mcp.server.stdio as stdio
sig, sys.argv, real = int(sys.argv[1]), ["traceaug", *sys.argv[2:]], stdio.stdio_server

@contextlib.asynccontextmanager
async def signalled(*args, **kwargs):
    async with real(*args, **kwargs) as streams:
        os.kill(os.getpid(), sig)
        yield streams

stdio.stdio_server = signalled
from traceaug.cli import run
run()
"""
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "0"}}}


@pytest.mark.parametrize("when, sig", [("starting", signal.SIGINT), ("serving", signal.SIGTERM)])
def test_a_signal_stops_the_mcp_server(tmp_path: Path, when: str, sig: int) -> None:
    """mcp, a server on stdin / stdout (not among the commands above: it reads no trace), stopped by
    Ctrl-C / SIGTERM as its server starts or once it has answered the client's initialize: exit 130 / 143
    in one line, no process left. As it started it exited 0 saying nothing, or printed anyio's exception
    group of the signal."""
    import json

    pytest.importorskip("mcp")
    argv = ["mcp", "--root", str(tmp_path)]
    command = [sys.executable, "-c", AT_SERVER_START, str(int(sig)), *argv] if when == "starting" else \
        [sys.executable, "-m", "traceaug", *argv]
    proc = subprocess.Popen(command, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        if when == "serving":
            proc.stdin.write(json.dumps(INITIALIZE) + "\n")
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline())["id"] == 1
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    no_process_left(proc.pid, argv)
    assert (proc.returncode, err) == (128 + sig, "traceaug: interrupted\n")


SCRATCH_WITH_A_SIGNAL = """
import os, sys, tempfile
from traceaug import atomic, interrupt
interrupt.install(command_line=True)
sig, rmdir, tempfile.tempdir = int(sys.argv[1]), os.rmdir, os.getcwd()  # (the test's own directory)

def signalled(path, *args, **kwargs):  # the signal lands as the directory is removed, its files gone
    if os.path.basename(path).startswith("traceaug-"):  # (not a directory inside it: Dask's own)
        os.kill(os.getpid(), sig)
    rmdir(path, *args, **kwargs)

os.rmdir = signalled
try:
    if HOW == "scratch":
        with atomic.scratch("traceaug-test-") as d:
            (d / "merged.json").write_text("{}")
    elif HOW == "diff temporary":  # diff --open / --side-by-side's: made in compute_all, dropped after show
        from traceaug.commands import diff
        call = {"temporary": atomic.scratch_dir("traceaug-diff-")}
        d = call["temporary"]
        (d / "diff.json.gz").write_text("{}")
        diff._drop_temporary(call)
    elif HOW == "fetch":  # an object's local copy (a rank on object storage), removed after its read
        import fsspec
        from traceaug.read import storage
        with fsspec.open("memory://bucket/rank0.json", "wb") as f:
            f.write(b"{}")
        with storage.local_copy("memory://bucket/rank0.json") as local:
            d = local.parent
    elif HOW == "dask scratch":  # the LocalCluster --workers starts: its scratch removed as it closes
        from traceaug.job import executor
        local = executor._Local(1)
        d = local.scratch
        local.close()
    else:  # an export left with a hot journal: read in a private copy, removed as the export closes
        from pathlib import Path
        from traceaug.read import nsys
        Path("x.sqlite").write_bytes(b"SQLite format 3")
        Path("x.sqlite-journal").write_bytes(nsys.UNFINISHED[0][1])
        export = nsys.Export.__new__(nsys.Export)  # (its SQLite connection is not what is tested)
        export.path, export.copy_dir = Path("x.sqlite"), None
        export._uri()
        d = export.copy_dir
        export.close()
    print("not interrupted")
except interrupt.Interrupted as e:
    print("interrupted", e.exit_code)
print("left", os.path.exists(d))
"""


@pytest.mark.parametrize("how", ["scratch", "diff temporary", "fetch", "export copy", "dask scratch"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_a_scratch_directory_is_removed_leaves_none(tmp_path: Path, sig: int, how: str) -> None:
    """A run's intermediate directory (``atomic.scratch``: diff's and merge's merged trace, open's, an
    object's local copy; diff ``--open``'s temporary, kept until served; an unfinished export's copy; the
    scratch space of a LocalCluster) is removed whole when a signal lands inside its removal (a Ctrl-C
    there left ``traceaug-diff-…`` in $TMPDIR, 1 of the signal tests' runs), and the run stops after."""
    proc = _script(f"HOW = {how!r}\n{SCRATCH_WITH_A_SIGNAL}", sig, tmp_path)
    assert proc.stdout.split() == ["interrupted", str(128 + sig), "left", "False"], (proc.stdout, proc.stderr)


# A signal landing after the command's work, as the run's exit starts ignoring signals: sent from inside
# the first of those ``signal.signal(..., SIG_IGN)`` calls, before it takes effect.
SIGNAL_AS_THE_EXIT_IGNORES_SIGNALS = """
import os, signal, sys
sig, original, sent = int(sys.argv[1]), signal.signal, []

def ignoring(signum, handler):
    if handler is signal.SIG_IGN and not sent:
        sent.append(os.kill(os.getpid(), sig))
    return original(signum, handler)

signal.signal = ignoring
sys.argv = ["traceaug", "info", sys.argv[2]]
from traceaug.__main__ import main
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_the_finished_run_exits_is_no_traceback(tmp_path: Path, sig: int) -> None:
    """A signal after the command's work is done, just before the exit ignores signals (1 run of
    ``test_signals_at_many_points_of_every_command``: whatif, SIGTERM at 0.8 of its run, exit 1 and a
    traceback): the run is over, so it stops nothing: the command's own exit and output, nothing on
    stderr."""
    trace = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    proc = _script(SIGNAL_AS_THE_EXIT_IGNORES_SIGNALS.replace("sys.argv[2]", repr(str(trace))), sig, tmp_path)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr[-2000:]
    assert trace.name in proc.stdout


# A signal as a run spools an input read once (stdin): sent right after the spool directory is made, before
# mkdtemp returns it.
SIGNAL_AS_A_SPOOL_IS_MADE = """
import os, sys, tempfile
sig, mkdtemp, tempfile.tempdir = int(sys.argv[1]), tempfile.mkdtemp, os.getcwd()  # (the test's own directory)
os.dup2(os.open(TRACE, os.O_RDONLY), 0)  # stdin: the trace

def signalled(*args, prefix=None, **kwargs):
    made = mkdtemp(*args, prefix=prefix, **kwargs)
    if prefix == "traceaug-spool-":
        os.kill(os.getpid(), sig)
    return made

tempfile.mkdtemp = signalled
sys.argv = ["traceaug", "info", "-"]
from traceaug.__main__ import main
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_stdin_is_spooled_leaves_no_spool(tmp_path: Path, sig: int) -> None:
    """A signal landing as the directory for stdin's copy is made, before the run lists it for removal:
    exit 130 / 143 with one line, nothing left in $TMPDIR (the directory was left)."""
    trace = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    proc = _script(f"TRACE = {str(trace)!r}\n{SIGNAL_AS_A_SPOOL_IS_MADE}", sig, tmp_path)
    assert (proc.returncode, proc.stderr) == (128 + sig, "traceaug: interrupted\n"), proc.stderr[-2000:]
    assert os.listdir(tmp_path) == []

