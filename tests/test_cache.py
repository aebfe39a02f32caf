"""The job table cache (issue 38): every command on a job prints the same bytes cold and warm (a
generated 16-rank job, the DLRM job, a diff of two jobs, a job in moto's S3, a cache in S3); an edit
keeping size and mtime re-reads exactly that rank; a corrupted, a truncated entry, a writer killed by
SIGKILL and two writers at once each end in the right answer; the bound evicts the least recently
used first. Each run's truth is the same command with ``--no-cache``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, S3, run_cli, shared_trace, url_job_args, url_job_commands
from jobgen import job, write

from traceaug.cli import main
from traceaug.job import cache

DLRM = "kineto/jobs/dlrm_v100_8ranks"


def cli(*args: str) -> bytes:
    found = CliRunner().invoke(main, list(args))
    assert found.exit_code == 0, (args, found.output, found.exception)
    return found.stdout_bytes


def entries(root: Path) -> dict[str, int]:
    """Every entry under ``root``: {name: mtime_ns}."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*.entry")}


def outputs(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> tuple[Path, Path]:
    """Two generated 16-rank jobs: rank 3's loader late in A, rank 9's kernel in B."""
    base = tmp_path_factory.mktemp("jobs")
    return write(base / "a", job(16, 3, 400)), write(base / "b", job(16, 9, 300, where="gpu"))


def test_every_job_command_prints_the_same_cold_and_warm(jobs, tmp_path: Path) -> None:
    a, b = jobs
    store = tmp_path / "cache"
    for name in url_job_commands():
        (tmp_path / name).mkdir()
        args = url_job_args(name, str(a), str(tmp_path / name))
        if name == "diff":
            args[2] = str(b)
        got = []
        for run in ("cold", "warm"):
            before = entries(store)
            printed = cli(*args, "--cache", str(store), "--format", "csv") if name not in (
                "merge", "counters", "patterns", "critical-path") else cli(*args, "--cache", str(store))
            got.append((printed, outputs(tmp_path / name)))
            if run == "warm":  # nothing recomputed: no new entry
                assert set(entries(store)) == set(before), name
        assert got[0] == got[1], name
    # the job's critical path and diff --explain, from the ranks' tables of kind job_path
    for args in (("critical-path", str(a), str(tmp_path / "cp.json"), "--job"),
                 ("diff", str(a), str(b), "--explain", "--format", "csv")):
        cold = (cli(*args, "--cache", str(store)), outputs(tmp_path))
        before = entries(store)
        assert (cli(*args, "--cache", str(store)), outputs(tmp_path)) == cold, args
        assert set(entries(store)) == set(before)


def read_from_cache(monkeypatch, *args: str) -> tuple[bytes, str]:
    """``traceaug ARGS``'s output and the ranks its progress says came from the cache ("3 of 16")."""
    import traceaug.runtime as runtime

    monkeypatch.setattr(runtime.Runtime, "shows_progress", lambda self: not self.worker)
    found = CliRunner().invoke(main, list(args))
    assert found.exit_code == 0, (args, found.output, found.exception)
    said = [x.split(": ")[1] for x in found.stderr.split("\r") if "ranks from the cache" in x]
    return found.stdout_bytes, said[-1].strip() if said else "none"


TRUTH: dict[str, bytes] = {}  # each command's output with --no-cache on the job A


@pytest.mark.parametrize("order", [(("report", 0), ("kernels", 16), ("stragglers", 16), ("gaps", 16)),
                                   (("stragglers", 0), ("kernels", 16), ("critical-path", 16),
                                    ("launches", 16)),
                                   (("critical-path", 0), ("stragglers", 16), ("breakdown", 16)),
                                   (("kernels", 0), ("report", 0), ("kernels", 16), ("breakdown", 16))])
def test_a_second_command_reads_no_rank(jobs, tmp_path: Path, monkeypatch, order) -> None:
    """report / stragglers / critical-path --job read each rank once, as the load every job command is
    answered from; each later command reads none ("16 of 16" from the cache) and prints what it prints with
    ``--no-cache``. kernels reads its own lighter load, which does not answer report."""
    a, _ = jobs
    store = str(tmp_path / "cache")
    for name, held in order:
        args = [name, str(a), *(["--job", "--summary-only"] if name == "critical-path" else []),
                "--format", "csv"]
        got, said = read_from_cache(monkeypatch, *args, "--cache", store)
        assert said == f"{held} of 16", (order, name)
        if name not in TRUTH:
            TRUTH[name] = cli(*args, "--no-cache")
        assert got == TRUTH[name], (order, name)


def test_stragglers_with_no_cache_reads_only_what_it_needs(jobs, tmp_path: Path, monkeypatch) -> None:
    """With no cache to fill, ``stragglers`` reads its own kind, without the CPU ops' shapes and the
    [memory] events only report's sections read (computing them cost 0.16 CPU s a DLRM rank); with the
    cache on, the whole read every job command is answered from; both print the same."""
    import traceaug.job.run as job_run
    from traceaug.read.kinds import KINDS, MEMORY_CATEGORIES

    a, _ = jobs
    read: list[str] = []
    compute = job_run._compute
    monkeypatch.setattr(job_run, "_compute",
                        lambda work, *rest: read.append(work.kind) or compute(work, *rest))
    lean = cli("stragglers", str(a), "--format", "csv", "--no-cache")
    whole = cli("stragglers", str(a), "--format", "csv", "--cache", str(tmp_path / "cache"))
    assert read == ["stragglers", "job_path"]
    assert "Input Dims" not in KINDS["stragglers"].args and "Input Dims" in KINDS["job_path"].args
    assert not MEMORY_CATEGORIES & KINDS["stragglers"].categories
    assert lean == whole


def test_a_cold_jobs_files_are_hashed_off_the_main_thread_once_each(jobs, tmp_path: Path,
                                                                     monkeypatch) -> None:
    """Filling the cache, each rank's file is digested (hashed, or its memo read) once, on a pool's threads:
    hashing lets go of the GIL, so a cold job's files hash on every core."""
    import threading

    a, _ = jobs
    hashed: list[tuple[str, bool]] = []
    digest = cache.digest
    monkeypatch.setattr(cache, "digest", lambda path, *rest: hashed.append(
        (Path(path).name, threading.current_thread() is threading.main_thread())) or digest(path, *rest))
    cli("kernels", str(a), "--format", "csv", "--cache", str(tmp_path / "cache"))
    assert sorted(n for n, _ in hashed) == sorted(p.name for p in a.iterdir())
    assert not any(main for _, main in hashed)


def test_the_dlrm_job_cold_and_warm(tmp_path: Path) -> None:
    """``report`` fills the entries ``stragglers`` reads (one load per rank of kind ``job_path``)."""
    src = str(shared_trace(DLRM))
    store = str(tmp_path / "cache")
    truth = cli("stragglers", src, "--format", "csv", "--no-cache")
    assert not (tmp_path / "cache").exists()  # --no-cache keeps nothing
    for c in ("report", "stragglers", "info"):
        cold = cli(c, src, "--format", "csv", "--cache", store)
        made = entries(tmp_path / "cache")
        assert cli(c, src, "--format", "csv", "--cache", store) == cold
        assert set(entries(tmp_path / "cache")) == set(made)
        if c == "stragglers":  # from the tables report's run kept
            assert cold == truth
    kinds = {n.rsplit("/", 1)[-1].split(".")[0] for n in entries(tmp_path / "cache")}
    assert kinds == {"job_path", "analysis"}
    table = cli("info", src, "--cache", store).decode().splitlines()
    assert table[0].split()[-1] == "cache" and all(r.endswith("analysis, job_path") for r in table[1:9])
    assert "cache" not in cli("info", src, "--no-cache").decode().splitlines()[0]


def test_an_edit_keeping_size_and_mtime_rereads_exactly_that_rank(tmp_path: Path) -> None:
    d = write(tmp_path / "job", job(4, 1, 200))
    store = tmp_path / "cache"
    cli("kernels", str(d), "--cache", str(store))
    first = entries(store)
    rank2 = d / "rank-2.json"
    st = rank2.stat()
    text = rank2.read_bytes()
    assert text.count(b"gemm_kernel") >= 1
    rank2.write_bytes(text.replace(b"gemm_kernel", b"gemm_kernex"))  # same size
    os.utime(rank2, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert rank2.stat().st_size == st.st_size and rank2.stat().st_mtime_ns == st.st_mtime_ns
    warm = cli("kernels", str(d), "--cache", str(store), "--format", "csv")
    assert warm == cli("kernels", str(d), "--no-cache", "--format", "csv")
    assert b"gemm_kernex" in warm
    new = set(entries(store)) - set(first)
    assert len({n.split("/")[0] for n in new}) == 1  # one rank's: the others' were read
    assert len(new) == len(first) // 4  # its entries made again, all of them
    assert set(first) <= set(entries(store))


def _one_entry(tmp_path: Path) -> tuple[Path, Path, bytes]:
    """A 2-rank job, its cache filled by ``info``, one of its entries, and the right answer."""
    d = write(tmp_path / "job", job(2, 1, 200))
    store = tmp_path / "cache"
    truth = cli("info", str(d), "--format", "csv", "--no-cache")
    assert cli("info", str(d), "--format", "csv", "--cache", str(store)) == truth
    return d, sorted(store.rglob("*.entry"))[0], truth


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_entry_is_recomputed(tmp_path: Path, damage: str) -> None:
    d, entry, truth = _one_entry(tmp_path)
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    entry.write_bytes(bytes(data[:len(data) // 2] if damage == "truncate" else
                            b"" if damage == "empty" else data))
    assert cache.decode(entry.read_bytes()) is cache._BAD
    assert cli("info", str(d), "--format", "csv", "--cache", str(tmp_path / "cache")) == truth
    assert cache.decode(entry.read_bytes()) is not cache._BAD  # written again, whole


KILLED_WRITER = """
import os, sys, time
import traceaug.atomic as atomic
from traceaug.job import cache

real = atomic.atomic_output

def slow(path, mode="wb", hold=True):  # the write stops half way, so the kill lands inside it
    class Half:
        def __init__(self, f):
            self.f = f
        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            print("writing", flush=True)
            time.sleep(60)
    import contextlib
    @contextlib.contextmanager
    def opened():
        with real(path, mode, hold) as f:
            yield Half(f)
    return opened()

atomic.atomic_output = slow
cache.Entry(sys.argv[1], sys.argv[2], False).put(list(range(200000)))
"""


def test_a_writer_killed_mid_entry_leaves_nothing_to_read(tmp_path: Path) -> None:
    d, entry, truth = _one_entry(tmp_path)
    root = tmp_path / "cache"
    name = str(entry.relative_to(root))
    entry.unlink()
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(root), name],
                              stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert writer.stdout.readline() == b"writing\n"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert not entry.exists()
    left = [p for p in entry.parent.iterdir() if p.name.startswith(".")]
    assert left and all(p.name.endswith(".tmp") for p in left)  # the writer's half, hidden
    assert cli("info", str(d), "--format", "csv", "--cache", str(root)) == truth
    assert cache.decode(entry.read_bytes()) is not cache._BAD
    cache.Cache(str(root)).trim()  # a killed writer's file goes once it is old
    assert left[0].exists()
    os.utime(left[0], (time.time() - 2 * cache.STALE_TMP_S,) * 2)
    cache.Cache(str(root)).trim()
    assert not left[0].exists()


def test_two_commands_filling_the_cache_at_once(tmp_path: Path) -> None:
    d = write(tmp_path / "job", job(6, 2, 300))
    truth = cli("stragglers", str(d), "--format", "csv", "--no-cache")
    store = str(tmp_path / "cache")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    both = [subprocess.Popen([sys.executable, "-m", "traceaug", "stragglers", str(d), "--format", "csv",
                              "--cache", store], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            for _ in range(2)]
    for p in both:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert out == truth
    found = sorted((tmp_path / "cache").rglob("*.entry"))
    assert len(found) == 12  # per rank: its opened tables and its result
    assert all(cache.decode(p.read_bytes()) is not cache._BAD for p in found)
    assert cli("stragglers", str(d), "--format", "csv", "--cache", store) == truth


def test_the_bound_evicts_the_least_recently_used_first(tmp_path: Path) -> None:
    root = str(tmp_path / "cache")
    made = [cache.Entry(root, f"f{i}/analysis.{i}.entry", False) for i in range(5)]
    for i, e in enumerate(made):
        e.put(bytes(1000 + i))
        os.utime(Path(root) / e.name, (1_000_000 + i,) * 2)  # written in this order
    size = (Path(root) / made[0].name).stat().st_size
    assert made[0].get() == (True, bytes(1000))  # used now: the most recent
    assert cache.Cache(root, bound=3 * size + 10).trim() > 0
    kept = [e.get()[0] for e in made]
    assert kept == [True, False, False, True, True]


def test_where_the_cache_is(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("TRACEAUG_NO_CACHE")
    monkeypatch.delenv("TRACEAUG_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.where().root == str(tmp_path / "xdg" / "traceaug" / "tables")
    monkeypatch.setenv("TRACEAUG_CACHE", str(tmp_path / "there"))
    assert cache.where().root == str(tmp_path / "there")
    assert cache.where(str(tmp_path / "given")).root == str(tmp_path / "given")
    assert cache.where(str(tmp_path / "given"), off=True) is None
    monkeypatch.setenv("TRACEAUG_NO_CACHE", "1")
    assert cache.where() is None
    assert cache.max_bytes("2G") == 2_000_000_000 and cache.max_bytes("") == cache.DEFAULT_MAX


def test_cache_info_and_clear(tmp_path: Path) -> None:
    d = write(tmp_path / "job", job(2, 1, 200))
    store = str(tmp_path / "cache")
    cli("info", str(d), "--cache", store)
    import orjson

    found = orjson.loads(cli("cache", "info", "--cache", store, "--format", "json"))
    on_disk = sorted((tmp_path / "cache").rglob("*.entry"))
    assert found["entries"] == len(on_disk) == 2 and found["kinds"]["analysis"]["entries"] == 2
    assert found["bytes"] == sum(p.stat().st_size for p in on_disk)
    assert "2 entries" in cli("cache", "clear", "--cache", store).decode()
    assert not list((tmp_path / "cache").rglob("*.entry"))


def test_a_job_in_s3_and_a_cache_in_s3(s3: S3, tmp_path: Path) -> None:
    """``report`` of the job in the bucket, its cache here, and ``info``, its cache in the bucket."""
    opt = ("--storage-option", f"endpoint_url={s3.endpoint}")
    for command, store in (("report", str(tmp_path / "cache")), ("info", "s3://bucket/cache")):
        runs = [run_cli(command, "s3://bucket/job/", "--format", "csv", "--cache", store, *opt,
                        text=False, env=s3.env) for _ in range(2)]
        assert all(r.returncode == 0 for r in runs), runs[0].stderr.decode()
        assert runs[0].stdout == runs[1].stdout
    # report's 8 ranks' opened tables and results
    assert len(list((tmp_path / "cache").rglob("*.entry"))) == 16
    listed = run_cli("cache", "info", "--cache", "s3://bucket/cache", *opt, "--format", "json",
                     env=s3.env)
    assert '"entries": 8' in listed.stdout, listed.stderr


def test_a_local_job_and_a_cache_in_s3(s3: S3, jobs) -> None:
    """A local job's ranks kept in a bucket (no digest memo there: each file hashed, never skipped) and
    answered from it the second time."""
    opt = ("--storage-option", f"endpoint_url={s3.endpoint}")
    a, _ = jobs
    runs = [run_cli("info", str(a), "--format", "csv", "--cache", "s3://bucket/local", *opt,
                    text=False, env=s3.env) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr.decode()
    assert runs[0].stdout == runs[1].stdout
    listed = run_cli("cache", "info", "--cache", "s3://bucket/local", *opt, "--format", "json",
                     env=s3.env)
    assert '"entries": 16' in listed.stdout, listed.stderr


def test_a_capture_is_never_answered_from_an_entry_made_without_it(tmp_path: Path) -> None:
    """``--capture`` (the runtime's, no parameter of the work) changes what a rank's task returns: a run
    without it filled the cache, and the run with it read that entry back ("0 attributed"). The vLLM
    step replays 421 kernels from its graph (the issue's count); with the capture all 421 are attributed."""
    import json

    vllm = shared_trace("kineto/inference/vllm_decode_full/graph_execution.json.gz")
    store = str(tmp_path / "cache")
    plain = json.loads(cli("serving", str(vllm), "--summary-only", "--cache", store, "--format", "json"))
    captured = json.loads(cli("serving", str(vllm), "--summary-only", "--cache", store, "--format", "json",
                              "--capture", str(vllm.parent / "capture_traces")))
    assert [(r["graph_replayed"], r["attributed"]) for r in (plain["rows"][0], captured["rows"][0])] == [
        (421, 0), (421, 421)]


def test_a_warm_job_hands_on_each_rank_before_reading_the_next(jobs, tmp_path: Path, monkeypatch) -> None:
    """Warm, a rank's result is read from the cache only once the one before went to ``on_result``, whose
    answer the run holds in its place: a job's command holds what it reads of each rank, never every
    rank's whole result at once (issue 38: the warm run's peak memory independent of the ranks)."""
    from traceaug.job import parts
    from traceaug.job import run as job_run

    a, _ = jobs
    options = job_run.JobOptions(progress=False, cache=str(tmp_path / "cache"))
    items = job_run.items_of(options.select(a))
    work = job_run.Work("gpu_steps", parts.ops, opens=parts.open_ops)
    cold = job_run.run(work, items, options)  # (fills the cache)
    events: list = []
    get = cache.Entry.get
    monkeypatch.setattr(cache.Entry, "get", lambda self: events.append("read") or get(self))
    held = job_run.run(work, items, options,
                       on_result=lambda rank, ops: events.append(rank) or len(ops.ops["ts"]))
    assert held == {r: len(g.ops["ts"]) for r, g in cold.items()}
    assert len(cold) == 16 and events == [e for r in cold for e in ("read", r)]


def test_report_on_a_loaded_job_keeps_the_jobs_results_whole(tmp_path: Path) -> None:
    """report holds copies of a loaded ``Job``'s rank parts, cut to what it shows, never the Job's own: a
    second report of the same Job (another ``top`` between) answers as the job's directory does."""
    import traceaug

    d = write(tmp_path / "job", job(4, 1, 400, steps=2))
    loaded = traceaug.load_job(d)
    asked = [traceaug.report(loaded, top=top) for top in (3, 1, 3)]
    fresh = [traceaug.report(d, top=top, no_cache=True) for top in (3, 1)]
    for got, want in zip(asked, [*fresh, fresh[0]], strict=True):
        assert list(got) == list(want) and all(got[k].equals(want[k]) for k in want)
    assert "job: verdict" in asked[0]  # (the job's section: its replay models read from the parts)
