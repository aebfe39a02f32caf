"""Shared fixtures: where the real traces live, and a skip when they (or the reference tool) are
absent -- a failure under CI, where both are provided."""

from __future__ import annotations

import base64
import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The job table cache is off in the suite (a test turns it on with --cache / cache=): one cache shared by
# the tests would make a rank an earlier test read answer a later one's (a killed worker, a counted
# task, an interrupted rank would never run). TRACEAUG_CACHE names a place outside the user's cache
# and the source tree all the same.
os.environ["TRACEAUG_NO_CACHE"] = "1"
os.environ["TRACEAUG_CACHE"] = os.path.join(tempfile.gettempdir(), f"traceaug-test-cache-{os.getpid()}")

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"
KINETO = SHARED / "kineto"
TESTDATA = ROOT / "testdata"


def under_ci() -> bool:
    """True under CI (``CI`` set and not false), where nothing the suite needs may be missing."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_or_fail(why: str) -> None:
    """Skip the test with WHY; under CI fail it instead (CI provides what was missing)."""
    if under_ci():
        pytest.fail(f"{why} (required under CI)", pytrace=False)
    pytest.skip(why)


def shared_trace(rel: str) -> Path:
    """A path under ../shared/traces, or skip the test with the reason (fail under CI)."""
    path = SHARED / rel
    if not path.exists():
        skip_or_fail(f"real trace {path} not present (../shared/traces is provided for CI)")
    return path


def require_hta() -> None:
    """The reference tool, HTA's newest release (``traceinsight``, ``import hta``), or skip (fail
    under CI, whose test extra installs it)."""
    try:
        import hta  # noqa: F401
    except ImportError:
        skip_or_fail("HTA is not installed (pip install traceinsight, the test extra)")


def kineto_files() -> list[str]:
    """Every Kineto trace file in ../shared/traces/kineto (relative names)."""
    if not KINETO.exists():
        return []
    return sorted(str(p.relative_to(SHARED)) for p in KINETO.rglob("*.json.gz"))


def run_cli(*args: str, text: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m traceaug ARGS`` in a fresh process, its output captured (``text=False``: as
    bytes); ``env``: its whole environment (default: this process's)."""
    return subprocess.run([sys.executable, "-m", "traceaug", *args], capture_output=True,
                          text=text, env=env)


def other_threads() -> list[threading.Thread]:
    """This process's threads but the main one and traceaug's signal watcher: with any alive,
    traceaug stops forking its children (``processes.can_fork``). Tests that use Dask or
    object storage keep them out of this process (their clients' threads never end)."""
    from traceaug import interrupt

    return [t for t in threading.enumerate()
            if t is not threading.main_thread() and not interrupt.is_watcher(t)]


def plan_fields(p) -> dict:
    """What a pass-1 plan (``normalize.Plan``) says, for comparing two plans of one file."""
    return {"held": p.held, "cuts": p.layout.cuts, "header": p.layout.header,
            "trailer": p.layout.trailer, "has_events": p.layout.has_events, "events": p.events,
            "moved": p.moved, "lane_threads": p.lane_threads, "thread_names": p.thread_names,
            "base_ns": p.base_ns, "span_ns": p.span_ns, "exact": p.exact_chunks,
            "first_seqs": p.chunk_first_seq}


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through Playwright (``perfetto_ui.launch``), one per test module."""
    import perfetto_ui
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = perfetto_ui.launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@contextmanager
def started_by(how: str) -> Iterator[None]:
    """Children and pass-1 workers fork while this process has no other thread; a live one
    makes them spawn (``processes.can_fork``)."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait) if how == "spawn" else None
    if other is not None:
        other.start()
    try:
        yield
    finally:
        stop.set()
        if other is not None:
            other.join()


S3_JOB = "kineto/jobs/dlrm_v100_8ranks"  # the job the ``s3`` fixture puts in its bucket
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1", "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
       "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required"}

# Object storage for the tests (``s3``): an S3 bucket served by moto's ``ThreadedMotoServer`` on
# 127.0.0.1. Nothing reads the bucket in the test process: s3fs's event loop thread ("fsspecIO")
# never ends, and with another thread alive traceaug rightly stops forking its children
# (``processes.can_fork``), which other modules' tests assert. The server runs in a process of
# its own, which also answers the tests' questions about the bucket (``Bucket``).
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
        for i, f in enumerate(sorted(shared_trace(S3_JOB).glob("*.json.gz"))):
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


def url_job_commands() -> list[str]:
    """The commands that read a job at a URL (those taking ``--storage-option``), from the CLI's own list
    (``traceaug.commands.NAMES``): a new command is in the signal and hostile-input suites for free."""
    from traceaug import commands

    return [n for n in commands.NAMES
            if any(p.name == "storage_option" for p in commands.load(n).click_params())]


def declared_args(name: str, trace: str, out: Callable[[Any], str], as_json: bool = True) -> list[str]:
    """``traceaug NAME`` as declared: ``trace`` for each trace argument (a variadic one too; not an
    optional second, as ``open A B``'s), ``out(param)`` for each output argument; ``--format json``
    where the command has it (``as_json``)."""
    import click

    from traceaug import commands, paths

    args = [name]
    for p in commands.load(name).click_params():
        if isinstance(p, click.Argument) and isinstance(p.type, paths.Input):
            if p.required or p.nargs == -1:
                args.append(trace)
        elif isinstance(p, click.Argument) and isinstance(p.type, paths.Output):
            args.append(out(p))
        elif as_json and isinstance(p, click.Option) and p.name == "fmt" and "json" in p.type.choices:
            args += ["--format", "json"]
    return args


def trace_commands() -> list[str]:
    """The commands that read a trace (a trace argument), from the CLI's own list."""
    import click

    from traceaug import commands, paths

    return [n for n in commands.NAMES if any(isinstance(p, click.Argument) and isinstance(p.type, paths.Input)
                                             for p in commands.load(n).click_params())]


def writes_a_copy(name: str) -> bool:
    """Whether command ``name`` is a rewriter: its OUT a copy of IN (a rank directory for a directory IN)."""
    import click

    from traceaug import commands, paths

    return any(isinstance(p, click.Argument) and isinstance(p.type, paths.Output) and p.type.rank_dir
               for p in commands.load(name).click_params())


def url_job_args(name: str, job: str, out: str, endpoint: str | None = None) -> list[str]:
    """``traceaug NAME`` as declared (``declared_args``): the job ``job`` (a URL or a directory) for each
    trace argument, each output under ``out`` (a prefix where the output is a rank directory), the
    bucket's ``endpoint``."""
    args = declared_args(name, job, lambda p: f"{out}/{p.name}/" if p.type.rank_dir
                         else f"{out}/{p.name}.json", as_json=False)
    return [*args, "--storage-option", f"endpoint_url={endpoint}"] if endpoint else args


# Modules taking over ~12 s of the suite (browsers, jobs and clusters, signals, the hostile corpus):
# ``pytest -n 2 -m "not slow and not perf"`` runs the rest, the quick subset for an inner loop.
SLOW = frozenset({
    "test_bad_inputs", "test_cache", "test_cluster_reliability", "test_collectives", "test_conventions",
    "test_counters", "test_critical_path", "test_critical_path_hta", "test_diff", "test_diff_gate",
    "test_diff_view", "test_discovery", "test_efficiency", "test_engine", "test_fidelity", "test_job_path",
    "test_job_ports", "test_job_verdict", "test_jobs", "test_jobs_storage", "test_load_modes", "test_mcp",
    "test_memory", "test_merge_stream", "test_pass1_columns", "test_patterns_mining",
    "test_rebase_below_base", "test_reliability", "test_s3_safety", "test_schemas",
    "test_serving_attributed", "test_signals", "test_whatif_steps"})


def pytest_collection_modifyitems(items: list) -> None:
    for item in items:
        name = item.module.__name__
        if name in SLOW or name.startswith("test_browser"):
            item.add_marker(pytest.mark.slow)
