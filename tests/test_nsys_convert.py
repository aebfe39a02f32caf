"""``traceaug convert`` and nsys exports as inputs: the converted trace, loaded in the engine,
holds every kernel, copy and API call of the export to the nanosecond (checked against SQL
run here on the SQLite file itself)."""

from __future__ import annotations

import gzip
import os
import shutil
import sqlite3
import subprocess
import sys

import orjson
import pytest
from click.testing import CliRunner
from conftest import ROOT, shared_trace

import traceaug
from traceaug.cli import main
from traceaug.read import nsys

SAXPY = "nsys/a100_saxpy_mpi_rank0.sqlite"


def _sqlite(path, sql):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    src = shared_trace(SAXPY)
    out = tmp_path_factory.mktemp("nsys") / "saxpy.json.gz"
    r = CliRunner().invoke(main, ["convert", str(src), str(out)])
    assert r.exit_code == 0, r.output
    return src, out


@pytest.fixture(scope="module")
def loaded(converted):
    src, out = converted
    with traceaug.load(out, full=True) as t:
        yield src, t


def _times(t, where: str) -> list[tuple[int, int]]:
    c = t.columns(f"SELECT ts, dur FROM slice WHERE {where} ORDER BY ts, dur")
    base = t.base_ns
    return [(int(ts) + base, int(d)) for ts, d in zip(c["ts"].tolist(), c["dur"].tolist())]


@pytest.mark.parametrize("table, where", [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "category = 'kernel'"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "category = 'gpu_memcpy'"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "category IN ('cuda_runtime', 'cuda_driver')"),
])
def test_every_event_exact_to_the_ns(loaded, table, where):
    src, t = loaded
    want = sorted(_sqlite(src, f"SELECT start, end - start FROM {table}"))
    got = _times(t, where)
    assert len(got) == len(want) > 0
    assert got == [tuple(r) for r in want]
    (n, total), = _sqlite(src, f"SELECT COUNT(*), SUM(end - start) FROM {table}")
    assert (len(got), sum(d for _, d in got)) == (n, total)


def test_known_counts_and_totals(loaded):
    _, t = loaded
    c = t.columns("SELECT category, COUNT(*) AS n, SUM(dur) AS total FROM slice GROUP BY category "
                  "ORDER BY category")
    got = dict(zip(c["category"].tolist(), zip(c["n"].tolist(), c["total"].tolist())))
    # the figures the SQL above gives for this export (kept here to catch a changed file)
    assert got["kernel"] == (5, 88_573_480)
    assert got["gpu_memcpy"][0] == 15
    assert got["cuda_runtime"][0] + got.get("cuda_driver", (0, 0))[0] == 95


def test_kernel_args_and_streams(loaded):
    src, t = loaded
    t.include("traceaug.base")
    ops = t.columns("SELECT device, stream, correlation FROM traceaug_gpu_op WHERE kind = 'kernel' "
                    "ORDER BY correlation")
    want = _sqlite(src, "SELECT deviceId, streamId, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                        "ORDER BY correlationId")
    assert list(zip(*(ops[k].tolist() for k in ("device", "stream", "correlation")))) == want
    grid = t.columns("SELECT extract_arg(arg_set_id, 'args.grid[0]') AS gx, "
                     "extract_arg(arg_set_id, 'args.block[0]') AS bx FROM slice WHERE category = 'kernel'")
    assert set(grid["gx"].tolist()) == {2} and set(grid["bx"].tolist()) == {512}
    copies = t.columns("SELECT name, extract_arg(arg_set_id, 'args.bytes') AS b, "
                       "extract_arg(arg_set_id, 'args.memory bandwidth (GB/s)') AS bw, dur "
                       "FROM slice WHERE category = 'gpu_memcpy'")
    names = set(copies["name"].tolist())
    assert names == {"Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"}
    (total,), = _sqlite(src, "SELECT SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    assert sum(copies["b"].tolist()) == total
    for b, bw, d in zip(copies["b"].tolist(), copies["bw"].tolist(), copies["dur"].tolist()):
        assert bw == pytest.approx(b / d)


def test_flows_names_and_annotations(loaded):
    src, t = loaded
    # one ac2g flow per GPU op whose launch call is in the export, from that call to the op
    flows = t.columns("SELECT o.category AS oc, i.category AS ic FROM flow f "
                      "JOIN slice o ON o.id = f.slice_out JOIN slice i ON i.id = f.slice_in")
    (ops,), = _sqlite(src, "SELECT (SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL) + "
                           "(SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY)")
    assert len(flows["oc"]) == ops == 20
    assert set(flows["oc"].tolist()) == {"cuda_runtime"}
    assert set(flows["ic"].tolist()) == {"kernel", "gpu_memcpy"}
    (ranges,), = _sqlite(src, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) "
                              "AND end IS NOT NULL")
    ann = t.columns("SELECT name FROM slice WHERE category = 'user_annotation'")
    assert len(ann["name"]) == ranges and ann["name"].tolist().count("saxpy") == 5
    assert "MPI_Send" in set(ann["name"].tolist())
    names = t.columns("SELECT p.name AS p, t.name AS t FROM thread t JOIN process p USING (upid) "
                      "WHERE t.name IS NOT NULL ORDER BY 1, 2")
    pairs = set(zip(names["p"].tolist(), names["t"].tolist()))
    assert ("GPU 0", "stream 7") in pairs and ("./saxpy-mpi-cuda", "MPI Rank 0") in pairs
    stats = t.columns("SELECT name, value FROM stats WHERE value > 0 AND severity IN ('error', 'data_loss')")
    assert stats["name"].tolist() == []


def test_text_exact_and_kineto_header(converted):
    _, out = converted
    raw = gzip.decompress(out.read_bytes())
    doc = orjson.loads(raw)
    assert doc["schemaVersion"] == 1 and doc["deviceProperties"][0]["name"] == "NVIDIA A100-SXM4-40GB"
    assert doc["nsysExport"]["table"] == "EXPORT_META_DATA"
    assert b'"ts":924922.186,"dur":17704.808' in raw  # the first kernel: 924922186 ns, 17704808 ns
    assert out.read_bytes()[:2] == b"\x1f\x8b"


def test_newer_metadata_schema(tmp_path, converted):
    src, out = converted
    copy = tmp_path / "newer.sqlite"
    shutil.copy(src, copy)
    copy.chmod(0o644)
    con = sqlite3.connect(copy)
    con.execute("ALTER TABLE EXPORT_META_DATA RENAME TO META_DATA_EXPORT")
    con.commit()
    con.close()
    new = tmp_path / "newer.json"
    r = CliRunner().invoke(main, ["convert", str(copy), str(new)])
    assert r.exit_code == 0, r.output
    a, b = orjson.loads(gzip.decompress(out.read_bytes())), orjson.loads(new.read_bytes())
    assert b["nsysExport"]["table"] == "META_DATA_EXPORT"
    assert f": {len(b['traceEvents'])} events" in r.output  # what convert says it wrote
    assert a["traceEvents"] == b["traceEvents"]


def test_memset_and_missing_tables(tmp_path):
    """An export with a memset and no NVTX or runtime tables still converts (known answer)."""
    db = tmp_path / "small.sqlite"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INT, end INT, deviceId INT, contextId INT,
            streamId INT, correlationId INT, globalPid INT, value INT, bytes INT, memKind INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1000000001, 1000002001, 1, 1, 13, 5, 0, 0, 4000, 2);
    """)
    con.commit()
    con.close()
    out = tmp_path / "small.json"
    assert nsys.convert(db, out) == 6  # the memset; GPU 1: process name, label, sort; stream: name, sort
    doc = orjson.loads(out.read_bytes())
    (ev,) = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert ev["name"] == "Memset (Device)" and ev["cat"] == "gpu_memset"
    assert (ev["pid"], ev["tid"], ev["ts"], ev["dur"]) == (1, 13, 1000000.001, 2.0)
    assert ev["args"]["memory bandwidth (GB/s)"] == 2.0 and ev["args"]["bytes"] == 4000
    assert b'"ts":1000000.001,"dur":2.000' in out.read_bytes()


def test_us_text():
    assert [nsys.us(v) for v in (0, 7, 1000, 123456789, -1500)] == [
        "0.000", "0.007", "1.000", "123456.789", "-1.500"]


def test_refusals_leave_nothing(tmp_path, converted):
    src, _ = converted
    runner = CliRunner()
    cases = [
        ([str(src), str(src)], "is the input"),
        ([str(tmp_path / "run.nsys-rep"), str(tmp_path / "o.json")], "nsys export --type sqlite"),
        ([str(ROOT / "README.md"), str(tmp_path / "o.json")], "not an SQLite file"),
    ]
    bad = tmp_path / "plain.sqlite"
    sqlite3.connect(bad).execute("CREATE TABLE t (x)").connection.commit()
    cases.append(([str(bad), str(tmp_path / "o.json")], "not an Nsight Systems export"))
    cut = tmp_path / "cut.sqlite"  # a truncated export: SQLite finds it malformed on the way
    cut.write_bytes(src.read_bytes()[:300_000])
    cases.append(([str(cut), str(tmp_path / "o.json")], "cut.sqlite: cannot read"))
    before = src.stat().st_mtime_ns
    for args, msg in cases:
        r = runner.invoke(main, ["convert", *args])
        assert r.exit_code == 1
        assert msg in r.output and r.output.startswith("traceaug: error: ")
        assert r.output.count("\n") == 1
    assert not (tmp_path / "o.json").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert src.stat().st_mtime_ns == before


def test_commands_take_the_export_and_clean_up(tmp_path):
    """info / counters / diff on the .sqlite itself, in a real process: the temporary JSON is
    removed when the command ends; a .nsys-rep is refused in one line."""
    src = shared_trace(SAXPY)
    env_tmp = tmp_path / "tmp"
    env_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(env_tmp), "PYTHONPATH": str(ROOT)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "traceaug", *args], capture_output=True,
                              text=True, env=env)

    r = cli("info", str(src), "--format", "json")
    assert r.returncode == 0, r.stderr
    rec = orjson.loads(r.stdout)
    rec = rec[0] if isinstance(rec, list) else rec
    assert (rec["kernels"], rec["memcpys"], rec["runtime_calls"]) == (5, 15, 95)
    out = tmp_path / "c.json.gz"
    r = cli("counters", str(src), str(out), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(gzip.decompress(out.read_bytes()))
    assert sum(e.get("ph") == "C" for e in doc["traceEvents"]) == 40
    assert sum(e.get("cat") == "kernel" for e in doc["traceEvents"]) == 5
    r = cli("diff", str(src), str(src), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert list(env_tmp.iterdir()) == []
    r = cli("info", str(tmp_path / "run.nsys-rep"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "nsys export --type sqlite" in r.stderr


def test_negative_times_take_the_exact_path(tmp_path):
    """Rows with a negative start or duration (a clock step, a broken record) leave the flat
    printf for the per-value one and still come out exact; the others take the flat one."""
    db = tmp_path / "neg.sqlite"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel_v7000'), (2, 'k');
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT,
            globalTid INT, correlationId INT, nameId INT, returnValue INT, callchainId INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, contextId INT,
            streamId INT, correlationId INT, globalPid INT, demangledName INT, shortName INT,
            gridX INT, gridY INT, gridZ INT, blockX INT, blockY INT, blockZ INT,
            staticSharedMemory INT, dynamicSharedMemory INT, registersPerThread INT);
    """)
    tid = (7 << 24) | 9
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 1, 0, 0)",
                    [(-500, 20, tid, 1), (-2500, -1000, tid, 2), (1234567, 1236067, tid, 3)])
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES "
                    "(?, ?, 0, 1, 7, ?, 7 << 24, 2, 2, 1, 1, 1, 32, 1, 1, 0, 0, 16)",
                    [(30, 1029, 1), (4000, 3001, 2), (1240000, 1241500, 3)])
    con.commit()
    con.close()
    out = tmp_path / "neg.json"
    nsys.convert(db, out)
    doc = orjson.loads(out.read_bytes())
    text = out.read_text()
    api = [(e["ts"], e["dur"]) for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"]
    assert api == [(-0.5, 0.52), (-2.5, 1.5), (1234.567, 1.5)]
    assert '"ts":-0.500,"dur":0.520' in text and '"ts":-2.500,"dur":1.500' in text
    assert '"ts":4.000,"dur":-0.999' in text  # the kernel that ends before it starts
    assert '{"ph":"s","id":2,"pid":7,"tid":9,"ts":-2.500,' in text  # its launch, negative
    assert '"ts":1234.567,"dur":1.500' in text and '"ts":1240.000,"dur":1.500' in text


def test_launch_lookup_is_one_search():
    """The launch of a correlation is found by one search of ``_launch``'s own key (no second
    index, no rowid lookup): what keeps the GPU and runtime joins cheap on large exports."""
    with nsys.Export(shared_trace(SAXPY)) as ex:
        assert nsys._prepare_launches(ex)
        plan = " | ".join(r[3] for r in ex.rows(
            "EXPLAIN QUERY PLAN SELECT o.start, l.gtid FROM CUPTI_ACTIVITY_KIND_KERNEL o "
            "LEFT JOIN _launch l ON l.corr = o.correlationId AND l.p = o.globalPid >> 24"))
        assert "SEARCH l USING PRIMARY KEY (corr=? AND p=?)" in plan, plan
        (n,) = next(ex.rows("SELECT COUNT(*) FROM _launch"))
        assert n == _sqlite(ex.path, "SELECT COUNT(DISTINCT correlationId) FROM "
                                     "CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
