"""Jobs in object storage (issue 25): an S3 bucket served by moto's ``ThreadedMotoServer`` on
127.0.0.1. Ranks read from a prefix (gzip and plain objects) give the bytes the same files
give from a local directory; outputs written to the bucket are the bytes written locally;
an upload that fails leaves no object (and no multipart upload).

Nothing here reads the bucket in this process: s3fs's event loop thread ("fsspecIO") never
ends, and with another thread alive traceaug rightly stops forking its children
(``processes.can_fork``), which other modules' tests assert. The server runs in a process of
its own, which also answers this module's questions about the bucket (``Bucket``), and every
command given a URL runs as ``python -m traceaug``; the local runs stay here.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import other_threads, run_cli, shared_trace

from traceaug import processes
from traceaug.cli import main

JOB = "kineto/jobs/dlrm_v100_8ranks"
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1", "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
       "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required"}

# The bucket's server and an s3fs filesystem on it, in a process of their own: its endpoint
# first, then, for each request (a line: a pickled method name, args and kwargs), the reply
# (a line: a pickled ("ok", result) or ("error", its repr)), the filesystem's cache dropped.
SERVER = """\
import base64, json, pickle, sys
from moto.server import ThreadedMotoServer
import s3fs

server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
endpoint = f"http://{host}:{port}"
fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
print(json.dumps(endpoint), flush=True)
for line in sys.stdin:
    name, args, kwargs = pickle.loads(base64.b64decode(line))
    fs.invalidate_cache()
    try:
        reply = ("ok", getattr(fs, name)(*args, **kwargs))
    except Exception as e:
        reply = ("error", repr(e))
    print(base64.b64encode(pickle.dumps(reply)).decode(), flush=True)
server.stop()
"""


class Bucket:
    """The server's s3fs filesystem, asked from here: ``bucket.cat(path)`` is its
    ``fs.cat(path)`` (a fresh listing each time)."""

    def __init__(self, server: subprocess.Popen) -> None:
        self.server = server

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            self.server.stdin.write(base64.b64encode(pickle.dumps((name, args, kwargs))) + b"\n")
            self.server.stdin.flush()
            line = self.server.stdout.readline()
            assert line, "the bucket's server has ended"
            status, value = pickle.loads(base64.b64decode(line))
            assert status == "ok", f"{name}{args}: {value}"
            return value
        return call


@dataclass
class S3:
    fs: Bucket
    endpoint: str
    local: Path  # the job's local copy
    env: dict  # the environment of a command that reads the bucket (its credentials)


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3]:
    """The job under s3://bucket/job/ (ranks 0-3 gzip, 4-7 plain JSON), with its local copy."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    env = {**os.environ, **AWS}
    log = tmp_path_factory.mktemp("s3") / "server.log"  # its request log
    with log.open("wb") as err:
        server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=err, env=env)
    try:
        line = server.stdout.readline()
        assert line, f"the bucket's server did not start: {log.read_text(errors='replace')}"
        endpoint = json.loads(line)
        fs = Bucket(server)
        fs.mkdir("bucket")
        local = tmp_path_factory.mktemp("job")
        for i, f in enumerate(sorted(shared_trace(JOB).glob("*.json.gz"))):
            if i < 4:
                shutil.copy(f, local / f.name)
            else:
                with gzip.open(f) as g:
                    (local / f.name[:-3]).write_bytes(g.read())
        for f in local.iterdir():
            fs.put(str(f), f"bucket/job/{f.name}")
        yield S3(fs, endpoint, local, env)
    finally:
        server.stdin.close()  # the server stops
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_ranks_from_a_bucket_read_as_from_a_directory(s3: S3) -> None:
    opt = ("--storage-option", f"endpoint_url={s3.endpoint}")
    for command in (("kernels", "--format", "csv"),):
        here = _cli(command[0], str(s3.local), *command[1:])
        assert here.exit_code == 0, here.output
        there = run_cli(command[0], "s3://bucket/job/", *command[1:], *opt, text=False,
                        env=s3.env)
        assert there.returncode == 0, there.stderr.decode()
        assert there.stdout == here.stdout_bytes
    info = run_cli("info", "s3://bucket/job/", *opt, env=s3.env)
    assert info.returncode == 0, info.stderr
    assert info.stdout.splitlines()[-1].startswith("job: 8 ranks")


def test_outputs_to_a_bucket_are_the_local_bytes(s3: S3, tmp_path: Path) -> None:
    fs = s3.fs
    opt = ("--storage-option", f"endpoint_url={s3.endpoint}")
    here = _cli("counters", str(s3.local), str(tmp_path / "out") + "/", "--format", "csv")
    assert here.exit_code == 0, here.output
    there = run_cli("counters", "s3://bucket/job/", "s3://bucket/out/", "--format", "csv", *opt,
                    text=False, env=s3.env)
    assert there.returncode == 0, there.stderr.decode()
    assert there.stdout == here.stdout_bytes
    assert b"wrote s3://bucket/out/" in there.stderr
    written = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    assert len(written) == 8
    assert {n.rsplit("/", 1)[-1]: fs.cat(n) for n in fs.ls("bucket/out/", refresh=True)} == written


def test_a_failing_run_uploads_nothing(s3: S3) -> None:
    """A rank that fails: no object under the output prefix."""
    fs = s3.fs
    fs.pipe("bucket/bad/rank0.json", (s3.local / sorted(os.listdir(s3.local))[-1]).read_bytes())
    fs.pipe("bucket/bad/rank1.json", b'{"traceEvents": [{"ph": "X", "name": "k"')  # cut
    r = run_cli("counters", "s3://bucket/bad/", "s3://bucket/bad-out/",
                "--storage-option", f"endpoint_url={s3.endpoint}", env=s3.env)
    assert r.returncode == 1, r.stderr
    assert "traceaug: rank 1 failed: s3://bucket/bad/rank1.json: " in r.stderr
    assert not fs.exists("bucket/bad-out")


# ``read.storage.upload`` of argv[1] to argv[2] (endpoint argv[3]), the copy interrupted by
# Ctrl-C once its first 6 MiB part went up: says "interrupted" when the KeyboardInterrupt
# came through.
INTERRUPTED_UPLOAD = """\
import shutil, sys
from traceaug.read import storage

def interrupted(src, dst, length=0):
    dst.write(src.read(6 << 20))
    dst.flush()  # the first part is uploaded
    raise KeyboardInterrupt

shutil.copyfileobj = interrupted
try:
    storage.upload(sys.argv[1], sys.argv[2], {"endpoint_url": sys.argv[3]})
except KeyboardInterrupt:
    print("interrupted")
"""


def test_an_interrupted_upload_leaves_no_object(s3: S3, tmp_path: Path) -> None:
    """Ctrl-C after a 6 MiB part went up (the fault is injected: a real one cannot be timed):
    the multipart upload is aborted, no object appears. fsspec's ``with fs.open(url, "wb")``
    would have committed the part."""
    fs = s3.fs
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(12 << 20))
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_UPLOAD, str(big),
                           "s3://bucket/up/big.bin", s3.endpoint], capture_output=True,
                          text=True, env=s3.env)
    assert (done.returncode, done.stdout) == (0, "interrupted\n"), done.stderr
    assert not fs.exists("bucket/up/big.bin")
    assert fs.list_multipart_uploads("bucket") == []


def test_urls_where_they_cannot_be_read_are_one_line() -> None:
    """A command that reads local files refuses a URL in one line; storage errors (no
    credentials) are one line naming the URL, never a traceback."""
    r = _cli("summary", "s3://bucket/k.json")
    assert r.exit_code == 1 and r.stderr.startswith("traceaug: error: s3://bucket/k.json: this "
                                                    "command reads local files")
    env = {k: v for k, v in os.environ.items()
           if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE")}
    env.update(AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent")
    r = run_cli("kernels", "s3://bucket/job/", "--storage-option",
                "endpoint_url=http://127.0.0.1:9", env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("traceaug: error: s3://bucket/job/: ") and r.stderr.count("\n") == 1


def test_no_thread_is_left_in_this_process(s3: S3) -> None:
    """With the bucket's server up and this module's runs done (whatever the order): this
    process has no thread but the main one and traceaug's signal watcher, so traceaug still
    forks its children (``processes.can_fork``), as other modules' tests assert."""
    r = _cli("kernels", str(s3.local), "--format", "csv")
    assert r.exit_code == 0, r.output
    assert s3.fs.exists("bucket/job")
    assert other_threads() == []
    assert processes.can_fork()
