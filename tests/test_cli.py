"""The command line: help, version, query formats, info on files and directories."""

from __future__ import annotations

import json

from conftest import run_cli as cli
from conftest import shared_trace

import traceaug


def test_help_and_version() -> None:
    assert cli("--version").stdout.strip() == f"traceaug, version {traceaug.__version__}"
    out = cli("--help").stdout
    assert "query" in out and "info" in out


def test_query_formats(tmp_path) -> None:
    path = shared_trace("kineto/a100_triton.json.gz")
    sql = "SELECT name, dur FROM traceaug_gpu_op"
    as_json = json.loads(cli("query", str(path), sql, "--format", "json").stdout)["rows"]
    assert as_json == [{"name": "triton_poi_fused_add_cos_sin_0", "dur": 1760}]
    assert cli("query", str(path), sql, "--format", "csv").stdout.splitlines() == [
        "name,dur", "triton_poi_fused_add_cos_sin_0,1760"]
    mixed = "SELECT CAST('ab' AS BLOB) AS b, NULL AS n, 1.5 AS f, 7 AS i"
    assert json.loads(cli("query", str(path), mixed, "--format", "json").stdout)["rows"] == [
        {"b": "0x6162", "n": None, "f": 1.5, "i": 7}]
    assert cli("query", str(path), mixed, "--format", "csv").stdout.splitlines() == [
        "b,n,f,i", "0x6162,,1.5,7"]
    sql_file = tmp_path / "q.sql"
    sql_file.write_text(sql)
    table = cli("query", str(path), "-f", str(sql_file)).stdout
    assert "triton_poi_fused_add_cos_sin_0" in table and "1760" in table


def test_info_reports_counts_and_rank() -> None:
    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    out = json.loads(cli("info", str(path), "--format", "json").stdout)
    assert out["rank"] == 0 and out["world_size"] == 16
    assert out["kernels"] == 6080
    assert out["profiler_steps"] == 5
    assert len(out["streams"]) == 6
    assert out["warnings"] == []


def test_query_on_directory_needs_rank() -> None:
    folder = shared_trace("kineto/multi_rank_sampled")
    result = cli("query", str(folder), "SELECT 1 AS x")
    assert result.returncode == 1 and "choose one with --rank" in result.stderr
    ok = cli("query", str(folder), "SELECT COUNT(*) AS n FROM traceaug_gpu_op WHERE kind='kernel'",
             "--rank", "1", "--format", "csv")
    assert ok.returncode == 0
    assert ok.stdout.splitlines()[1].isdigit()


def test_query_loads_args_and_flows_when_the_sql_reads_them() -> None:
    """A kernel's registers are not kept by an analysis load; SQL that reads args gets all."""
    path = shared_trace("kineto/a100_triton.json.gz")
    regs = ("SELECT extract_arg(arg_set_id, 'args.registers per thread') AS regs FROM slice "
            "WHERE category = 'kernel'")
    assert json.loads(cli("query", str(path), regs, "--format", "json").stdout)["rows"] == [{"regs": 16}]
    lean = json.loads(cli("query", str(path), regs, "--lean", "--format", "json").stdout)["rows"]
    assert lean == [{"regs": None}]
    flows = "SELECT COUNT(*) AS n FROM flow"
    assert json.loads(cli("query", str(path), flows, "--format", "json").stdout)["rows"][0]["n"] > 0
    assert json.loads(cli("query", str(path), flows, "--lean", "--format", "json").stdout)["rows"] == [
        {"n": 0}]
    meta = "SELECT full_load FROM traceaug_meta"
    assert json.loads(cli("query", str(path), meta, "--format", "json").stdout)["rows"] == [
        {"full_load": 0}]
    assert json.loads(cli("query", str(path), meta, "--full", "--format", "json").stdout)["rows"] == [
        {"full_load": 1}]


def test_exit_codes_and_complete_output_through_a_pipe() -> None:
    """The entry point ends the process without unloading modules: the exit codes stay
    click's and traceaug's, and everything written reaches the reader."""
    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    rows = cli("query", str(path), "SELECT ts, dur, name FROM slice", "--format", "csv")
    count = cli("query", str(path), "SELECT COUNT(*) AS n FROM slice", "--format", "csv")
    assert rows.returncode == 0 and rows.stdout.endswith("\n")
    assert len(rows.stdout.splitlines()) == 1 + int(count.stdout.splitlines()[1]) > 40000
    usage = cli("counters")
    assert usage.returncode == 2 and "Missing argument 'IN'" in usage.stderr
    missing = cli("info", str(path) + ".missing")
    assert missing.returncode == 1 and missing.stderr.startswith("traceaug: error: ")


def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    import subprocess
    import sys

    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    proc = subprocess.Popen([sys.executable, "-m", "traceaug", "query", str(path),
                             "SELECT * FROM slice", "--format", "csv"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"id,ts,dur")
    proc.stdout.close()  # as `| head -1` does, long before the rows end (MBs past the pipe buffer)
    assert proc.stderr.read() == b""
    assert proc.wait() == 0  # a reader that left is not an error (click: EPIPE ends quietly, 0)
