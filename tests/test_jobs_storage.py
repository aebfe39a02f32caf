"""Jobs in object storage (issue 25): an S3 bucket served by moto's ``ThreadedMotoServer`` on
127.0.0.1. Ranks read from a prefix (gzip and plain objects) give the bytes the same files
give from a local directory; outputs written to the bucket are the bytes written locally;
a run that fails uploads nothing.

Nothing here reads the bucket in this process (the ``s3`` fixture of conftest.py says why);
every command given a URL runs as ``python -m traceaug``; the local runs stay here.
"""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner
from conftest import S3, other_threads, run_cli

from traceaug import processes
from traceaug.cli import main


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
