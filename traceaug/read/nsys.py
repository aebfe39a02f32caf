"""Nsight Systems SQLite export -> Chrome JSON in Kineto conventions, streamed row by row.

``nsys export --type sqlite`` writes CUPTI activity tables (kernels, copies, sets, CUDA
API calls) and NVTX ranges with integer ns timestamps and names in ``StringIds``. Kernels,
copies and sets go on pid = device, tid = stream with Kineto's args; API calls and NVTX
ranges (``user_annotation``) on their CPU threads; ``ac2g`` flows link a launch to its GPU
op by correlation id. Rows come out of sqlite3 cursors in batches and are written as they
come (no table of the whole export in memory); timestamps are written as µs with exactly
three decimals from the integer ns, so nothing is rounded.
"""

from __future__ import annotations

import atexit
import contextlib
import gzip
import os
import re
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import orjson

from ..atomic import atomic_output
from ..errors import TraceaugError

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
META_TABLES = ("EXPORT_META_DATA", "META_DATA_EXPORT")  # older / newer exports
BATCH = 4096  # rows per fetchmany
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


def is_sqlite(path: Path) -> bool:
    """True when the file starts with SQLite's magic string."""
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def is_report(path: Path) -> bool:
    """True for an Nsight Systems report (``.nsys-rep``, ``.qdrep``), which only nsys reads."""
    return path.name.endswith(REPORT_SUFFIXES)


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


class Export:
    """An Nsight Systems SQLite export opened read-only, with the tables it has."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if is_report(self.path):
            raise report_error(self.path)
        if not self.path.is_file():
            raise TraceaugError(f"{self.path}: no such file")
        if not is_sqlite(self.path):
            raise TraceaugError(f"{self.path}: not an SQLite file (expected `nsys export --type sqlite`)")
        uri = "file:" + urllib.parse.quote(str(self.path.resolve())) + "?mode=ro"
        try:
            self.con = sqlite3.connect(uri, uri=True)
            self.tables = {r[0] for r in self.con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        except sqlite3.Error as e:
            raise TraceaugError(f"{self.path}: cannot read the SQLite file ({e})") from None
        self.meta_table = next((t for t in META_TABLES if t in self.tables), None)
        if self.meta_table is None or "StringIds" not in self.tables:
            self.con.close()
            raise TraceaugError(f"{self.path}: not an Nsight Systems export (no {' or '.join(META_TABLES)} "
                                "and StringIds tables)")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Export:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def rows(self, sql: str) -> Iterator[tuple]:
        """Rows of ``sql`` in batches, so no result is held whole."""
        try:
            cur = self.con.execute(sql)
            while batch := cur.fetchmany(BATCH):
                yield from batch
        except sqlite3.Error as e:
            raise TraceaugError(f"{self.path}: cannot read the export ({e})") from None

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}

    def has_rows(self, table: str) -> bool:
        return table in self.tables and self.con.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone()

    def metadata(self) -> dict[str, str]:
        """The export's name/value metadata (product, schema version, input file...)."""
        return dict(self.rows(f'SELECT name, value FROM "{self.meta_table}"'))

    def enum(self, table: str, default: dict[int, str]) -> dict[int, str]:
        """An ENUM_* table of newer exports (id -> its label, else name), else ``default``."""
        have = self.columns(table) if table in self.tables else set()
        text = "label" if "label" in have else "name"
        if not {"id", text} <= have:
            return default
        return {**default, **dict(self.rows(f'SELECT id, {text} FROM "{table}"'))}

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
        return [{names[c]: v for c, v in zip(have, row) if v is not None} for row in self.rows(sql)]


class _Seen:
    """CPU threads and GPU streams that events were written on, for the name metadata."""

    def __init__(self) -> None:
        self.threads: set[int] = set()  # globalTid
        self.streams: set[tuple[int, int]] = set()  # (device, stream)


def _flow(corr: int, cpu_gtid: int | None, launch_ns: int | None, dev: int, stream: int,
          start: int) -> str:
    if cpu_gtid is None or launch_ns is None:
        return ""
    return (f',\n{{"ph":"s","id":{corr},"pid":{_pid(cpu_gtid)},"tid":{_tid(cpu_gtid)},'
            f'"ts":{us(launch_ns)},"cat":"ac2g","name":"ac2g"}}'
            f',\n{{"ph":"f","id":{corr},"pid":{dev},"tid":{stream},"ts":{us(start)},'
            f'"cat":"ac2g","name":"ac2g","bp":"e"}}')


# One API call per (process, correlation id): nsys may record a call twice (an outer row,
# eventClass 67 in 2022 exports, around CUPTI's own); the innermost (latest start) is the launch.
_RANKED = ("SELECT globalTid, start, correlationId, ROW_NUMBER() OVER (PARTITION BY globalTid >> 24, "
           "correlationId ORDER BY start DESC) AS k FROM CUPTI_ACTIVITY_KIND_RUNTIME")


def _launch_join(ex: Export, alias: str) -> tuple[str, str, str]:
    """CTE, columns and join that find the API call that launched a GPU op (same process)."""
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in ex.tables:
        return "", "NULL, NULL", ""
    same_process = (f"AND r.globalTid >> 24 = {alias}.globalPid >> 24"
                    if "globalPid" in ex.columns(_GPU_TABLE[alias]) else "")
    cte = (f"WITH launch AS MATERIALIZED (SELECT globalTid, start, correlationId FROM ({_RANKED} "
           "WHERE correlationId IS NOT NULL) WHERE k = 1) ")
    return (cte, "r.globalTid, r.start",
            f"LEFT JOIN launch r ON r.correlationId = {alias}.correlationId {same_process}")


_GPU_TABLE = {"k": "CUPTI_ACTIVITY_KIND_KERNEL", "m": "CUPTI_ACTIVITY_KIND_MEMCPY",
              "s": "CUPTI_ACTIVITY_KIND_MEMSET"}


def _kernels(ex: Export, seen: _Seen) -> Iterator[str]:
    if not ex.has_rows(_GPU_TABLE["k"]):
        return
    cte, cols, join = _launch_join(ex, "k")
    sql = (f"{cte}SELECT k.start, k.end, k.deviceId, k.contextId, k.streamId, k.correlationId, "
           f"k.demangledName, n.value, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, "
           f"k.registersPerThread, k.staticSharedMemory + k.dynamicSharedMemory, {cols} "
           f"FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n ON n.id = k.demangledName {join}")
    names: dict[int, str] = {}
    for (start, end, dev, ctx, stream, corr, name_id, name, gx, gy, gz, bx, by, bz, regs, smem,
         gtid, launch) in ex.rows(sql):
        js = names.get(name_id) or names.setdefault(name_id, _js(name))
        extra = (f',"queued":0,"registers per thread":{regs},"shared memory":{smem},'
                 f'"grid":[{gx},{gy},{gz}],"block":[{bx},{by},{bz}]')
        yield _gpu_op("kernel", js, start, end, dev, ctx, stream, corr, extra, gtid, launch, seen)


def _gpu_op(cat: str, name: str, start: int, end: int, dev: int, ctx: int, stream: int,
            corr: int | None, extra: str, gtid: int | None, launch: int | None, seen: _Seen) -> str:
    """A kernel / copy / set on pid = device, tid = stream (``extra``: more args), and its
    launch flow."""
    seen.streams.add((dev, stream))
    if gtid is not None:
        seen.threads.add(gtid)
    corr_arg = "null" if corr is None else corr
    return (f'{{"ph":"X","cat":"{cat}","name":{name},"pid":{dev},"tid":{stream},'
            f'"ts":{us(start)},"dur":{us(end - start)},"args":{{"device":{dev},"context":{ctx},'
            f'"stream":{stream},"correlation":{corr_arg}{extra}}}}}'
            + ("" if corr is None else _flow(corr, gtid, launch, dev, stream, start)))


def _copy_args(nbytes: int, dur: int) -> str:
    return f',"bytes":{nbytes},"memory bandwidth (GB/s)":{_bandwidth(nbytes, dur)}'


def _bandwidth(nbytes: int, dur: int) -> str:
    return repr(nbytes / dur) if dur > 0 else "0"  # bytes per ns = GB/s


def _memcpys(ex: Export, seen: _Seen) -> Iterator[str]:
    if not ex.has_rows(_GPU_TABLE["m"]):
        return
    kinds = ex.enum("ENUM_CUDA_MEMCPY_OPER", {})
    kinds = {k: COPY_KINDS.get(k, _short_copy(v)) for k, v in kinds.items()} | COPY_KINDS
    mems = ex.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS)
    have = ex.columns(_GPU_TABLE["m"])
    src = "m.srcKind" if "srcKind" in have else "NULL"
    dst = "m.dstKind" if "dstKind" in have else "NULL"
    cte, cols, join = _launch_join(ex, "m")
    sql = (f"{cte}SELECT m.start, m.end, m.deviceId, m.contextId, m.streamId, m.correlationId, m.bytes, "
           f"m.copyKind, {src}, {dst}, {cols} FROM CUPTI_ACTIVITY_KIND_MEMCPY m {join}")
    names: dict[tuple, str] = {}
    for start, end, dev, ctx, stream, corr, nbytes, kind, sk, dk, gtid, launch in ex.rows(sql):
        key = (kind, sk, dk)
        js = names.get(key)
        if js is None:
            name = f"Memcpy {kinds.get(kind, 'Unknown')}"
            if sk is not None and dk is not None:
                name += f" ({mems.get(sk, 'Unknown')} -> {mems.get(dk, 'Unknown')})"
            js = names[key] = _js(name)
        yield _gpu_op("gpu_memcpy", js, start, end, dev, ctx, stream, corr,
                      _copy_args(nbytes, end - start), gtid, launch, seen)


def _short_copy(name: str) -> str:
    """'Device-to-Host' -> 'DtoH' (a newer enum's spelling, for kinds Kineto has no name for)."""
    parts = name.replace(" ", "").split("-to-")
    return "to".join(p[:1] for p in parts) if len(parts) == 2 else name


def _memsets(ex: Export, seen: _Seen) -> Iterator[str]:
    if not ex.has_rows(_GPU_TABLE["s"]):
        return
    mems = ex.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS)
    kind = "s.memKind" if "memKind" in ex.columns(_GPU_TABLE["s"]) else "NULL"
    cte, cols, join = _launch_join(ex, "s")
    sql = (f"{cte}SELECT s.start, s.end, s.deviceId, s.contextId, s.streamId, s.correlationId, s.bytes, "
           f"{kind}, {cols} FROM CUPTI_ACTIVITY_KIND_MEMSET s {join}")
    for start, end, dev, ctx, stream, corr, nbytes, mk, gtid, launch in ex.rows(sql):
        yield _gpu_op("gpu_memset", _js(f"Memset ({mems.get(mk, 'Device')})"), start, end, dev, ctx,
                      stream, corr, _copy_args(nbytes, end - start), gtid, launch, seen)


def api_name(name: str) -> str:
    """An API call's name without nsys's version suffix, as Kineto writes it."""
    return _VERSION_SUFFIX.sub("", name)


def _runtime(ex: Export, seen: _Seen) -> Iterator[str]:
    if not ex.has_rows("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return
    sql = (f"SELECT r.start, r.end, r.globalTid, r.correlationId, r.nameId, n.value, r.k "
           f"FROM ({_RANKED.replace('SELECT ', 'SELECT nameId, end, ', 1)}) r "
           "JOIN StringIds n ON n.id = r.nameId")
    names: dict[int, str] = {}
    for start, end, gtid, corr, name_id, name, k in ex.rows(sql):
        seen.threads.add(gtid)
        head = names.get(name_id)
        if head is None:
            clean = api_name(name)
            cat = "cuda_driver" if clean.startswith("cu") and not clean.startswith("cuda") else "cuda_runtime"
            head = names[name_id] = f'{{"ph":"X","cat":"{cat}","name":{_js(clean)},'
        # an outer record of a call keeps its id under another key: one launch per correlation
        key = "correlation" if k == 1 else "outer correlation"
        args = "" if corr is None else f',"args":{{"{key}":{corr}}}'
        yield (f'{head}"pid":{_pid(gtid)},"tid":{_tid(gtid)},"ts":{us(start)},'
               f'"dur":{us(end - start)}{args}}}')


def _nvtx(ex: Export, seen: _Seen) -> Iterator[str]:
    if not ex.has_rows("NVTX_EVENTS"):
        return
    have = ex.columns("NVTX_EVENTS")
    domain_col = "e.domainId" if "domainId" in have else "0"
    domains = {}
    if "domainId" in have:
        domains = dict(ex.rows(f"SELECT domainId, text FROM NVTX_EVENTS "
                               f"WHERE eventType = {NVTX_DOMAIN_CREATE} AND text IS NOT NULL"))
    text = "COALESCE(e.text, n.value)" if "textId" in have else "e.text"
    join = "LEFT JOIN StringIds n ON n.id = e.textId" if "textId" in have else ""
    types = ", ".join(map(str, NVTX_RANGES))
    sql = (f"SELECT e.start, e.end, e.globalTid, {text}, {domain_col} FROM NVTX_EVENTS e {join} "
           f"WHERE e.eventType IN ({types}) AND e.end IS NOT NULL AND e.globalTid IS NOT NULL")
    for start, end, gtid, name, domain in ex.rows(sql):
        seen.threads.add(gtid)
        args = f',"args":{{"domain":{_js(domains[domain])}}}' if domain in domains else ""
        yield (f'{{"ph":"X","cat":"user_annotation","name":{_js(name or "")},"pid":{_pid(gtid)},'
               f'"tid":{_tid(gtid)},"ts":{us(start)},"dur":{us(end - start)}{args}}}')


def _meta(name: str, pid, tid, args: dict) -> str:
    return f'{{"name":"{name}","ph":"M","pid":{pid},"tid":{tid},"args":{_js(args)}}}'


def _names(ex: Export, seen: _Seen) -> Iterator[str]:
    """process_name / thread_name (and sort indexes) for what the events were written on."""
    pids = {_pid(g) for g in seen.threads}
    procs: dict[int, str] = {}
    if "PROCESSES" in ex.tables and pids:
        for pid, name in ex.rows("SELECT pid, name FROM PROCESSES"):
            if pid in pids and name:
                procs[pid] = name
    for pid in sorted(pids):
        yield _meta("process_name", pid, 0, {"name": procs.get(pid, f"Process {pid}")})
        yield _meta("process_labels", pid, 0, {"labels": "CPU"})
        yield _meta("process_sort_index", pid, 0, {"sort_index": pid})
    threads: dict[int, str] = {}
    if "ThreadNames" in ex.tables and seen.threads:
        sql = ("SELECT t.globalTid, n.value FROM ThreadNames t JOIN StringIds n ON n.id = t.nameId "
               "ORDER BY t.priority")
        for gtid, name in ex.rows(sql):
            if gtid in seen.threads:
                threads[gtid] = name
    for gtid in sorted(seen.threads):
        name = threads.get(gtid) or (procs.get(_pid(gtid)) if _pid(gtid) == _tid(gtid) else None)
        yield _meta("thread_name", _pid(gtid), _tid(gtid), {"name": name or f"Thread {_tid(gtid)}"})
    for dev in sorted({d for d, _ in seen.streams}):
        yield _meta("process_name", dev, 0, {"name": f"GPU {dev}"})
        yield _meta("process_labels", dev, 0, {"labels": f"GPU {dev}"})
        yield _meta("process_sort_index", dev, 0, {"sort_index": GPU_SORT_BASE + dev})
    for dev, stream in sorted(seen.streams):
        yield _meta("thread_name", dev, stream, {"name": f"stream {stream}"})
        yield _meta("thread_sort_index", dev, stream, {"sort_index": stream})


def events(ex: Export) -> Iterator[str]:
    """Every event of the export as Chrome JSON text, one object (or a flow pair) at a time."""
    seen = _Seen()
    for part in (_kernels, _memcpys, _memsets, _runtime, _nvtx, _names):
        yield from part(ex, seen)


def header(ex: Export) -> bytes:
    """The top-level keys before ``traceEvents``: Kineto's schema and device properties, and
    what the export was."""
    meta = ex.metadata()
    source = {"file": ex.path.name, "table": ex.meta_table}
    for key in ("PRODUCT_VERSION", "SCHEMA_VERSION"):
        value = meta.get(f"EXPORT_{key}", meta.get(key))
        if value is not None:
            source[key.lower()] = value
    return (b'{\n"schemaVersion":1,\n"deviceProperties":' + orjson.dumps(ex.device_properties())
            + b',\n"nsysExport":' + orjson.dumps(source) + b',\n"traceEvents":[\n')


def write(ex: Export, out, flush_at: int = 1 << 20) -> int:
    """Write the Chrome JSON of ``ex`` to the binary file ``out``; return the events written."""
    out.write(header(ex))
    buf: list[str] = []
    size = n = 0
    for text in events(ex):
        if n:
            buf.append(",\n")
        buf.append(text)
        size += len(text)
        n += 1
        if size >= flush_at:
            out.write("".join(buf).encode())
            buf, size = [], 0
    out.write("".join(buf).encode())
    out.write(b"\n]}\n")
    return n


def convert(src: str | Path, dst: str | Path) -> int:
    """Convert the export ``src`` into the Chrome JSON file ``dst`` (gzip when it ends in
    ``.gz``), atomically and never over ``src``; return the number of JSON events written."""
    src, dst = Path(src), Path(dst)
    if dst.exists() and src.exists() and os.path.samefile(src, dst):
        raise TraceaugError(f"{dst}: is the input; choose another output")
    if dst.is_dir():
        raise TraceaugError(f"{dst}: is a directory; give an output file")
    if not dst.parent.is_dir():
        raise TraceaugError(f"{dst}: no such directory {dst.parent}")
    with Export(src) as ex, atomic_output(dst) as f:
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
        convert(src, out)
    except BaseException:
        _remove(out)
        raise
    _CONVERTED[key] = out
    return out
