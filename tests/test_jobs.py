"""Jobs (issue 25): a directory of ranks through the job executor, locally and on a real
Dask cluster (a scheduler and two workers, each a process of its own); failures said by rank;
unreadable rank files named (24.22); ``info DIR`` one row per rank; ``load_job`` reading each
rank once.

The oracle for the local pool is each rank's file run alone (the single-file path, in this
process, no pool) and the raw JSON; the Dask cluster's output must equal the pool's byte
for byte, outputs written included, and the cluster's workers must have run every rank's task
(their own count of the tasks they ran, asked by a client of its own).

Nothing here starts Dask in this process: a Dask client leaves threads behind that never end
(its event loop, "Dask-Offload_0"), and with another thread alive traceaug rightly stops
forking its children (``processes.can_fork``), which other modules' tests assert. Every
command that talks to Dask runs as ``python -m traceaug``; the local pool's runs stay here.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import other_threads, run_cli, shared_trace, url_job_args, url_job_commands

from traceaug import processes
from traceaug.cli import main
from traceaug.job import executor as ex
from traceaug.job import parts
from traceaug.job import run as job_run

JOB = "kineto/jobs/dlrm_v100_8ranks"
WORKERS = 2  # the cluster's worker processes, one thread each


def _files(d: Path) -> dict[int, Path]:
    """Rank -> file of the DLRM job, from its raw JSON's distributedInfo (not traceaug's)."""
    out = {}
    for f in sorted(d.glob("*.json.gz")):
        with gzip.open(f) as g:
            out[json.load(g)["distributedInfo"]["rank"]] = f
    return out


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


# A client of its own, in a process of its own, that waits for the workers, then, for each
# line it reads, says how many tasks each worker has run so far (``executed_count``).
OBSERVER = """\
import json, sys
from distributed import Client

with Client(scheduler_file=sys.argv[1], timeout="60s") as client:
    client.wait_for_workers(int(sys.argv[2]), timeout=120)
    print(json.dumps("ready"), flush=True)
    for _ in sys.stdin:
        print(json.dumps(client.run(lambda dask_worker: dask_worker.state.executed_count)),
              flush=True)
"""


@dataclass
class Cluster:
    """A running Dask cluster: its scheduler's address and file, and its observer."""

    address: str
    scheduler_file: Path
    observer: subprocess.Popen

    def executed(self) -> int:
        """Tasks the cluster's workers have run so far (each is asked)."""
        self.observer.stdin.write("\n")
        self.observer.stdin.flush()
        line = self.observer.stdout.readline()
        assert line, "the cluster's observer has ended"
        counts = json.loads(line)
        assert len(counts) == WORKERS, counts
        return sum(counts.values())

    def run(self, *args: str) -> tuple[subprocess.CompletedProcess, int]:
        """``python -m traceaug ARGS`` (its output as bytes) and the tasks the cluster's
        workers ran meanwhile."""
        before = self.executed()
        done = run_cli(*args, text=False)
        return done, self.executed() - before


def _stop(procs: list[subprocess.Popen]) -> None:
    """Each process (and what it started: its session) asked to end, then killed."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """A real Dask cluster shared by this module's tests: ``dask scheduler`` and two ``dask
    worker`` processes (one thread each), started at once (the workers and the observer wait
    for the scheduler's file), ready once both workers have registered."""
    if importlib.util.find_spec("distributed") is None:
        pytest.skip("distributed is not installed (the test extra)")
    d = tmp_path_factory.mktemp("dask")
    scheduler_file = d / "scheduler.json"
    started: list[subprocess.Popen] = []  # the scheduler, the workers, the observer
    logs: list[Path] = []

    def start(name: str, module: str, *args: str) -> None:
        logs.append(d / f"{name}.log")
        with logs[-1].open("wb") as log:
            started.append(subprocess.Popen([sys.executable, "-m", module, *args], cwd=d,
                                            stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True))

    try:
        start("scheduler", "distributed.cli.dask_scheduler", "--scheduler-file",
              str(scheduler_file), "--host", "127.0.0.1", "--port", "0",
              "--dashboard-address", ":0")
        for i in range(WORKERS):
            start(f"worker{i}", "distributed.cli.dask_worker", "--scheduler-file",
                  str(scheduler_file), "--nworkers", "1", "--nthreads", "1", "--no-nanny",
                  "--no-dashboard", "--local-directory", str(d / f"worker{i}"))
        observer = subprocess.Popen([sys.executable, "-c", OBSERVER, str(scheduler_file),
                                     str(WORKERS)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True, start_new_session=True)
        started.append(observer)
        deadline = time.monotonic() + 120
        while not select.select([observer.stdout], [], [], 0.2)[0]:
            ended = [p for p in started if p.poll() is not None]
            if ended or time.monotonic() > deadline:
                said = "\n".join(f"{f.name}: {f.read_text(errors='replace')}" for f in logs)
                pytest.fail(f"the Dask cluster did not start\n{said}")
        assert json.loads(observer.stdout.readline()) == "ready"
        address = json.loads(scheduler_file.read_text())["address"]
        yield Cluster(address, scheduler_file, observer)
    finally:
        # the observer, the workers, then the scheduler (a worker told to stop once its
        # scheduler is gone waits for it)
        if len(started) > WORKERS + 1:
            started[-1].stdin.close()  # the observer's client closes, then it ends
            with contextlib.suppress(subprocess.TimeoutExpired):
                started[-1].wait(timeout=10)
            _stop(started[-1:])
        _stop(started[1:WORKERS + 1])
        _stop(started[:1])


@pytest.fixture
def used(monkeypatch: pytest.MonkeyPatch) -> list:
    """The executors the runs in this process chose (a spy on ``job.run.choose``)."""
    seen: list = []
    real = job_run.choose

    def spy(items, kind, options):
        e = real(items, kind, options)
        seen.append(e)
        return e
    monkeypatch.setattr(job_run, "choose", spy)
    return seen


def test_local_pool_gives_each_rank_as_its_file_alone(used: list) -> None:
    """``report DIR`` through the pool (processes, as many as the machine allows) has, for
    every rank, the rows ``report FILE`` gives for that rank's file alone."""
    d = shared_trace(JOB)
    r = _cli("report", str(d), "--format", "json")
    assert r.exit_code == 0, r.output
    pool = [e for e in used if isinstance(e, ex.LocalPool)]
    assert pool and pool[0].processes and pool[0].size == min(processes.cores(), 8)
    whole = json.loads(r.stdout)
    for rank, f in _files(d).items():
        alone = _cli("report", str(f), "--format", "json")
        assert alone.exit_code == 0, alone.output
        for title, rows in json.loads(alone.stdout).items():
            if isinstance(rows, list) and rows and "rank" in rows[0]:
                assert [x for x in whole[title] if x["rank"] == rank] == rows, (rank, title)


def test_info_directory_is_one_row_per_rank() -> None:
    """``info DIR``: one row per rank with its kernels (counted in the raw JSON) and a job line."""
    d = shared_trace(JOB)
    r = _cli("info", str(d))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["rank", "file", "size_mb", "devices", "steps", "span_us",
                                "kernels", "warnings"]
    rows = [line.split() for line in lines[1:9]]
    for rank, f in _files(d).items():
        with gzip.open(f) as g:
            kernels = sum(e.get("cat") == "kernel" for e in json.load(g)["traceEvents"])
        row = rows[rank]
        assert (int(row[0]), row[1], int(row[6])) == (rank, f.name, kernels)
    assert lines[9].startswith("job: 8 ranks (world size 8), 8 devices")
    assert "ranks:" not in r.stderr  # no progress when stderr is not a terminal


def _on_terminal(out: Path, *args: str) -> str:
    """``traceaug ARGS`` with stderr on a pseudo-terminal (stdout to ``out``): what a user at
    a terminal sees on stderr."""
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "TRACEAUG_NO_PROGRESS"}
    with out.open("wb") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "traceaug", *args], stdout=stdout,
                                stderr=slave, env=env)
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: every process holding the terminal has ended
            break
        if not data:
            break
        seen += data
    os.close(master)
    assert proc.wait(timeout=300) == 0, seen.decode(errors="replace")
    return seen.decode()


@pytest.mark.parametrize("page", [False, True], ids=["json", "html"])
def test_report_job_reads_each_rank_once(tmp_path: Path, page: bool) -> None:
    """``report JOB`` (and ``--html``): its job section's collective tables come from the same
    read of each rank as its GPU ops: one run over the 8 ranks on the terminal (the rank
    progress reaches 8/8 once), and the same findings and waits as ``stragglers`` (which
    reads only the collectives) gives."""
    d = shared_trace(JOB)
    out = ("--html", str(tmp_path / "report.html")) if page else ("--format", "json")
    seen = _on_terminal(tmp_path / "report.json", "report", str(d), *out)
    import re

    done = [int(k) for k in re.findall(r"ranks: (\d)/8 done", seen)]
    assert done == sorted(done) and done.count(8) == 1, seen  # never back to fewer: one run
    if page:
        assert (tmp_path / "report.html").stat().st_size > 0
        return
    report = json.loads((tmp_path / "report.json").read_bytes())
    r = _cli("stragglers", str(d), "--format", "json")
    assert r.exit_code == 0, r.output
    assert "ranks:" not in r.stderr  # no progress when stderr is not a terminal
    alone = json.loads(r.stdout)
    assert [x["verdict"] for x in report["job: verdict"]] == [x["text"] for x in alone["verdict"]]
    steps = report["job: step time and wait in collectives per rank"]
    assert len(steps) == 8 and alone["verdict"]
    assert [(x["rank"], x["wait_ns"]) for x in steps] == \
        [(x["rank"], x["wait_ns"]) for x in alone["steps"]]


def test_report_of_a_url_prefix_is_the_report_of_its_directory() -> None:
    """``report URL/`` (a prefix of ranks, here ``file://``): the job section and every rank,
    as ``report DIR``; it used to fail with a traceback (a URL has no ``is_dir``)."""
    d = shared_trace(JOB)
    by_dir = _cli("report", str(d), "--format", "csv")
    by_url = _cli("report", f"file://{d.resolve()}/", "--format", "csv")
    assert by_dir.exit_code == by_url.exit_code == 0, by_url.output
    assert by_url.stdout == by_dir.stdout and "job: verdict" in by_url.stdout


def test_progress_on_a_terminal_says_ranks_bytes_read_and_the_slowest_running(tmp_path: Path) -> None:
    """On a terminal: ranks done / total, the bytes of the ranks done (their files' sizes, as
    stored) of the job's, the slowest rank still running; the line cleared at the end."""
    import re

    job = tmp_path / "job"
    job.mkdir()
    sizes = []
    for rank, f in _files(shared_trace(JOB)).items():
        with gzip.open(f) as g:
            (job / f"rank-{rank}.json").write_bytes(g.read())
        sizes.append((job / f"rank-{rank}.json").stat().st_size)
    seen = _on_terminal(tmp_path / "out.csv", "kernels", str(job), "--format", "csv")
    lines = [x for x in seen.split("\r\x1b[K") if x]
    whole = sum(sizes) / 1e6
    assert lines[-1] == f"ranks: 8/8 done, {whole:.1f} of {whole:.1f} MB read"
    assert seen.endswith("\r\x1b[K")  # cleared
    form = re.compile(r"ranks: (\d)/8 done, ([\d.]+) of ([\d.]+) MB read"
                      r"(?: \(slowest running: rank (\d), ([\d.]+) s\))?")
    running = 0
    for x in lines:
        m = form.fullmatch(x)
        assert m, x
        done, read = int(m[1]), float(m[2])
        assert float(m[3]) == round(whole, 1)
        small, large = sorted(sizes)[:done], sorted(sizes)[len(sizes) - done:]
        assert round(sum(small) / 1e6, 1) <= read <= round(sum(large) / 1e6, 1), x
        running += m[4] is not None
        if m[4] is not None:
            assert done < 8 and 0 <= int(m[4]) < 8
    assert running or processes.cores() == 1  # while ranks run, the slowest one is named (a pool)


COMMANDS = [("report", "--format", "json"), ("info", "--format", "csv"),
            ("collectives", "--format", "csv"), ("stragglers", "--format", "json")]
REWRITERS = [("counters",), ("critical-path",), ("patterns",)]


@pytest.mark.parametrize("command", COMMANDS + REWRITERS, ids=lambda c: c[0])
def test_dask_cluster_equals_local_pool(cluster: Cluster, command: tuple, tmp_path: Path,
                                        used: list) -> None:
    """Every rank on the Dask cluster (each rank's task run by its workers, once): the same
    stdout and the same output files, byte for byte, as the local pool."""
    d = shared_trace(JOB)
    dask = (("--scheduler-file", str(cluster.scheduler_file)) if command[0] == "info"
            else ("--scheduler", cluster.address))

    def args(where: str) -> list[str]:
        out = [command[0], str(d), *command[1:]]
        if command in REWRITERS:
            out += [str(tmp_path / where) + "/", "--format", "csv"]
        return out

    def written(where: str) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted((tmp_path / where).glob("*"))}

    before = cluster.executed()
    local = _cli(*args("local"))
    assert local.exit_code == 0, local.output
    assert used and all(isinstance(e, ex.LocalPool) for e in used), used
    assert cluster.executed() == before  # the local run sent nothing to the cluster
    there, ran = cluster.run(*args("dask"), *dask)
    assert there.returncode == 0, there.stderr.decode()
    assert ran == 8  # each rank's task, on the cluster's workers
    assert (there.stdout, written("dask")) == (local.stdout_bytes, written("local"))
    if command in REWRITERS:
        assert len(written("local")) == 8


def test_dask_merge_equals_local_pool(cluster: Cluster, tmp_path: Path, used: list) -> None:
    """``merge JOB OUT``: the ranks' collectives read on the cluster give the same trace."""
    d = shared_trace(JOB)
    local = _cli("merge", str(d), str(tmp_path / "local.json"))
    assert local.exit_code == 0, local.output
    assert used and all(isinstance(e, ex.LocalPool) for e in used), used
    dask, ran = cluster.run("merge", str(d), str(tmp_path / "dask.json"), "--scheduler",
                            cluster.address)
    assert dask.returncode == 0, dask.stderr.decode()
    assert ran == 8
    assert (tmp_path / "local.json").read_bytes() == (tmp_path / "dask.json").read_bytes()


def test_dask_diff_equals_local_pool(cluster: Cluster) -> None:
    """``diff JOB JOB``: each pair of ranks compared on the cluster gives the pool's rows."""
    d = shared_trace(JOB)
    local = _cli("diff", str(d), str(d), "--format", "csv")
    assert local.exit_code == 0, local.output
    dask, ran = cluster.run("diff", str(d), str(d), "--format", "csv", "--scheduler",
                            cluster.address)
    assert dask.returncode == 0, dask.stderr.decode()
    assert ran == 8  # a task per pair of ranks
    assert dask.stdout == local.stdout_bytes and local.stdout.count("\n") > 8


def _with_truncated_rank(tmp_path: Path, rank: int = 3) -> Path:
    """Ranks 0-3 of the job, rank 3 cut mid-event."""
    d = shared_trace(JOB)
    job = tmp_path / "job"
    job.mkdir()
    for r, f in list(_files(d).items())[:4]:
        if r == rank:
            with gzip.open(f) as g:
                (job / f"rank{r}.json").write_bytes(g.read()[:30000])  # cut mid-event
        else:
            os.symlink(f, job / f.name)
    return job


@pytest.mark.parametrize("where", ["local", "dask"])
def test_failing_rank_is_named_while_the_others_complete(tmp_path: Path, where: str) -> None:
    """A truncated rank: its error said by rank, the run exits 1 naming it, nothing written."""
    job = _with_truncated_rank(tmp_path)
    out = tmp_path / "out"
    args = ("counters", str(job), str(out) + "/")
    if where == "dask":  # a LocalCluster of its own: in a process of its own
        done = run_cli(*args, "--workers", "2")
        code, stderr = done.returncode, done.stderr
    else:
        r = _cli(*args)
        code, stderr = r.exit_code, r.stderr
    assert code == 1, stderr
    assert "Traceback" not in stderr  # the workers' logs stay out
    assert f"traceaug: rank 3 failed: {job / 'rank3.json'}: " in stderr
    assert "truncated" in stderr
    assert stderr.rstrip().endswith("1 of 4 ranks failed: rank(s) 3; nothing was written")
    assert not out.exists() or not any(out.iterdir())  # no output, no temporary file


def test_failing_rank_does_not_stop_the_others(tmp_path: Path, used: list) -> None:
    """Through the pool, the other ranks' results all arrive before the run fails."""
    from traceaug.errors import TraceaugError

    job = _with_truncated_rank(tmp_path)
    arrived = []
    options = job_run.JobOptions(progress=False)
    work = job_run.Work("gpu_steps", parts.ops, opens=parts.open_ops)  # each rank's GPU ops
    with pytest.raises(TraceaugError, match=r"1 of 4 ranks failed: rank\(s\) 3"):
        job_run.run(work, job_run.items_of(options.select(job)), options,
                    on_result=lambda rank, ops: arrived.append((rank, len(ops.ops["ts"]))))
    assert len(used) == 1 and isinstance(used[0], ex.LocalPool), used
    assert sorted(r for r, _ in arrived) == [0, 1, 2]
    assert all(n > 0 for _, n in arrived)


def flaky(path: Path, item: job_run.Item) -> int:
    """Fails the first time it runs for a file (a marker beside it says so), then counts
    the file's bytes."""
    marker = Path(str(path) + ".tried")
    if not marker.exists():
        marker.write_text("1")
        raise OSError("worker lost")
    return path.stat().st_size


@pytest.mark.parametrize("retries", [1, 0])
def test_a_failing_rank_is_tried_again(tmp_path: Path, retries: int) -> None:
    from traceaug.errors import TraceaugError

    job = tmp_path / "job"
    job.mkdir()
    for r in range(3):
        (job / f"rank{r}.json").write_text("{}" + " " * r)
    work = job_run.Work("analysis", flaky, opens=parts.local_file)  # each rank's file as a path
    with ex.LocalPool(2) as pool:
        options = job_run.JobOptions(retries=retries, progress=False, executor=pool)
        items = job_run.items_of(options.select(job))
        if retries:
            assert job_run.run(work, items, options) == {0: 2, 1: 3, 2: 4}
        else:
            with pytest.raises(TraceaugError, match=r"3 of 3 ranks failed: rank\(s\) 0, 1, 2"):
                job_run.run(work, items, options)


def _bad_entries(job: Path) -> list[str]:
    (job / "rank-9.json").symlink_to(job / "missing.json")
    (job / "rank-10.json.gz").symlink_to("/dev/zero")
    (job / "rank-11.json").symlink_to("rank-11.json")
    os.mkfifo(job / "rank-12.json")
    return ["rank-9.json: dangling symlink", "rank-10.json.gz: a device or socket",
            "rank-11.json: symlink loop", "rank-12.json: a FIFO"]


def _two_ranks_and_bad_entries(tmp_path: Path) -> tuple[Path, dict, list[str]]:
    """A job of the real job's first two ranks (symlinked) and ``_bad_entries``: the job,
    its readable files by rank, and what is said of each bad entry."""
    job = tmp_path / "job"
    job.mkdir()
    files = dict(list(_files(shared_trace(JOB)).items())[:2])
    for f in files.values():
        os.symlink(f, job / f.name)
    return job, files, _bad_entries(job)


def test_unreadable_rank_files_are_named_and_refused(tmp_path: Path) -> None:
    """24.22: a dangling symlink, a symlink to /dev/zero, a loop and a FIFO among the ranks:
    each named, exit 1; with --skip-bad-ranks the others are read and each is warned of."""
    job, files, said = _two_ranks_and_bad_entries(tmp_path)
    r = _cli("kernels", str(job))
    assert r.exit_code == 1 and r.stdout == ""
    assert "cannot read 4 rank file(s), named above" in r.stderr and "--skip-bad-ranks" in r.stderr
    for s in said:
        assert f"traceaug: error: {job / s}" in r.stderr
    r = _cli("kernels", str(job), "--skip-bad-ranks", "--format", "json")
    assert r.exit_code == 0, r.output
    for s in said:
        assert f"traceaug: warning: {job / s}" in r.stderr
    assert {row["rank"] for row in json.loads(r.stdout)["kernels"]} == set(files)


@pytest.mark.parametrize("command", ["merge", "critical-path"])
def test_job_writers_go_on_without_unreadable_ranks(tmp_path: Path, command: str) -> None:
    """``merge`` and ``critical-path --job`` took --skip-bad-ranks but found the ranks again
    without it (and refused); now the others are read once, each bad entry warned of once,
    and the merged trace holds exactly the readable ranks."""
    import re

    job, files, said = _two_ranks_and_bad_entries(tmp_path)
    out = tmp_path / "out.json"
    args = [command, str(job), str(out), "--skip-bad-ranks"]
    r = _cli(*args, *(["--job"] if command == "critical-path" else []))
    assert r.exit_code == 0, r.output
    for s in said:
        assert r.stderr.count(f"traceaug: warning: {job / s}") == 1, r.stderr
    names = {m for m in re.findall(r'"name": ?"rank (\d+): ', out.read_text())}
    assert {int(n) for n in names} == set(files)


def test_whatif_job_goes_on_without_unreadable_ranks(tmp_path: Path) -> None:
    """``whatif JOB --skip-bad-ranks`` found the ranks without the flag and refused; now it
    replays the readable ranks, found once: each bad entry warned of once."""
    job, files, said = _two_ranks_and_bad_entries(tmp_path)
    r = _cli("whatif", str(job), "--skip-bad-ranks", "--format", "json")
    assert r.exit_code == 0, r.output
    for s in said:
        assert r.stderr.count(f"traceaug: warning: {job / s}") == 1, r.stderr


def test_diff_explain_of_jobs_goes_on_without_unreadable_ranks(tmp_path: Path) -> None:
    """``diff --explain A/ B/ --skip-bad-ranks`` paired the ranks without the flag and
    refused; now each side's readable ranks are compared, each bad entry warned of once, and
    the result equals that of the same ranks without the bad entries."""
    job, files, said = _two_ranks_and_bad_entries(tmp_path)
    clean = tmp_path / "clean"
    clean.mkdir()
    for f in files.values():
        os.symlink(f, clean / f.name)
    r = _cli("diff", "--explain", str(job), str(clean), "--skip-bad-ranks", "--format", "json")
    assert r.exit_code == 0, r.output
    for s in said:
        assert r.stderr.count(f"traceaug: warning: {job / s}") == 1, r.stderr
    want = _cli("diff", "--explain", str(clean), str(clean), "--format", "json")
    assert want.exit_code == 0, want.output
    assert json.loads(r.stdout) == json.loads(want.stdout)


# ``load_job`` on the cluster, in a process of its own: the job's results pickled to argv[3].
LOAD_JOB = """\
import pickle, shutil, sys
import traceaug
import traceaug.analyses as ta

job_dir, address, out = sys.argv[1:]
job = traceaug.load_job(job_dir, scheduler=address)
got = {"ranks": job.ranks, "kernels": ta.kernels(job)}
shutil.rmtree(job_dir)  # a second read would fail now
got["breakdown"] = ta.temporal_breakdown(job, rank=5)
got["launches"] = len(ta.launch_summary(job))
job.close()
with open(out, "wb") as f:
    pickle.dump(got, f)
"""


def test_load_job_reads_each_rank_once(cluster: Cluster, tmp_path: Path) -> None:
    """``load_job`` (its ranks read on the Dask cluster, each once: one task per rank for three
    analyses): the analyses of ``traceaug.analyses`` take the Job and reuse its tables: they
    still answer once the files are gone, and equal those read from the directory here."""
    import pickle

    import traceaug.analyses as ta

    job_dir = tmp_path / "job"
    shutil.copytree(shared_trace(JOB), job_dir)
    want_kernels = ta.kernels(job_dir)
    want_breakdown = ta.temporal_breakdown(_files(job_dir)[5])
    before = cluster.executed()
    subprocess.run([sys.executable, "-c", LOAD_JOB, str(job_dir), cluster.address,
                    str(tmp_path / "got.pickle")], check=True)
    assert cluster.executed() - before == 8
    assert not job_dir.exists()
    got = pickle.loads((tmp_path / "got.pickle").read_bytes())
    assert got["ranks"] == list(range(8))
    assert got["kernels"].equals(want_kernels)
    assert got["breakdown"].equals(want_breakdown)
    assert got["launches"] == 8


def test_pool_size_is_cores_ranks_and_memory() -> None:
    """``min(cores, ranks, 0.8 × available RAM ÷ the rank's peak)``, at least one."""
    gb = 1 << 30
    assert ex.pool_size(8, gb, ram=4 * gb, ncores=16) == 3
    assert ex.pool_size(2, gb, ram=64 * gb, ncores=16) == 2
    assert ex.pool_size(64, gb, ram=64 * gb, ncores=6) == 6
    assert ex.pool_size(8, 8 * gb, ram=4 * gb, ncores=16) == 1
    assert ex.rank_peak(100 << 20, "gpu_steps") < ex.rank_peak(100 << 20, "full")


# ``report JOB``'s task (``commands.report``: the report's part of each rank's GPU ops and its
# collective tables, from one load) three times in one process started as a pool worker is
# (``processes.child_start`` with the worker's runtime); then its peak (VmHWM).
REPORT_RANK = """\
import sys
from pathlib import Path
from traceaug import processes, runtime
from traceaug.analysis import report
from traceaug.job import parts
from traceaug.job.run import Item, Work, task
from traceaug.read.ranks import TraceFile

processes.child_start(runtime.Runtime().for_worker())
work = Work("collectives", parts.part, {"fn": report.part, "in_job": True, "step": None, "top": 10},
            parts.open_ops_and_tables)
for _ in range(3):
    task(work, Item(0, TraceFile(Path(sys.argv[1]), 0)), runtime.current())
print([int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmHWM:")][0])
"""


def test_every_load_kind_has_a_measured_peak_that_bounds_a_real_rank(tmp_path: Path) -> None:
    """Each load kind has its measured factor (``bench/rank_peak.py``; none falls back to
    another kind's), and ``report JOB``'s task on a real 9.8 MB rank, run as a pool worker
    runs it (three ranks in one process: from the second, the worker keeps its engine's start
    image), peaks (its VmHWM) under the estimate the pool is sized by."""
    from traceaug.read.kinds import KINDS

    assert set(ex.PEAK_PER_BYTE) == set(KINDS)
    raw = tmp_path / "rank.json"
    with gzip.open(shared_trace("kineto/a100_nccl_rank0_of2.json.gz")) as g:
        raw.write_bytes(g.read())
    out = subprocess.run([sys.executable, "-c", REPORT_RANK, str(raw)], capture_output=True,
                         text=True, check=True)
    assert int(out.stdout) <= ex.rank_peak(raw.stat().st_size, "collectives")


def test_no_cluster_unless_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without --scheduler / --workers / Dask's own address, nothing connects to Dask."""
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    monkeypatch.setenv("DASK_CONFIG", str(tmp_path / "none"))
    assert ex.connect() is None
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:1")
    assert ex.dask_address(None) == "tcp://127.0.0.1:1"


WINDOW_US = (160_000, 170_000)  # of the A100 trace, from its first event: 10 ms of step 550


def _a100_window() -> dict:
    """The shared A100 trace (rank 0 of 16, 6 streams) cut to the events that start in
    ``WINDOW_US`` (1,956 real events, 481 kernels), its metadata events all kept."""
    base = json.loads(gzip.open(shared_trace("kineto/a100_rank0_of16_6streams.json.gz")).read())
    t0 = min(e["ts"] for e in base["traceEvents"] if e.get("ph") != "M" and "ts" in e)
    lo, hi = t0 + WINDOW_US[0], t0 + WINDOW_US[1]
    events = [e for e in base["traceEvents"] if e.get("ph") == "M" or lo <= e.get("ts", -1) < hi]
    return {**base, "traceEvents": events}


def _generated_job(directory: Path, ranks: int = 32) -> dict[int, dict[str, int]]:
    """``ranks`` ranks made from a window of the shared A100 trace (``_a100_window``): each
    with its distributedInfo rank, its timestamps shifted by rank-specific whole µs, and every
    k-th kernel (k = 3 + rank % 5) dropped; returns each rank's GPU op count per name (the
    oracle)."""
    base = _a100_window()
    directory.mkdir()
    want = {}
    for r in range(ranks):
        k, seen, events = 3 + r % 5, 0, []
        for e in base["traceEvents"]:
            if e.get("cat") == "kernel":
                seen += 1
                if seen % k == 0:
                    continue
            if "ts" in e and e.get("ph") != "M":
                e = {**e, "ts": e["ts"] + 1000 * r + r % 7}
            events.append(e)
        counts: dict[str, int] = {}
        for e in events:  # GPU ops: what `kernels` counts
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X":
                counts[e["name"]] = counts.get(e["name"], 0) + 1
        want[r] = counts
        doc = {**base, "distributedInfo": {**base.get("distributedInfo", {}), "rank": r,
                                           "world_size": ranks}, "traceEvents": events}
        (directory / f"gen-{r:02d}.json").write_text(json.dumps(doc))
    return want


def test_generated_32_ranks_on_dask_equal_the_pool_and_the_raw_json(cluster: Cluster,
                                                                     tmp_path: Path) -> None:
    """32 generated ranks: per rank, the kernel counts of the raw JSON; the Dask cluster's
    output (each rank's task run by its workers) byte for byte the local pool's."""
    want = _generated_job(tmp_path / "job")
    local = _cli("kernels", str(tmp_path / "job"), "--format", "json")
    assert local.exit_code == 0, local.output
    dask, ran = cluster.run("kernels", str(tmp_path / "job"), "--format", "json",
                            "--scheduler", cluster.address)
    assert dask.returncode == 0, dask.stderr.decode()
    assert ran == 32
    assert dask.stdout == local.stdout_bytes
    rows = json.loads(local.stdout)["kernels"]
    got: dict = {r: {} for r in want}
    for row in rows:
        got[row["rank"]][row["name"]] = row["count"]
    assert got == want


def test_ctrl_c_on_a_local_cluster_run_leaves_nothing(tmp_path: Path) -> None:
    """SIGINT once the run's Dask workers are up: exit 130, no output directory, no temporary
    file, and none of the processes it started left running."""
    psutil = pytest.importorskip("psutil")
    _generated_job(tmp_path / "job", ranks=16)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "traceaug", "counters", str(tmp_path / "job"),
                             f"{out}/", "--workers", "2"], stderr=subprocess.PIPE, text=True)
    me = psutil.Process(proc.pid)
    started: list = []
    while proc.poll() is None and len(started) < 2:  # the two workers (beside their nannies)
        started = [p for p in me.children(recursive=True) if _is_worker(p)]
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()
    others = me.children(recursive=True)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert not out.exists()
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]
    _, alive = psutil.wait_procs(others, timeout=30)
    assert alive == []


def _is_worker(p) -> bool:
    try:
        return "spawn_main" in " ".join(p.cmdline())
    except Exception:
        return False


def test_no_thread_is_left_in_this_process(cluster: Cluster, tmp_path: Path) -> None:
    """After this module's Dask runs (whatever the order: its cluster is up here, and a job
    runs through the local pool first): this process has no thread but the main one and
    traceaug's signal watcher, so traceaug still forks its children (``processes.can_fork``),
    as other modules' tests assert."""
    cluster.executed()
    r = _cli("kernels", str(shared_trace(JOB)), "--format", "csv")
    assert r.exit_code == 0, r.output
    assert other_threads() == []
    assert processes.can_fork()


@pytest.mark.parametrize("name", url_job_commands())
def test_a_hostile_rank_on_a_cluster(cluster: Cluster, tmp_path: Path, name: str) -> None:
    """Issue 39's done-when for clusters: every job command (the CLI's own list) on a job whose rank 0 is
    cut half way, read by the cluster's workers: exit 1, that rank named once, a closing line, nothing on
    stdout, nothing written, the job as it was."""
    from test_bad_inputs import _hostile_job

    job, out = tmp_path / "job", tmp_path / "out"
    job.mkdir()
    out.mkdir()
    entry = _hostile_job(job, "truncated")
    before = {f.name: f.read_bytes() for f in job.iterdir()}
    done, ran = cluster.run(*url_job_args(name, f"{job}/", str(out)),
                            "--scheduler-file", str(cluster.scheduler_file))
    err = done.stderr.decode(errors="replace")
    lines = err.strip().splitlines()
    assert done.returncode == 1 and done.stdout == b"" and ran >= 1, (ran, err)
    assert "Traceback" not in err and 1 <= len(lines) <= 2 and lines[-1].startswith("traceaug: error: "), err
    assert len([x for x in lines if entry in x]) == 1, err
    assert {f.name: f.read_bytes() for f in job.iterdir()} == before and os.listdir(out) == []


@pytest.mark.parametrize("name", url_job_commands())
def test_a_signal_in_every_job_command_on_a_cluster(cluster: Cluster, tmp_path: Path, name: str) -> None:
    """Issue 39's done-when for clusters: every job command (the CLI's own list) on the cluster, stopped by
    Ctrl-C / SIGTERM early and mid-run: exit 130 / 143 with one line, nothing written, nothing left in
    $TMPDIR, no process; the cluster serves the next command."""
    import jobgen
    from test_signals import URL_JOB_STEPS, URL_SIGNALS, interrupt

    job, temp = jobgen.write(tmp_path / "job", jobgen.job(2, 1, 50, steps=URL_JOB_STEPS)), tmp_path / "tmp"
    temp.mkdir()
    stopped = 0
    for i, (at, sig) in enumerate(URL_SIGNALS):
        out = tmp_path / f"out{i}"
        out.mkdir()
        code, err, took = interrupt([*url_job_args(name, f"{job}/", str(out)), "--scheduler-file",
                                     str(cluster.scheduler_file)], tmp_path, at, sig,
                                    {**os.environ, "TMPDIR": str(temp)})
        if code == 0:  # ended before the signal (a fast machine)
            continue
        stopped += 1
        said = err.splitlines()  # the cluster's tasks said cancelled (it serves others), then the exit
        assert code == 128 + sig and said[-1] == "traceaug: interrupted" and len(said) <= 2, (at, err)
        assert all(line.endswith("rank task(s) on the cluster cancelled") for line in said[:-1]), err
        assert took < 5 and os.listdir(out) == [] and os.listdir(temp) == [], (at, took, os.listdir(temp))
    assert stopped >= 1, name


# A signal landing as the Dask client connects: sent from inside its start (run on Dask's event loop
# thread), so it reaches traceaug's handler while the main thread waits for that start. An exit hook
# (run before Dask's: registered later) writes down whether a global client is left for Dask's own hook
# to close, and makes a coroutine that is never awaited, as a call a signal cut short leaves.
SIGNAL_AS_THE_CLIENT_STARTS = """
import atexit, os, signal, sys
import distributed
from distributed.client import _get_global_client
start, sig = distributed.Client._start, int(sys.argv[1])

async def signalled(self, *args, **kwargs):
    os.kill(os.getpid(), sig)
    return await start(self, *args, **kwargs)

async def cut_short():
    pass

def left():
    with open("left", "w") as f:
        f.write(repr(_get_global_client()))
    cut_short()

distributed.Client._start = signalled
atexit.register(left)
from traceaug.__main__ import main
sys.argv = ["traceaug", *sys.argv[2:]]
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_the_dask_client_connects_says_one_line(cluster: Cluster, tmp_path: Path,
                                                            sig: int) -> None:
    """Ctrl-C / SIGTERM while the client is still connecting to the cluster: exit 130 / 143 and the one
    line. No global Dask client is left for Dask's exit hook (a half-started one, closed there, failed
    with an "Exception ignored in atexit" traceback: 1 run of the cluster signal tests), nor a warning of
    a call never run ("coroutine ... was never awaited", another run)."""
    done = subprocess.run([sys.executable, "-c", SIGNAL_AS_THE_CLIENT_STARTS, str(int(sig)), "kernels",
                           str(shared_trace(JOB)), "--format", "csv", "--scheduler-file",
                           str(cluster.scheduler_file)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert (done.returncode, done.stderr, done.stdout) == (128 + sig, "traceaug: interrupted\n", ""), \
        done.stderr[-2000:]
    assert (tmp_path / "left").read_text() == "None"
