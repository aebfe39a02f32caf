"""Throughput of ``traceaug convert`` on a large Nsight Systems SQLite export: MB/s and peak RSS.

Why: nsys exports of real training runs reach gigabytes; conversion streams rows out of sqlite3,
so its memory must stay flat whatever the export's size (never the export held twice).

The large export is made from the shared saxpy export: a temporary copy in which the rows that
``convert`` reads (kernels, copies, API calls, NVTX ranges) are replicated N times by SQLite
itself, copy i shifted by i × the capture's duration and with correlation ids moved out of the
others' range, until the file reaches --size-mb. The conversion runs in a fresh process
(``python -m traceaug convert``) whose peak RSS is its ``ru_maxrss``. MB = 10**6 bytes.

Usage::

    python bench/convert_throughput.py [--size-mb 1024] [--gz] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_EXPORT = REPO_ROOT.parent / "shared" / "traces" / "nsys" / "a100_saxpy_mpi_rank0.sqlite"
MB = 1_000_000
TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def _open(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    return con


def _tables(con: sqlite3.Connection) -> dict[str, list[str]]:
    """The converted tables this export has rows in, with their columns."""
    out = {}
    for table in TABLES:
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        if cols and con.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone():
            out[table] = cols
    return out


def _replicate(con: sqlite3.Connection, tables: dict[str, list[str]], first: int, last: int,
               span: int, corr_step: int) -> None:
    """Append copies first..last of the original rows (kept in ``base_<table>``), copy i shifted
    by i × span in time and i × corr_step in correlation id."""
    for table, cols in tables.items():
        shifted = [f"{c} + i * {span}" if c in ("start", "end") else
                   f"{c} + i * {corr_step}" if c == "correlationId" else c for c in cols]
        con.execute(f"WITH RECURSIVE r(i) AS (SELECT {first} UNION ALL SELECT i + 1 FROM r "
                    f"WHERE i < {last}) INSERT INTO \"{table}\" ({', '.join(cols)}) "
                    f"SELECT {', '.join(shifted)} FROM \"base_{table}\", r")
    con.commit()


def make_export(src: Path, dst: Path, size_mb: float) -> int:
    """A copy of ``src`` grown to about ``size_mb``; returns the rows ``convert`` reads."""
    shutil.copy(src, dst)
    dst.chmod(0o644)
    con = _open(dst)
    tables = _tables(con)
    for table in tables:
        con.execute(f'CREATE TEMP TABLE "base_{table}" AS SELECT * FROM "{table}"')
    (span,) = con.execute("SELECT MAX(end) - MIN(start) + 1000 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    (corr,) = con.execute("SELECT MAX(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    probe = 200  # measure the bytes per copy, then add the rest at once
    _replicate(con, tables, 1, probe, span, corr)
    per_copy = (dst.stat().st_size - src.stat().st_size) / probe
    more = max(0, int((size_mb * MB - dst.stat().st_size) / per_copy))
    if more:
        _replicate(con, tables, probe + 1, probe + more, span, corr)
    rows = sum(con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables)
    con.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export", type=Path, default=DEFAULT_EXPORT)
    ap.add_argument("--size-mb", type=float, default=1024)
    ap.add_argument("--gz", action="store_true", help="write OUT.json.gz instead of OUT.json")
    ap.add_argument("--keep", type=Path, help="make the files in this folder and keep them")
    args = ap.parse_args()
    if not args.export.exists():
        sys.exit(f"{args.export}: not found (../shared/traces is provided for CI)")
    work = Path(tempfile.mkdtemp(prefix="convert_bench.", dir=args.keep))
    try:
        big = work / "big.sqlite"
        t0 = time.perf_counter()
        rows = make_export(args.export, big, args.size_mb)
        made = time.perf_counter() - t0
        size = big.stat().st_size
        print(f"export: {size / MB:.1f} MB, {rows:,} rows converted (made in {made:.1f} s)")
        out = work / ("big.json.gz" if args.gz else "big.json")
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        before, cpu0 = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "traceaug", "convert", str(big), str(out)],
                           env=env, capture_output=True, text=True)
        secs = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_kb, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime - cpu0
        if r.returncode:
            sys.exit(r.stderr.strip())
        print(r.stderr.strip())
        print(f"convert: {secs:.1f} s, {size / MB / secs:.1f} MB/s of SQLite, {rows / secs:,.0f} rows/s, "
              f"output {out.stat().st_size / MB:.1f} MB")
        print(f"CPU time of the converting process: {cpu:.1f} s ({size / MB / cpu:.1f} MB/s per CPU "
              "second: what a quiet machine gives)")
        print(f"peak RSS of the converting process: {peak_kb / 1024:.0f} MiB "
              f"({peak_kb * 1024 / size:.2f}x the export){'' if peak_kb > before else ' (upper bound)'}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
