"""Object storage never loses an input (issue 39): an output URL that is an input, or inside an input
prefix, is refused before any work, however it is spelt; a rank-directory output interrupted by a real
signal keeps its old objects, all of them; "wrote" is said only for what is in place; a signal leaves
no multipart upload and no fetched rank; every job command reads URLs. The bucket is moto's server on
127.0.0.1 (conftest's ``s3``); every command runs as ``python -m traceaug`` in a process of its own.
"""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import jobgen
import pytest
from click.testing import CliRunner
from conftest import S3, run_cli, shared_trace

from traceaug.cli import main

A = "s3://bucket/job/worker0_step_12.1694128201545.pt.trace.json.gz"
B = "s3://bucket/job/worker1_step_12.1694128201556.pt.trace.json.gz"


def _opt(s3: S3) -> tuple[str, str]:
    return ("--storage-option", f"endpoint_url={s3.endpoint}")


def _objects(s3: S3, prefix: str = "bucket") -> dict[str, bytes]:
    """Every object under ``prefix`` (hidden ones too) with its bytes."""
    return {k: s3.fs.cat(k) for k in s3.fs.find(prefix)}


# (command line with {e} for the endpoint, what the refusal says): each writes over an input
SAME_OBJECT = [
    (["counters", A, A], "is the input object"),
    (["patterns", A, A.replace("s3://bucket/", "S3a://bucket//x/../")], "is the input object"),
    (["critical-path", A, "{e}/bucket/job/./" + A.rsplit("/", 1)[1]], "is the input object"),
    (["report", A, "--html", A], "is the input object"),
    (["diff", A, B, "--html", A], "is the input object"),
    (["counters", A, "s3://bucket//job/"], "holds the input object"),
    (["counters", "s3://bucket/job/", "s3://bucket/job/"], "is the input prefix"),
    (["counters", "s3://bucket/job", "s3://bucket/job/"], "is the input"),
    (["critical-path", "s3://bucket/job/", "s3://bucket/job/path.json", "--job"],
     "inside the input prefix"),
    (["merge", "s3://bucket/job/", "s3://bucket/job/sub/merged.json"], "inside the input prefix"),
]


def test_an_output_url_that_is_an_input_is_refused(s3: S3) -> None:
    """Each refused in one line before any work (the runs at once), every object as it was."""
    before = _objects(s3)
    runs = [(subprocess.Popen([sys.executable, "-m", "traceaug",
                               *[a.replace("{e}", s3.endpoint) for a in args], *_opt(s3)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=s3.env), said) for args, said in SAME_OBJECT]
    for proc, said in runs:
        err = proc.communicate(timeout=120)[1]
        assert proc.returncode == 1, err
        assert err.count("\n") == 1 and err.startswith("traceaug: error: "), err
        assert said in err
    assert _objects(s3) == before


def test_a_file_url_output_is_checked_as_its_path(tmp_path: Path) -> None:
    """``file://`` names a local file: the output that is the input file is refused, as its path is."""
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(shared_trace("kineto/a100_simple_add_cuda_sync.json.gz").read_bytes())
    before = trace.read_bytes()
    r = CliRunner().invoke(main, ["counters", str(trace), f"file://{trace}"])
    assert r.exit_code == 1
    assert r.stderr == f"traceaug: error: {trace}: is the input file; choose another output\n"
    assert trace.read_bytes() == before and sorted(tmp_path.iterdir()) == [trace]


def test_an_output_in_a_missing_bucket_is_refused_before_any_work(s3: S3) -> None:
    """No "wrote" for an object that never was: the bucket is checked as a directory is."""
    r = run_cli("counters", A, "s3://no-such-bucket/out.json.gz", *_opt(s3), env=s3.env)
    assert r.returncode == 1
    assert r.stderr == ("traceaug: error: s3://no-such-bucket/out.json.gz: no such bucket "
                        "(no-such-bucket); nothing was written\n")
    assert "wrote" not in r.stdout


def _tags(s3: S3, prefix: str) -> dict[str, str]:
    """The ETag of every object under ``prefix`` that is not hidden (one request)."""
    return {k: v["ETag"] for k, v in s3.fs.find(prefix, detail=True).items()
            if not k.rsplit("/", 1)[1].startswith(".")}


def test_a_signal_leaves_a_rank_directory_all_old(s3: S3) -> None:
    """The prefix already holds an output of every rank; SIGTERM as soon as the first of them changes
    (the commit puts them in place, ~1 s for 8 ranks): the run ends 143, every object has its old bytes,
    nothing else is left under the prefix (no staged copy) and nothing was said to be written."""
    sig, prefix = signal.SIGTERM, "bucket/old"
    names = [k.rsplit("/", 1)[1] for k in s3.fs.find("bucket/job")]
    old = {f"{prefix}/{n}": f"old output of {n}".encode() for n in names}
    for key, data in old.items():
        s3.fs.pipe(key, data)
    tags = _tags(s3, prefix)
    proc = subprocess.Popen([sys.executable, "-m", "traceaug", "counters", "s3://bucket/job/",
                             f"s3://{prefix}/", "--format=csv",
                             *_opt(s3)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=s3.env)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and _tags(s3, prefix) == tags:
            assert time.monotonic() < deadline, "no rank object changed"
            time.sleep(0.005)
        proc.send_signal(sig)
        err = proc.communicate(timeout=60)[1].decode()
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + sig, err
    assert "wrote" not in err, err
    assert _objects(s3, prefix) == old
    assert s3.fs.list_multipart_uploads("bucket") == []


# ``read.storage.upload`` of argv[1] to argv[2] (endpoint argv[3]) with the command line's signal
# handling, a real SIGINT sent while the request that starts its multipart upload is on its way
# (a hook on s3fs's request, the one thing injected: the moment cannot be timed from outside).
SIGNAL_IN_A_REQUEST = """\
import os, signal, sys, time
import s3fs
from fsspec.asyn import sync_wrapper
from traceaug import interrupt
from traceaug.read import storage

call = s3fs.S3FileSystem._call_s3

async def signalled(self, method, *args, **kwargs):
    if method == "create_multipart_upload":
        os.kill(os.getpid(), signal.SIGINT)  # the main thread waits for this request
    return await call(self, method, *args, **kwargs)

s3fs.S3FileSystem.call_s3 = sync_wrapper(signalled)  # what a file's requests go through
interrupt.install(command_line=True)
try:
    storage.upload(sys.argv[1], sys.argv[2], {"endpoint_url": sys.argv[3]})
except KeyboardInterrupt:
    print("interrupted")
    time.sleep(1)  # the process lives on, as a run cleaning up does: a request on its way arrives
"""


def test_a_signal_in_an_upload_leaves_no_multipart_upload(s3: S3, tmp_path: Path) -> None:
    """SIGINT while the multipart upload is being started: it is aborted, no object appears."""
    data = tmp_path / "out.bin"
    data.write_bytes(b"x" * (1 << 20))
    done = subprocess.run([sys.executable, "-c", SIGNAL_IN_A_REQUEST, str(data),
                           "s3://bucket/up/out.bin", s3.endpoint], capture_output=True, text=True,
                          env=s3.env)
    assert (done.returncode, done.stdout) == (0, "interrupted\n"), done.stderr
    assert not s3.fs.exists("bucket/up/out.bin")
    assert s3.fs.list_multipart_uploads("bucket") == []


# ``traceaug ARGV[2:]`` with signal ARGV[1] sent as the commit's ``Store.stage`` returns: the new object
# is uploaded beside its target, not yet listed for removal (a window of microseconds, so sent from inside).
AT_STAGE = """\
import os, sys
from traceaug.read import storage

sig, sys.argv = int(sys.argv[1]), ["traceaug", *sys.argv[2:]]
stage = storage.Store.stage

def stage_then_signal(self, *args):
    new = stage(self, *args)
    os.kill(os.getpid(), sig)
    return new

storage.Store.stage = stage_then_signal
from traceaug.__main__ import main
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_once_an_output_is_staged_leaves_no_staged_object(s3: S3, sig: int) -> None:
    """Item 12: a signal between the upload of the new object (``.out.json.gz.traceaug-….new``) and its
    listing for removal left it in the bucket for good; the old object stays, nothing else."""
    s3.fs.pipe("bucket/staged/out.json.gz", b"old")
    done = subprocess.run([sys.executable, "-c", AT_STAGE, str(int(sig)), "counters", A,
                           "s3://bucket/staged/out.json.gz", *_opt(s3)], capture_output=True,
                          text=True, env=s3.env, timeout=300)
    assert (done.returncode, done.stderr) == (128 + sig, "traceaug: interrupted\n")
    assert _objects(s3, "bucket/staged") == {"bucket/staged/out.json.gz": b"old"}
    assert s3.fs.list_multipart_uploads("bucket") == []


# ``traceaug ARGV[2:]`` with signal ARGV[1] sent as asyncio makes its event loop's self-pipe (fsspec's
# loop, made as the first URL is read): a moment a Ctrl-C 0.5 s into ``report s3://…`` hit 2 times in 16.
IN_THE_EVENT_LOOP = """\
import os, socket, sys
sig, sys.argv = int(sys.argv[1]), ["traceaug", *sys.argv[2:]]
pair, sent = socket.socketpair, []

def signalled(*args, **kwargs):
    if not sent and "asyncio" in sys._getframe(1).f_code.co_filename:
        sent.append(os.kill(os.getpid(), sig))
    return pair(*args, **kwargs)

socket.socketpair = signalled
from traceaug.__main__ import main
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_the_storage_loop_starts_is_one_line(s3: S3, sig: int) -> None:
    """Item 12: a signal while fsspec made its event loop left it half made; collected, it printed
    "Exception ignored in: <function BaseEventLoop.__del__>" and a traceback after "interrupted"."""
    done = subprocess.run([sys.executable, "-c", IN_THE_EVENT_LOOP, str(int(sig)), "report", A,
                           *_opt(s3)], capture_output=True, text=True, env=s3.env, timeout=300)
    assert (done.returncode, done.stderr) == (128 + sig, "traceaug: interrupted\n")


def _slow_job(s3: S3, prefix: str) -> None:
    """A 2-rank job (``jobgen``) whose ranks take seconds to load: 200,000 CPU ops each (20 MB, gzip)."""
    for r, raw in jobgen.job(2, 1, 50).items():
        start = jobgen.BASE_US - 1_000_000
        raw["traceEvents"] += [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1000,
                                "tid": 7, "ts": start + 2 * i, "dur": 1} for i in range(200_000)]
        s3.fs.pipe(f"{prefix}/rank-{r}.json.gz", gzip.compress(json.dumps(raw).encode(), 1))


def test_a_signal_in_a_cluster_job_leaves_no_fetched_rank(s3: S3, tmp_path: Path) -> None:
    """SIGINT once a Dask worker has fetched a rank (seconds to load): the worker is killed, its copy
    removed with the run's temporary directory ($TMPDIR holds no traceaug-fetch-*)."""
    _slow_job(s3, "bucket/slow")
    proc = subprocess.Popen([sys.executable, "-m", "traceaug", "info", "s3://bucket/slow/",
                             "--workers", "2", *_opt(s3)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**s3.env, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and not list(tmp_path.rglob("traceaug-fetch-*/rank-*")):
            assert time.monotonic() < deadline, "no rank was fetched"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=60)[1].decode()
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert list(tmp_path.rglob("traceaug-fetch-*")) == []


def _started(*args: str, env: dict | None = None) -> subprocess.Popen:
    """``python -m traceaug ARGS`` started, its output captured as text."""
    return subprocess.Popen([sys.executable, "-m", "traceaug", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_every_job_command_reads_urls(s3: S3, tmp_path: Path) -> None:
    """``merge``, ``whatif`` and ``critical-path --job`` read a prefix of ranks (a 2-rank job,
    ``jobgen``) as its local copy: the same bytes and text (the URL was collapsed to ``s3:/`` or
    refused); a command without ``--storage-option`` refuses a URL in one line saying which do."""
    local = jobgen.write(tmp_path / "pair", jobgen.job(2, 1, 50))
    for f in local.iterdir():
        s3.fs.put(str(f), f"bucket/pair/{f.name}")
    runs = {}  # (command, where) -> its process, all at once
    for name, args in (("merge", []), ("critical-path", ["--job"]),
                       ("whatif", ["--scale", "comp=0.5"])):
        out = [] if name == "whatif" else [str(tmp_path / f"{name}.json")]
        runs[name, "here"] = _started(name, str(local), *out, *args)
        out = [] if name == "whatif" else [f"s3://bucket/{name}.json"]
        runs[name, "there"] = _started(name, "s3://bucket/pair/", *out, *args, *_opt(s3),
                                       env=s3.env)
    done = {k: (p.communicate(timeout=300), p.returncode) for k, p in runs.items()}
    for name in ("merge", "critical-path", "whatif"):
        (here, _), code = done[name, "here"]
        assert code == 0, done[name, "here"]
        (there, err), code = done[name, "there"]
        assert (code, there) == (0, here), err
        if name != "whatif":
            assert s3.fs.cat(f"bucket/{name}.json") == (tmp_path / f"{name}.json").read_bytes()
    r = run_cli("query", A, "select 1")
    assert r.returncode == 1
    assert r.stderr == (f"traceaug: error: {A}: this command reads local files; URLs are read and "
                        "written by the commands that take --storage-option\n")
