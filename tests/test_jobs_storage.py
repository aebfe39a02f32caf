"""Jobs in object storage (issue 25): an S3 bucket served by moto's ``ThreadedMotoServer`` on
127.0.0.1. Ranks read from a prefix (gzip and plain objects) give the bytes the same files
give from a local directory; outputs written to the bucket are the bytes written locally;
an upload that fails leaves no object (and no multipart upload)."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import shared_trace

from traceaug.cli import main

JOB = "kineto/jobs/dlrm_v100_8ranks"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(filesystem, endpoint, local copy of the job) with the job under s3://bucket/job/:
    ranks 0-3 gzip, 4-7 plain JSON."""
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
           "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        import s3fs

        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
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
        yield fs, endpoint, local
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_ranks_from_a_bucket_read_as_from_a_directory(s3) -> None:
    fs, endpoint, local = s3
    opt = ("--storage-option", f"endpoint_url={endpoint}")
    for command in (("kernels", "--format", "csv"),):
        here = _cli(command[0], str(local), *command[1:])
        there = _cli(command[0], "s3://bucket/job/", *command[1:], *opt)
        assert here.exit_code == there.exit_code == 0, here.output + there.output
        assert there.stdout == here.stdout
    info = _cli("info", "s3://bucket/job/", *opt)
    assert info.exit_code == 0, info.output
    assert info.stdout.splitlines()[-1].startswith("job: 8 ranks")


def test_outputs_to_a_bucket_are_the_local_bytes(s3, tmp_path: Path) -> None:
    fs, endpoint, local = s3
    opt = ("--storage-option", f"endpoint_url={endpoint}")
    here = _cli("counters", str(local), str(tmp_path / "out") + "/", "--format", "csv")
    there = _cli("counters", "s3://bucket/job/", "s3://bucket/out/", "--format", "csv", *opt)
    assert here.exit_code == there.exit_code == 0, here.output + there.output
    assert there.stdout == here.stdout
    assert "wrote s3://bucket/out/" in there.stderr
    written = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    assert len(written) == 8
    assert {n.rsplit("/", 1)[-1]: fs.cat(n) for n in fs.ls("bucket/out/", refresh=True)} == written


def test_a_failing_run_uploads_nothing(s3, tmp_path: Path) -> None:
    """A rank that fails: no object under the output prefix."""
    fs, endpoint, local = s3
    fs.pipe("bucket/bad/rank0.json", (local / sorted(os.listdir(local))[-1]).read_bytes())
    fs.pipe("bucket/bad/rank1.json", b'{"traceEvents": [{"ph": "X", "name": "k"')  # cut
    r = _cli("counters", "s3://bucket/bad/", "s3://bucket/bad-out/",
             "--storage-option", f"endpoint_url={endpoint}")
    assert r.exit_code == 1
    assert "traceaug: rank 1 failed: s3://bucket/bad/rank1.json: " in r.stderr
    fs.invalidate_cache()
    assert not fs.exists("bucket/bad-out")


def test_an_interrupted_upload_leaves_no_object(s3, tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C after a 6 MiB part went up (the fault is injected: a real one cannot be timed):
    the multipart upload is aborted, no object appears. fsspec's ``with fs.open(url, "wb")``
    would have committed the part."""
    from traceaug.job import storage

    fs, endpoint, _ = s3
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(12 << 20))

    def interrupted(src, dst, length=0):
        dst.write(src.read(6 << 20))
        dst.flush()  # the first part is uploaded
        raise KeyboardInterrupt
    monkeypatch.setattr(shutil, "copyfileobj", interrupted)
    with pytest.raises(KeyboardInterrupt):
        storage.upload(big, "s3://bucket/up/big.bin", {"endpoint_url": endpoint})
    monkeypatch.undo()
    fs.invalidate_cache()
    assert not fs.exists("bucket/up/big.bin")
    assert fs.list_multipart_uploads("bucket") == []


def test_urls_where_they_cannot_be_read_are_one_line(monkeypatch) -> None:
    """A command that reads local files refuses a URL in one line; storage errors (no
    credentials) are one line naming the URL, never a traceback."""
    r = _cli("summary", "s3://bucket/k.json")
    assert r.exit_code == 1 and r.stderr.startswith("traceaug: error: s3://bucket/k.json: this "
                                                    "command reads local files")
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    r = _cli("kernels", "s3://bucket/job/", "--storage-option", "endpoint_url=http://127.0.0.1:9")
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("traceaug: error: s3://bucket/job/: ") and r.stderr.count("\n") == 1
