"""Nsight Systems SQLite export -> Chrome JSON in Kineto conventions, streamed in batches (not all in memory).
GPU ops go on pid device / tid stream, API calls and NVTX on CPU threads; ts are exact µs from integer ns."""

from __future__ import annotations

import atexit
import contextlib
import gzip
import os
import re
import shutil
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson

import traceaug.atomic as atomic
import traceaug.interrupt as interrupt

from ..errors import TraceaugError
from ..sql_text import literal
from . import source

SQLITE_MAGIC = source.SQLITE_MAGIC
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
META_TABLES = ("EXPORT_META_DATA", "META_DATA_EXPORT")  # older / newer exports
BATCH = 4096  # rows per fetchmany
# What an unfinished write leaves beside a database: a hot rollback journal, a WAL with frames.
UNFINISHED = (("-journal", bytes.fromhex("d9d505f920a163d7")), ("-wal", bytes.fromhex("377f06")))
PROGRESS_EVERY = 100_000  # SQLite VM steps between calls of the progress handler
STEPS_PER_BYTE = 50  # a whole conversion takes a few steps per byte of export at most
STEPS_FLOOR = 20_000_000  # a fraction of a second of SQLite, for small exports
GPU_SORT_BASE = 1 << 24  # Kineto's process_sort_index for GPU processes: after the CPU ones
_VERSION_SUFFIX = re.compile(r"_v\d+$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel

# nsys ENUM_CUDA_MEMCPY_OPER, in Kineto's short spelling (overridden by the file's own enum).
COPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
              7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
# nsys ENUM_CUDA_MEM_KIND.
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
             5: "Device Static", 6: "Managed Static", 7: "Unknown"}
NVTX_RANGES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
NVTX_DOMAIN_CREATE = 75
NVTX_THREAD_NAME = 39  # nvtxNameOsThread: nsys's MPI trace names the rank's thread "MPI Rank N"
_MPI_RANK = re.compile(r"MPI Rank (\d+)")


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


def is_sqlite(path: Path) -> bool:
    """True when the file starts with SQLite's magic string."""
    return _starts_with(path, SQLITE_MAGIC)


def is_report(path: Path) -> bool:
    """True for an Nsight Systems report (``.nsys-rep``, ``.qdrep``), which only nsys reads."""
    return path.name.endswith(REPORT_SUFFIXES)


def recorded_rank(path: Path) -> int | None:
    """The MPI rank the export ``path`` records (``Export.mpi_rank``); None when it records
    none or is no readable export (its load says why)."""
    try:
        with Export(path) as ex:
            return ex.mpi_rank()
    except TraceaugError:
        return None


def report_error(path: Path) -> TraceaugError:
    """The one-line error for a ``.nsys-rep`` given where a trace is expected."""
    return TraceaugError(f"{path}: an Nsight Systems report; export it first with "
                         f"`nsys export --type sqlite {path.name}` and give traceaug the .sqlite")


def us(ns: int) -> str:
    """Integer ns as µs text with exactly three decimals (no float on the way)."""
    if ns < 0:
        return "-" + us(-ns)
    return f"{ns // 1000}.{ns % 1000:03d}"


def _pid(global_id: int) -> int:
    return (global_id >> 24) & 0xFFFFFF


def _tid(global_id: int) -> int:
    return global_id & 0xFFFFFF


def _js(value) -> str:
    return orjson.dumps(value).decode()


def as_text(value) -> str | None:
    """A value nsys stores as text, as ``str``: a BLOB (SQLite keeps any type in any column)
    decoded as UTF-8 with replacements, a number written out, NULL as None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _is_id(value) -> bool:
    """An enum or domain id that can go into SQL as a number (anything else is left out)."""
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


class Export:
    """An Nsight Systems SQLite export opened read-only, with the tables it has."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if is_report(self.path):
            raise report_error(self.path)
        if self.path.is_dir():
            raise TraceaugError(f"{self.path}: is a directory, expected an nsys SQLite export")
        if not self.path.is_file():
            raise TraceaugError(f"{self.path}: no such file")
        if not is_sqlite(self.path):
            raise TraceaugError(f"{self.path}: not an SQLite file (expected `nsys export --type sqlite`)")
        self.copy_dir: Path | None = None
        self.steps_limit = STEPS_FLOOR + STEPS_PER_BYTE * self.path.stat().st_size
        self.steps = 0
        try:
            self.con = sqlite3.connect(self._uri(), uri=True)
            self.con.set_progress_handler(self._progress, PROGRESS_EVERY)
            self.tables = {r[0] for r in self.con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        except sqlite3.Error as e:
            self.close()
            raise self._error(e, "cannot read the SQLite file") from None
        except OSError as e:
            self.close()
            raise TraceaugError(f"{self.path}: cannot read ({e.strerror})") from None
        self.con.execute("PRAGMA temp_store = FILE")  # TEMP tables on disk: memory stays flat
        self.meta_table = next((t for t in META_TABLES if t in self.tables), None)
        if self.meta_table is None or "StringIds" not in self.tables:
            self.con.close()
            raise TraceaugError(f"{self.path}: not an Nsight Systems export (no {' or '.join(META_TABLES)} "
                                "and StringIds tables)")

    def _uri(self) -> str:
        """SQLite URI that never writes beside the export: the file as immutable, or, when an unfinished
        write left a hot journal or WAL, a private copy of both (recovered there: the committed file)."""
        left = [Path(str(self.path) + suffix) for suffix, magic in UNFINISHED
                if _starts_with(Path(str(self.path) + suffix), magic)]
        if not left:
            return "file:" + urllib.parse.quote(str(self.path.resolve())) + "?mode=ro&immutable=1"
        self.copy_dir = atomic.scratch_dir("traceaug-export-")
        copy = self.copy_dir / self.path.name
        for f in (self.path, *left):
            shutil.copyfile(f, self.copy_dir / f.name)
        return "file:" + urllib.parse.quote(str(copy)) + "?mode=rw"

    def _progress(self) -> int:
        """SQLite's progress handler: stop a statement (non-zero) once the export's reads
        have run far past what its size explains (a view that never ends)."""
        self.steps += PROGRESS_EVERY
        return int(self.steps > self.steps_limit)

    def _error(self, e: sqlite3.Error, what: str = "cannot read the export") -> TraceaugError:
        interrupt.check()  # a Ctrl-C inside the progress handler stops SQLite as "interrupted"
        if self.steps > self.steps_limit:
            mb = self.path.stat().st_size / 1e6
            return TraceaugError(f"{self.path}: stopped after {self.steps_limit:.1e} SQLite steps, far "
                                 f"more than reading a {mb:.1f} MB export takes (a view that never "
                                 "ends?)")
        return TraceaugError(f"{self.path}: {what} ({e})")

    def close(self) -> None:
        if hasattr(self, "con"):
            self.con.close()
        if self.copy_dir is not None:
            copy, self.copy_dir = self.copy_dir, None
            atomic.drop_scratch(copy)

    def __enter__(self) -> Export:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _batches(self, sql: str) -> Iterator[list[tuple]]:
        """``sql``'s rows, a ``fetchmany`` at a time, so no result is held whole."""
        try:
            cur = self.con.execute(sql)
            while batch := cur.fetchmany(BATCH):
                yield batch
        except sqlite3.Error as e:
            raise self._error(e) from None

    def rows(self, sql: str) -> Iterator[tuple]:
        """Rows of ``sql`` in batches, so no result is held whole."""
        for batch in self._batches(sql):
            yield from batch

    def texts(self, sql: str) -> Iterator[list[str]]:
        """The first column of ``sql``'s rows, a batch at a time (a list per ``fetchmany``:
        no Python step per row)."""
        return ([text for (text,) in batch] for batch in self._batches(sql))

    def execute(self, sql: str, rows: list[tuple] | None = None) -> None:
        """A statement on the connection's TEMP schema (the export itself is read-only), once
        or for each of ``rows``."""
        try:
            if rows is None:
                self.con.execute(sql)
            else:
                self.con.executemany(sql, rows)
        except sqlite3.Error as e:
            raise self._error(e) from None

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.rows(f'PRAGMA table_info("{table}")')}

    def has_rows(self, table: str) -> bool:
        return table in self.tables and any(True for _ in self.rows(f'SELECT 1 FROM "{table}" LIMIT 1'))

    def metadata(self) -> dict[str, str]:
        """The export's name/value metadata (product, schema version, input file...)."""
        return {as_text(k): as_text(v) for k, v in self.rows(f'SELECT name, value FROM "{self.meta_table}"')}

    def enum(self, table: str, default: dict[int, str]) -> dict[int, str]:
        """An ENUM_* table of newer exports (id -> its label, else its name, else ``default``'s),
        else ``default``; rows whose id is not an integer are left out."""
        have = self.columns(table) if table in self.tables else set()
        cols = [c for c in ("label", "name") if c in have]
        if "id" not in have or not cols:
            return default
        found = {i: next((as_text(v) for v in values if v is not None), None)
                 for i, *values in self.rows(f'SELECT id, {", ".join(cols)} FROM "{table}"')
                 if _is_id(i)}
        return {**default, **{i: v for i, v in found.items() if v is not None}}

    def mpi_rank(self) -> int | None:
        """The MPI rank nsys recorded (its MPI trace names the rank's thread ``MPI Rank N``);
        None without one, or when the export holds several."""
        if "NVTX_EVENTS" not in self.tables:
            return None
        have = self.columns("NVTX_EVENTS")
        text = "COALESCE(e.text, n.value)" if "textId" in have else "e.text"
        join = "LEFT JOIN StringIds n ON n.id = e.textId" if "textId" in have else ""
        sql = (f"SELECT DISTINCT {text} FROM NVTX_EVENTS e {join} "
               f"WHERE e.eventType = {NVTX_THREAD_NAME} AND {text} GLOB 'MPI Rank [0-9]*'")
        ranks = {int(m.group(1)) for (t,) in self.rows(sql)
                 if (m := _MPI_RANK.fullmatch(as_text(t) or ""))}
        ranks = {r for r in ranks if r < 2**31}  # an MPI rank is a C int: larger is no rank
        return ranks.pop() if len(ranks) == 1 else None

    def device_properties(self) -> list[dict]:
        """Kineto's ``deviceProperties`` from TARGET_INFO_GPU."""
        if "TARGET_INFO_GPU" not in self.tables:
            return []
        names = {"id": "id", "name": "name", "totalMemory": "totalGlobalMem",
                 "computeMajor": "computeMajor", "computeMinor": "computeMinor",
                 "maxThreadsPerBlock": "maxThreadsPerBlock", "maxRegistersPerBlock": "regsPerBlock",
                 "threadsPerWarp": "warpSize", "maxShmemPerBlock": "sharedMemPerBlock",
                 "maxShmemPerSm": "sharedMemPerMultiprocessor", "smCount": "numSms",
                 "maxShmemPerBlockOptin": "sharedMemPerBlockOptin"}
        have = [c for c in names if c in self.columns("TARGET_INFO_GPU")]
        if "id" not in have:
            return []
        sql = "SELECT " + ", ".join(have) + " FROM TARGET_INFO_GPU ORDER BY id"
        return [{names[c]: as_text(v) if isinstance(v, bytes) else v for c, v in zip(have, row)
                 if v is not None} for row in self.rows(sql)]


def _us(x: str) -> str:
    """SQL: the integer ns expression ``x`` as µs text with exactly three decimals."""
    return (f"CASE WHEN ({x}) >= 0 THEN printf('%d.%03d', ({x}) / 1000, ({x}) % 1000) "
            f"ELSE printf('-%d.%03d', -({x}) / 1000, -({x}) % 1000) END")


_SPEC = re.compile(r"%(?:%|T|[-+ #0]*\d*(?:\.\d+)?[a-zA-Z])")  # printf conversions, and %T


def _printf(fmt: str, *args: str) -> str:
    """SQL ``printf(fmt, args...)``, ``%T`` writing an integer ns expression as µs with three decimals: one
    flat printf when every such value is >= 0 (nsys's times), else each goes through ``_us``."""
    specs = [m.group() for m in _SPEC.finditer(fmt) if m.group() != "%%"]
    if len(specs) != len(args):
        raise ValueError(f"{fmt!r}: {len(specs)} conversions, {len(args)} arguments")
    flat: list[str] = []
    each: list[str] = []
    for spec, arg in zip(specs, args):
        flat += [f"({arg}) / 1000", f"({arg}) % 1000"] if spec == "%T" else [arg]
        each.append(_us(arg) if spec == "%T" else arg)
    times = [arg for spec, arg in zip(specs, args) if spec == "%T"]
    slow = f"printf({literal(fmt.replace('%T', '%s'))}, {', '.join(each)})"
    if not times:
        return slow
    fast = f"printf({literal(fmt.replace('%T', '%d.%03d'))}, {', '.join(flat)})"
    return f"CASE WHEN {' AND '.join(f'({t}) >= 0' for t in times)} THEN {fast} ELSE {slow} END"


def _pid_sql(g: str) -> str:
    return f"(({g} >> 24) & 16777215)"


def _tid_sql(g: str) -> str:
    return f"({g} & 16777215)"


def _case(expr: str, mapping: dict[int, str], default: str) -> str:
    """SQL: ``mapping[expr]`` as text (``default`` for other values); keys that are not
    integers (an export's odd enum ids) are left out, never pasted into the SQL."""
    whens = " ".join(f"WHEN {int(k)} THEN {literal(v)}" for k, v in mapping.items() if _is_id(k))
    return f"CASE {expr} {whens} ELSE {literal(default)} END"


RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
GPU_TABLES = {"kernel": "CUPTI_ACTIVITY_KIND_KERNEL", "gpu_memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
              "gpu_memset": "CUPTI_ACTIVITY_KIND_MEMSET"}
NL = "\n"


def _prepare_launches(ex: Export) -> bool:
    """TEMP table ``_launch``: per (process, correlation id) the API call that launched it, the innermost
    (latest start) when nsys records a call twice (an outer row around CUPTI's own)."""
    if not ex.has_rows(RUNTIME):
        return False
    ex.execute("DROP TABLE IF EXISTS temp._launch")
    # WITHOUT ROWID keyed by (corr, p): rows go in in key order, a lookup is one b-tree search;
    # p is -1 for a row without a thread, which no join matches by p
    ex.execute("CREATE TEMP TABLE _launch (corr INTEGER NOT NULL, p INTEGER NOT NULL, start INTEGER, "
               "gtid INTEGER, PRIMARY KEY (corr, p)) WITHOUT ROWID")
    ex.execute(f"INSERT INTO _launch SELECT correlationId, IFNULL(globalTid >> 24, -1), MAX(start), "
               f"globalTid FROM {RUNTIME} WHERE correlationId IS NOT NULL "
               "GROUP BY correlationId, IFNULL(globalTid >> 24, -1)")
    return True


def _gpu_sql(ex: Export, cat: str, name: str, extra_fmt: str, extra_args: tuple[str, ...],
             joins: str, launches: bool) -> str:
    """SQL giving each GPU op of one table as Chrome JSON text, with its ac2g flow pair."""
    t = GPU_TABLES[cat]
    start, dur = "o.start", "(o.end - o.start)"
    fmt = ('{"ph":"X","cat":"%s","name":%s,"pid":%d,"tid":%d,"ts":%T,"dur":%T,"args":{"device":%d,'
           '"context":%d,"stream":%d,"correlation":%s' + extra_fmt + '}}')
    text = _printf(fmt, literal(cat), name, "o.deviceId", "o.streamId", start, dur, "o.deviceId",
                   "o.contextId", "o.streamId", "COALESCE(o.correlationId, 'null')", *extra_args)
    if not launches:
        return f"SELECT {text} FROM {t} o {joins}"
    flow = (',' + NL + '{"ph":"s","id":%d,"pid":%d,"tid":%d,"ts":%T,"cat":"ac2g","name":"ac2g"},' + NL
            + '{"ph":"f","id":%d,"pid":%d,"tid":%d,"ts":%T,"cat":"ac2g","name":"ac2g","bp":"e"}')
    flow_text = ("CASE WHEN l.gtid IS NULL THEN '' ELSE "
                 + _printf(flow, "o.correlationId", _pid_sql("l.gtid"), _tid_sql("l.gtid"), "l.start",
                           "o.correlationId", "o.deviceId", "o.streamId", start) + " END")
    same = "AND l.p = o.globalPid >> 24" if "globalPid" in ex.columns(t) else ""
    return (f"SELECT {text} || {flow_text} FROM {t} o {joins} "
            f"LEFT JOIN _launch l ON l.corr = o.correlationId {same}")


# A copy's or set's extra args (``_gpu_sql``): its size and bandwidth (bytes per ns = GB/s).
_BANDWIDTH = ("CASE WHEN o.end > o.start THEN printf('%.17g', o.bytes * 1.0 / (o.end - o.start)) "
              "ELSE '0' END")
_COPY_ARGS = (',"bytes":%d,"memory bandwidth (GB/s)":%s', ("o.bytes", _BANDWIDTH))


def _kernels(ex: Export, launches: bool) -> Iterator[str]:
    if not ex.has_rows(GPU_TABLES["kernel"]):
        return
    fmt = (',"queued":0,"registers per thread":%d,"shared memory":%d,'
           '"grid":[%d,%d,%d],"block":[%d,%d,%d]')
    args = ("o.registersPerThread", "o.staticSharedMemory + o.dynamicSharedMemory",
            "o.gridX", "o.gridY", "o.gridZ", "o.blockX", "o.blockY", "o.blockZ")
    yield from ex.texts(_gpu_sql(ex, "kernel", "json_quote(n.value)", fmt, args,
                                 "JOIN StringIds n ON n.id = o.demangledName", launches))


def _memcpys(ex: Export, launches: bool) -> Iterator[str]:
    if not ex.has_rows(GPU_TABLES["gpu_memcpy"]):
        return
    kinds = {k: COPY_KINDS.get(k, _short_copy(v)) for k, v in ex.enum("ENUM_CUDA_MEMCPY_OPER", {}).items()}
    mems = ex.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS)
    name = f"'Memcpy ' || {_case('o.copyKind', kinds | COPY_KINDS, 'Unknown')}"
    if {"srcKind", "dstKind"} <= ex.columns(GPU_TABLES["gpu_memcpy"]):
        name += (f" || ' (' || {_case('o.srcKind', mems, 'Unknown')} || ' -> ' || "
                 f"{_case('o.dstKind', mems, 'Unknown')} || ')'")
    yield from ex.texts(_gpu_sql(ex, "gpu_memcpy", f"json_quote({name})", *_COPY_ARGS, "", launches))


def _short_copy(name: str) -> str:
    """'Device-to-Host' -> 'DtoH' (a newer enum's spelling, for kinds Kineto has no name for)."""
    parts = name.replace(" ", "").split("-to-")
    return "to".join(p[:1] for p in parts) if len(parts) == 2 else name


def _memsets(ex: Export, launches: bool) -> Iterator[str]:
    if not ex.has_rows(GPU_TABLES["gpu_memset"]):
        return
    mems = ex.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS)
    kind = ("o.memKind" if "memKind" in ex.columns(GPU_TABLES["gpu_memset"]) else "NULL")
    name = f"json_quote('Memset (' || {_case(kind, mems, 'Device')} || ')')"
    yield from ex.texts(_gpu_sql(ex, "gpu_memset", name, *_COPY_ARGS, "", launches))


def api_name(name: str) -> str:
    """An API call's name without nsys's version suffix, as Kineto writes it."""
    return _VERSION_SUFFIX.sub("", name)


def _runtime(ex: Export, launches: bool) -> Iterator[str]:
    if not ex.has_rows(RUNTIME):
        return
    heads = []
    for name_id, name in ex.rows(f"SELECT n.id, n.value FROM StringIds n WHERE n.id IN "
                                 f"(SELECT DISTINCT nameId FROM {RUNTIME})"):
        clean = api_name(as_text(name) or "")
        cat = "cuda_driver" if clean.startswith("cu") and not clean.startswith("cuda") else "cuda_runtime"
        heads.append((name_id, f'{{"ph":"X","cat":"{cat}","name":{_js(clean)},'))
    ex.execute("DROP TABLE IF EXISTS temp._api")
    ex.execute("CREATE TEMP TABLE _api (id INTEGER PRIMARY KEY, head TEXT)")
    ex.execute("INSERT INTO _api VALUES (?, ?)", heads)
    # an outer record of a call keeps its id under another key: one launch per correlation
    args = ("CASE WHEN r.correlationId IS NULL THEN '' "
            "WHEN l.start IS NULL THEN printf(',\"args\":{\"outer correlation\":%d}', r.correlationId) "
            "ELSE printf(',\"args\":{\"correlation\":%d}', r.correlationId) END")
    fmt = '%s"pid":%d,"tid":%d,"ts":%T,"dur":%T%s}'
    text = _printf(fmt, "a.head", _pid_sql("r.globalTid"), _tid_sql("r.globalTid"), "r.start",
                   "(r.end - r.start)", args)
    sql = (f"SELECT {text} "
           f"FROM {RUNTIME} r JOIN _api a ON a.id = r.nameId "
           "LEFT JOIN _launch l ON l.corr = r.correlationId AND l.p = r.globalTid >> 24 "
           "AND l.start = r.start")
    yield from ex.texts(sql.replace('\\"', '"'))


def _nvtx_where() -> str:
    types = ", ".join(map(str, NVTX_RANGES))
    return f"eventType IN ({types}) AND end IS NOT NULL AND globalTid IS NOT NULL"


def _nvtx(ex: Export, launches: bool) -> Iterator[str]:
    if not ex.has_rows("NVTX_EVENTS"):
        return
    have = ex.columns("NVTX_EVENTS")
    domains = {}
    if "domainId" in have:
        domains = {d: ',"args":{"domain":' + _js(as_text(name)) + "}" for d, name in ex.rows(
            f"SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = {NVTX_DOMAIN_CREATE} "
            "AND text IS NOT NULL")}
    args = _case("e.domainId", domains, "") if domains else "''"
    text = "COALESCE(e.text, n.value, '')" if "textId" in have else "COALESCE(e.text, '')"
    join = "LEFT JOIN StringIds n ON n.id = e.textId" if "textId" in have else ""
    fmt = '{"ph":"X","cat":"user_annotation","name":%s,"pid":%d,"tid":%d,"ts":%T,"dur":%T%s}'
    row = _printf(fmt, f"json_quote({text})", _pid_sql("e.globalTid"), _tid_sql("e.globalTid"),
                  "e.start", "(e.end - e.start)", args)
    sql = (f"SELECT {row} "
           f"FROM NVTX_EVENTS e {join} WHERE {_nvtx_where().replace('eventType', 'e.eventType')}")
    yield from ex.texts(sql)


def _meta(name: str, pid, tid, args: dict) -> str:
    return f'{{"name":"{name}","ph":"M","pid":{pid},"tid":{tid},"args":{_js(args)}}}'


def _names(ex: Export, launches: bool) -> Iterator[str]:
    """process_name / thread_name (and sort indexes) for the threads and streams with events."""
    parts = []
    if ex.has_rows(RUNTIME):
        parts.append(f"SELECT globalTid FROM {RUNTIME} WHERE globalTid IS NOT NULL")
    if ex.has_rows("NVTX_EVENTS"):
        parts.append(f"SELECT globalTid FROM NVTX_EVENTS WHERE {_nvtx_where()}")
    threads = sorted(g for (g,) in ex.rows(" UNION ".join(parts))) if parts else []
    pids = {_pid(g) for g in threads}
    procs: dict[int, str] = {}
    if "PROCESSES" in ex.tables and pids:
        procs = {pid: as_text(name) for pid, name in ex.rows("SELECT pid, name FROM PROCESSES")
                 if pid in pids and name}
    for pid in sorted(pids):
        yield _meta("process_name", pid, 0, {"name": procs.get(pid, f"Process {pid}")})
        yield _meta("process_labels", pid, 0, {"labels": "CPU"})
        yield _meta("process_sort_index", pid, 0, {"sort_index": pid})
    names: dict[int, str] = {}
    if "ThreadNames" in ex.tables and threads:
        sql = ("SELECT t.globalTid, n.value FROM ThreadNames t JOIN StringIds n ON n.id = t.nameId "
               "ORDER BY t.priority")
        names = {g: as_text(name) for g, name in ex.rows(sql)}
    for gtid in threads:
        name = names.get(gtid) or (procs.get(_pid(gtid)) if _pid(gtid) == _tid(gtid) else None)
        yield _meta("thread_name", _pid(gtid), _tid(gtid), {"name": name or f"Thread {_tid(gtid)}"})
    gpu = [f"SELECT deviceId, streamId FROM {t}" for t in GPU_TABLES.values() if ex.has_rows(t)]
    streams = sorted(ex.rows(" UNION ".join(gpu))) if gpu else []
    for dev in sorted({d for d, _ in streams}):
        yield _meta("process_name", dev, 0, {"name": f"GPU {dev}"})
        yield _meta("process_labels", dev, 0, {"labels": f"GPU {dev}"})
        yield _meta("process_sort_index", dev, 0, {"sort_index": GPU_SORT_BASE + dev})
    for dev, stream in streams:
        yield _meta("thread_name", dev, stream, {"name": f"stream {stream}"})
        yield _meta("thread_sort_index", dev, stream, {"sort_index": stream})


def events(ex: Export) -> Iterator[tuple[list[str], bool]]:
    """Batches of the export's events as Chrome JSON text (SQLite formats the rows), each with whether its
    texts are one event each (a GPU op's text may carry its two flow events on lines of their own)."""
    launches = _prepare_launches(ex)
    for part in (_kernels, _memcpys, _memsets):
        for batch in part(ex, launches):
            yield batch, not launches
    for part in (_runtime, _nvtx):
        for batch in part(ex, launches):
            yield batch, True
    yield list(_names(ex, launches)), True


def header(ex: Export) -> bytes:
    """The top-level keys before ``traceEvents``: Kineto's schema, device properties and
    ``distributedInfo.rank`` (the MPI rank nsys recorded, if it did), and what the export was."""
    meta = ex.metadata()
    source = {"file": ex.path.name, "table": ex.meta_table}
    for key in ("PRODUCT_VERSION", "SCHEMA_VERSION"):
        value = meta.get(f"EXPORT_{key}", meta.get(key))
        if value is not None:
            source[key.lower()] = value
    rank = ex.mpi_rank()
    dist = b"" if rank is None else b',\n"distributedInfo":' + orjson.dumps({"rank": rank})
    return (b'{\n"schemaVersion":1,\n"deviceProperties":' + orjson.dumps(ex.device_properties())
            + dist + b',\n"nsysExport":' + orjson.dumps(source) + b',\n"traceEvents":[\n')


def _time_tables(ex: Export) -> Iterator[tuple[str, str]]:
    """(table, WHERE clause) of every table whose start / end become an event's ts and dur."""
    for t in (*GPU_TABLES.values(), RUNTIME):
        if ex.has_rows(t):
            yield t, "1"
    if ex.has_rows("NVTX_EVENTS"):
        yield "NVTX_EVENTS", _nvtx_where()


_NOT_NUMBER = "typeof({0}) IN ('text', 'blob')"


def check_times(ex: Export) -> None:
    """Refuse, as every command's load would refuse the conversion (``pass1.check_range``), an
    export whose ts or dur in µs lie out of range (the extremes of each table are enough), or
    whose start or end is text, not ns."""
    from .pass1 import BadValue, check_range

    for table, where in _time_tables(ex):
        odd = f"{_NOT_NUMBER.format('start')} OR {_NOT_NUMBER.format('end')}"
        sql = (f"SELECT MIN(start), MAX(start), MIN(end - start), MAX(end - start), "
               f"MAX({odd}) FROM {table} WHERE {where} AND end IS NOT NULL")
        for lo_ts, hi_ts, lo_dur, hi_dur, text in ex.rows(sql):
            if text:
                _not_a_number(ex, table, where)
            for name, values in (("ts", (lo_ts, hi_ts)), ("dur", (lo_dur, hi_dur))):
                us_values = [float(us(v)) if isinstance(v, int) else float(v)
                             for v in values if v is not None]
                try:
                    check_range(name, np.array(us_values, dtype=np.float64))
                except BadValue as e:
                    raise TraceaugError(f"{ex.path}: {e}") from None


def _not_a_number(ex: Export, table: str, where: str) -> None:
    """Refuse the first start or end of ``table`` that is text or bytes, not a number of ns."""
    for start, end in ex.rows(f"SELECT start, end FROM {table} WHERE {where} AND "
                              f"({_NOT_NUMBER.format('start')} OR {_NOT_NUMBER.format('end')}) LIMIT 1"):
        name, value = ("start", start) if isinstance(start, (str, bytes)) else ("end", end)
        shown = as_text(value)
        shown = repr(shown if len(shown) <= 40 else shown[:39] + "…")
        raise TraceaugError(f"{ex.path}: a {name} in {table} is {shown}, not a number of ns")


def write(ex: Export, out, flush_at: int = 1 << 20) -> int:
    """Write the Chrome JSON of ``ex`` to the binary file ``out``; return the events written
    (one per line: a GPU op's text carries its two flow events on lines of their own)."""
    check_times(ex)
    out.write(header(ex))
    buf: list[str] = []
    size = n = 0
    sep = ""  # before the next batch: a comma once events came before
    for texts, single in events(ex):
        if not texts:
            continue
        chunk = ",\n".join(texts)
        n += len(texts) if single else chunk.count("\n") + 1
        buf += (sep, chunk)
        sep = ",\n"
        size += len(chunk)
        if size >= flush_at:
            out.write("".join(buf).encode())
            buf, size = [], 0
    out.write("".join(buf).encode())
    out.write(b"\n]}\n")
    return n


def convert(src: str | Path, dst: str | Path, hold: bool = True) -> int:
    """Convert export ``src`` to Chrome JSON ``dst`` (gzip if ``.gz``) atomically, never over ``src``; return
    the events written. ``hold=False``: in place at once, even in ``atomic.all_or_none`` (an input's)."""
    src, dst = Path(src), Path(dst)
    if dst.exists() and src.exists() and os.path.samefile(src, dst):
        raise TraceaugError(f"{dst}: is the input; choose another output")
    if dst.is_dir():
        raise TraceaugError(f"{dst}: is a directory; give an output file")
    if not dst.parent.is_dir():
        raise TraceaugError(f"{dst}: no such directory {dst.parent}")
    with Export(src) as ex, atomic.atomic_output(dst, hold=hold) as f:
        if dst.name.endswith(".gz"):
            with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=3, mtime=0) as gz:
                return write(ex, gz)
        return write(ex, f)


_CONVERTED: dict[tuple, Path] = {}


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def converted(src: Path) -> Path:
    """A temporary Chrome JSON of the export ``src``, made once per process and removed when it
    ends: how every command reads an nsys export."""
    st = src.stat()
    key = (str(src.resolve()), st.st_mtime_ns, st.st_size)
    if key in _CONVERTED and _CONVERTED[key].exists():
        return _CONVERTED[key]
    fd, tmp = tempfile.mkstemp(prefix=f"{src.stem}.", suffix=".json")
    os.close(fd)
    out = Path(tmp)
    atexit.register(_remove, out)
    try:
        convert(src, out, hold=False)  # this run reads it: not held until the run ends
    except OSError as e:
        _remove(out)
        if e.filename != str(out):
            raise
        raise TraceaugError(f"{src}: cannot write its JSON conversion in {out.parent} "
                            f"({e.strerror}); set TMPDIR to a larger disk") from None
    except BaseException:
        _remove(out)
        raise
    _CONVERTED[key] = out
    return out
