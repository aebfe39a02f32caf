"""nsys exports with unusual but legal contents (issue 24, items 8, 9 and 18): odd values in
the tables traceaug reads, a view that never ends, a WAL-mode export and one with a hot
journal. Exports are the real SAXPY export, copied and edited with sqlite3 (as in
tests/test_nsys_inputs.py); the kernel count every command must see is counted in the
edited copy's own CUPTI table."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import shared_trace

from traceaug.cli import main

SAXPY = "nsys/a100_saxpy_mpi_rank0.sqlite"
BLOB = "X'00ff41'"  # a NUL, a byte that is not UTF-8, and an 'A'
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"

ODD = {  # case -> the statements that make it, on a copy of SAXPY
    "enum_null_label": [
        "CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER, name TEXT, label TEXT)",
        "INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (1, 'CUDA_MEMCPY_OPER_HTOD', NULL), (2, NULL, NULL)",
        "CREATE TABLE IF NOT EXISTS ENUM_CUDA_MEM_KIND (id INTEGER, name TEXT, label TEXT)",
        "INSERT INTO ENUM_CUDA_MEM_KIND VALUES (0, 'PAGEABLE', NULL), (2, NULL, NULL)"],
    "enum_ids_not_numbers": [  # an id pasted into SQL ended the statement
        "CREATE TABLE IF NOT EXISTS ENUM_CUDA_MEM_KIND (id INTEGER, name TEXT, label TEXT)",
        "INSERT INTO ENUM_CUDA_MEM_KIND VALUES ('0 THEN 1 END; --', 'x', 'odd'), "
        "(2, 'y', 'Dev''ice')"],
    "blob_gpu_name": [f"UPDATE TARGET_INFO_GPU SET name = {BLOB}"],
    "blob_metadata": [f"UPDATE EXPORT_META_DATA SET value = {BLOB} "
                      "WHERE name = 'EXPORT_PRODUCT_VERSION'"],
    "blob_process_name": [f"UPDATE PROCESSES SET name = {BLOB}"],
    "blob_thread_name": [f"UPDATE StringIds SET value = {BLOB} "
                         "WHERE id IN (SELECT nameId FROM ThreadNames)"],
    "blob_nvtx_domain": [f"UPDATE NVTX_EVENTS SET text = {BLOB} WHERE eventType = 75"],
    "null_api_name": [  # StringIds rebuilt without its NOT NULL (CREATE TABLE AS drops it)
        "CREATE TABLE s2 AS SELECT * FROM StringIds", "DROP TABLE StringIds",
        "ALTER TABLE s2 RENAME TO StringIds",
        f"UPDATE StringIds SET value = NULL WHERE id IN (SELECT nameId FROM {RUNTIME} "
        "WHERE rowid % 3 = 0)",
        f"INSERT INTO StringIds VALUES (999999, {BLOB})",
        f"UPDATE {RUNTIME} SET nameId = 999999 WHERE rowid % 3 = 1"],
    "huge_mpi_rank": ["UPDATE NVTX_EVENTS SET text = 'MPI Rank 99999999999999999999999' "
                      "WHERE eventType = 39"],
}


def edited(tmp_path: Path, name: str, statements: list[str], journal: str | None = None) -> Path:
    dst = tmp_path / f"{name}.sqlite"
    shutil.copyfile(shared_trace(SAXPY), dst)
    con = sqlite3.connect(dst)
    if journal:
        con.execute(f"PRAGMA journal_mode = {journal}")
    for sql in statements:
        con.execute(sql)
    con.commit()
    con.close()
    return dst


def kernel_count(path: Path) -> int:
    """Kernels in the export, counted by sqlite3 itself."""
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as con:
        return con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]


def cli(*args) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.stdout, res.stderr


def info_kernels(path: Path) -> int:
    code, out, err = cli("info", "--format", "json", path)
    assert code == 0, err
    return json.loads(out)["kernels"]


@pytest.mark.parametrize("case", sorted(ODD))
def test_odd_value_is_read(tmp_path: Path, case: str) -> None:
    """Each odd value alone: converted to valid JSON, and info sees every kernel."""
    src = edited(tmp_path, case, ODD[case])
    want = kernel_count(src)
    assert want > 0
    code, _, err = cli("convert", src, tmp_path / "out.json")
    assert code == 0, err
    events = json.loads((tmp_path / "out.json").read_bytes())["traceEvents"]
    assert sum(e.get("cat") == "kernel" for e in events) == want
    assert info_kernels(src) == want


def test_odd_values_rank_and_names(tmp_path: Path) -> None:
    """What the odd values become: a BLOB is text, a rank no C int holds is no rank."""
    src = edited(tmp_path, "odd", ODD["blob_thread_name"] + ODD["huge_mpi_rank"])
    code, _, err = cli("convert", src, tmp_path / "out.json")
    assert code == 0, err
    doc = json.loads((tmp_path / "out.json").read_bytes())
    assert "distributedInfo" not in doc
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert "\0\ufffdA" in names


def every_command(src: Path, out: Path) -> dict[str, list]:
    return {
        "info": ["info", "--format", "json", src],
        "query": ["query", "--format", "json", src,
                  "SELECT COUNT(*) AS n FROM slice WHERE category = 'kernel'"],
        "kernels": ["kernels", "--format", "json", src],
        "gaps": ["gaps", "--format", "json", src],
        "breakdown": ["breakdown", "--format", "json", src],
        "launches": ["launches", "--format", "json", src],
        "report": ["report", src, "--html", out / "r.html"],
        "counters": ["counters", src, out / "c.json"],
        "critical-path": ["critical-path", src, out / "cp.json"],
        "patterns": ["patterns", src, out / "p.json"],
        "diff": ["diff", "--format", "json", src, src],
        "convert": ["convert", src, out / "conv.json"],
        "summary": ["summary", "--format", "json", src],
    }


def test_every_odd_value_through_every_command(tmp_path: Path) -> None:
    """One export holding every odd value at once, through every command that reads an
    export: each reads it, and those that count kernels count the export's."""
    statements = [s for case in sorted(ODD) for s in ODD[case]]
    src = edited(tmp_path, "all_odd", statements)
    want = kernel_count(src)
    out = tmp_path / "out"
    out.mkdir()
    for name, args in every_command(src, out).items():
        code, stdout, err = cli(*args)
        assert code == 0, (name, err)
        if name == "info":
            assert json.loads(stdout)["kernels"] == want
        elif name == "query":
            assert json.loads(stdout)["rows"] == [{"n": want}]
        elif name == "kernels":
            rows = json.loads(stdout)["kernels"]
            assert sum(r["count"] for r in rows if r["type"] != "memory") == want
        elif name == "convert":
            events = json.loads((out / "conv.json").read_bytes())["traceEvents"]
            assert sum(e.get("cat") == "kernel" for e in events) == want
    for f in ("c.json", "cp.json", "p.json"):
        json.loads((out / f).read_bytes())


# ----- 24.8: a view that never ends ---------------------------------------------------------

def test_view_that_never_ends_is_stopped(tmp_path: Path) -> None:
    """A table traceaug reads replaced by a view that runs forever (a recursive CTE that
    yields nothing): SQLite's progress handler stops it, one line naming the export."""
    src = edited(tmp_path, "view", [
        "DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET",
        "CREATE VIEW CUPTI_ACTIVITY_KIND_MEMSET AS WITH RECURSIVE c(x) AS "
        "(SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x AS start FROM c WHERE x < 0"])
    res = subprocess.run([sys.executable, "-m", "traceaug", "info", str(src)],
                         capture_output=True, text=True, timeout=120)  # before: never ended
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"traceaug: error: {src}: ")
    assert "a view that never ends" in res.stderr


# ----- 24.18: nothing written beside an export ----------------------------------------------

def test_wal_export_leaves_nothing_beside_it(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    src = edited(folder, "wal", [], journal="WAL")
    assert sorted(os.listdir(folder)) == ["wal.sqlite"]
    before = src.read_bytes()
    assert info_kernels(src) == kernel_count(src)
    assert sorted(os.listdir(folder)) == ["wal.sqlite"]  # no -shm, no -wal
    assert src.read_bytes() == before


def test_hot_journal_is_rolled_back_in_a_copy(tmp_path: Path) -> None:
    """A writer killed mid-transaction left a hot journal and half-written pages (its kernels
    deleted): the export reads as last committed, and the journal and file stay as they are."""
    folder = tmp_path / "hot"
    folder.mkdir()
    src = edited(folder, "hot", [])
    want = kernel_count(src)
    subprocess.run([sys.executable, "-c", f"""
import os, sqlite3
con = sqlite3.connect({str(src)!r}, isolation_level=None)
con.execute("PRAGMA cache_size = 1")  # spill: pages of the transaction reach the file
con.execute("BEGIN")
con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
con.execute("UPDATE StringIds SET value = value || '{"x" * 60}'")
os._exit(0)  # no commit, no rollback
"""], check=True, timeout=60)
    journal = folder / "hot.sqlite-journal"
    assert journal.stat().st_size > 0
    files = {p: p.read_bytes() for p in (src, journal)}
    assert info_kernels(src) == want
    assert {p: p.read_bytes() for p in folder.iterdir()} == files


# ----- 24.17: convert gives the verdict every other command gives -----------------------------

@pytest.mark.parametrize("start,end", [(2**63 - 500, 2**63 - 1), (-(2**63), -(2**63) + 500)])
def test_convert_refuses_times_no_command_reads(tmp_path: Path, start: int, end: int) -> None:
    """A kernel at ±2^63 ns: convert wrote a trace (ts ±9.22e15 µs) every command then refused;
    now convert refuses it too, with the line the others give, and writes nothing."""
    src = edited(tmp_path, "edge", [
        f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = {start}, end = {end} "
        "WHERE rowid = (SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)"])
    lines = set()
    for args in (["convert", src, tmp_path / "out.json"], ["info", src], ["kernels", src],
                 ["counters", src, tmp_path / "c.json"]):
        code, _, err = cli(*args)
        assert code == 1 and err.count("\n") == 1, (args[0], err)
        lines.add(err)
    assert len(lines) == 1 and "out of range" in lines.pop()
    assert sorted(os.listdir(tmp_path)) == ["edge.sqlite"]


@pytest.mark.parametrize("table,column,where", [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "start", ""), (RUNTIME, "end", ""),
    ("NVTX_EVENTS", "start", "AND eventType IN (59, 60) AND globalTid IS NOT NULL")])
def test_times_that_are_text_are_refused(tmp_path: Path, table: str, column: str,
                                         where: str) -> None:
    """A start or end stored as text (SQLite keeps any type in any column): every command
    raised ValueError (a traceback); now each refuses in one line naming the export, the
    table and the value, and writes nothing."""
    src = edited(tmp_path, "text_time", [
        f"UPDATE {table} SET {column} = 'soon' WHERE rowid = (SELECT MIN(rowid) FROM {table} "
        f"WHERE end IS NOT NULL {where})"])
    out = tmp_path / "out"
    out.mkdir()
    for name, args in every_command(src, out).items():
        code, stdout, err = cli(*args)
        assert code == 1 and err.count("\n") == 1, (name, err)
        assert err.startswith(f"traceaug: error: {src}: a {column} in {table} is 'soon', "
                              "not a number of ns"), (name, err)
    assert os.listdir(out) == []
