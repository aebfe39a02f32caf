"""nsys exports as inputs of every command: messages, tables and records name the ``.sqlite``
the user gave (never its temporary Chrome JSON)."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from conftest import shared_trace

import traceaug
from traceaug.cli import main
from traceaug.read import nsys

SAXPY = "nsys/a100_saxpy_mpi_rank0.sqlite"


def _cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def _no_temp_name(text: str, src: Path) -> None:
    """Nothing but ``src`` is named: no temporary conversion (``<stem>.<random>.json``)."""
    assert f"{src.stem}." not in text.replace(src.name, "")


def test_info_names_the_export():
    src = shared_trace(SAXPY)
    r = _cli("info", src, "--format", "json")
    assert r.exit_code == 0, r.output
    rec = orjson.loads(r.output)  # one trace: one record
    assert rec["file"] == str(src)
    assert (rec["kernels"], rec["memcpys"], rec["runtime_calls"]) == (5, 15, 95)
    assert rec["rank"] == 0  # the MPI rank nsys recorded, as the conversion's distributedInfo
    r = _cli("info", src)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].split() == ["file", str(src)]
    _no_temp_name(r.output, src)
    assert traceaug.info(src)[0]["file"] == str(src)


def test_diff_names_the_exports(tmp_path):
    src = shared_trace(SAXPY)
    other = tmp_path / "other.sqlite"
    shutil.copy(src, other)
    r = _cli("diff", src, other, "--format", "json")
    assert r.exit_code == 0, r.output
    (rank,) = orjson.loads(r.output)["ranks"]
    assert (rank["a"], rank["b"]) == (str(src), str(other))
    assert rank["summary"]["a"]["gpu_busy_ns"] == rank["summary"]["b"]["gpu_busy_ns"] > 0
    r = _cli("diff", src, other)
    assert r.exit_code == 0, r.output
    assert f"A = {src}\n" in r.output and f"B = {other}  (" in r.output
    _no_temp_name(r.output, src)
    r = _cli("diff", src, other, "--step", "3")  # an error raised after the load
    assert r.exit_code == 1
    assert r.output == f"traceaug: error: {src}: no ProfilerStep#3 (steps: none)\n"


def test_counters_record_and_output_name(tmp_path):
    """A rewriter's record names the export; in an OUT directory its output is ``<stem>.json``."""
    src = shared_trace(SAXPY)
    r = _cli("counters", src, f"{tmp_path}/out/", "--format", "json")
    assert r.exit_code == 0, r.output
    out = tmp_path / "out" / "a100_saxpy_mpi_rank0.json"
    assert orjson.loads(r.stdout)["outputs"] == [str(out)]
    doc = orjson.loads(out.read_bytes())
    assert sum(e.get("ph") == "C" for e in doc["traceEvents"]) == 40
    assert doc["nsysExport"]["file"] == src.name


def test_error_reading_the_conversion_names_the_export(tmp_path):
    """A conversion damaged on disk after it was made (a /tmp cleaner, a full disk): the
    engine's error names the .sqlite, not the temporary file."""
    src = tmp_path / "run.sqlite"
    shutil.copy(shared_trace(SAXPY), src)
    tmp = nsys.converted(src)
    text = tmp.read_bytes()
    tmp.write_bytes(text[: len(text) // 2])
    with pytest.raises(traceaug.TraceaugError) as e:
        traceaug.load(src)
    incomplete = f"{src}: JSON trace file is incomplete: malformed JSON at its end (truncated?)"
    assert str(e.value) == incomplete
    r = _cli("info", src)
    assert (r.exit_code, r.output) == (1, f"traceaug: error: {incomplete}\n")
    tmp.write_bytes(b"")
    r = _cli("query", src, "SELECT 1")
    assert (r.exit_code, r.output) == (1, f"traceaug: error: {src}: empty file\n")


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """Where conversions go during the test (``tempfile``'s directory)."""
    import tempfile

    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


@pytest.mark.parametrize("args", [
    ("counters", "{x}", "{x}"),
    ("counters", "{x}", "{link}"),
    ("diff", "{x}", "{y}", "--trace", "{y}"),
    ("diff", "{x}", "{y}", "--trace", "{x}"),
    ("diff", "{x}", "{y}", "--html", "{link}"),
])
def test_output_over_the_export_refused_before_any_work(tmp_path, temp_dir, args):
    """An OUT that is (or resolves to) the .sqlite input: one line, the export untouched and
    not even converted."""
    x, y, link = tmp_path / "x.sqlite", tmp_path / "y.sqlite", tmp_path / "link.json"
    shutil.copy(shared_trace(SAXPY), x)
    shutil.copy(x, y)
    link.symlink_to(x.name)
    before = x.read_bytes()
    r = _cli(*(a.format(x=x, y=y, link=link) for a in args))
    assert r.exit_code == 1
    out = args[-1] if args[0] == "diff" else args[2]
    # the guard names the input when the output is another name for it (a symlink)
    said = f"traceaug: error: {out.format(x=x, y=y, link=link)}: is the input file"
    assert r.output.startswith(said) and r.output.endswith("; choose another output\n")
    assert r.output.count("\n") == 1
    assert x.read_bytes() == before
    assert list(temp_dir.iterdir()) == []  # no conversion was made


def _export_with_rank(src: Path, dst: Path, rank: int | None) -> Path:
    """A copy of the saxpy export whose MPI thread name says ``MPI Rank <rank>`` (none: the
    row is gone)."""
    import sqlite3

    shutil.copy(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    if rank is None:
        con.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 39")
    else:
        con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE eventType = 39", (f"MPI Rank {rank}",))
    con.commit()
    con.close()
    return dst


def test_directory_of_exports_resolves_ranks(tmp_path):
    """Per-rank exports in a directory: the rank nsys recorded (its MPI thread name) wins over
    the file name, which counts when nsys recorded none."""
    from traceaug.read.ranks import resolve, select

    src = shared_trace(SAXPY)
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(src, runs / "a.sqlite")  # records MPI Rank 0
    _export_with_rank(src, runs / "rank9_b.sqlite", 1)  # recorded 1, not the name's 9
    _export_with_rank(src, runs / "c_rank2.sqlite", None)  # nothing recorded: the name's 2
    (runs / "notes.txt").write_text("not a trace")
    found = [(f.rank, f.path.name) for f in resolve(runs)]
    assert found == [(0, "a.sqlite"), (1, "rank9_b.sqlite"), (2, "c_rank2.sqlite")]
    assert [f.path.name for f in select(runs, 1)] == ["rank9_b.sqlite"]
    r = _cli("info", runs, "--rank", "1", "--format", "json")
    assert r.exit_code == 0, r.output
    assert orjson.loads(r.output)["rank"] == 1  # recorded: in the conversion's header too
    r = _cli("info", runs, "--rank", "2", "--format", "json")
    assert r.exit_code == 0, r.output
    rec = orjson.loads(r.output)
    assert (rec["rank"], rec["file"], rec["kernels"]) == (2, str(runs / "c_rank2.sqlite"), 5)
    r = _cli("counters", runs, tmp_path / "out", "--rank", "0", "--format", "json")
    assert r.exit_code == 0, r.output
    assert orjson.loads(r.stdout)["outputs"] == [str(tmp_path / "out" / "a.json")]
    # a lone export holding another rank than the one asked for
    r = _cli("info", runs / "rank9_b.sqlite", "--rank", "9")
    assert r.output == f"traceaug: error: {runs / 'rank9_b.sqlite'}: holds rank 1, not rank 9\n"


def test_directory_exports_same_rank_or_none(tmp_path):
    src = shared_trace(SAXPY)
    twice = tmp_path / "twice"
    twice.mkdir()
    shutil.copy(src, twice / "a.sqlite")
    shutil.copy(src, twice / "b.sqlite")
    r = _cli("info", twice)
    assert r.output == f"traceaug: error: {twice}: rank 0 appears twice: a.sqlite and b.sqlite\n"
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    _export_with_rank(src, unknown / "a.sqlite", None)
    _export_with_rank(src, unknown / "b.sqlite", None)
    r = _cli("info", unknown)
    assert r.exit_code == 1 and "cannot tell the rank of a.sqlite, b.sqlite" in r.output
