"""An nsys export in the real Perfetto UI (v52, headless Chromium): ``traceaug open`` on the
.sqlite itself shows every kernel, copy, API call and
launch flow of the export (counts from SQL on the SQLite file), with no importer error."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import perfetto_ui
import pytest
from conftest import shared_trace

perfetto_ui.require(__file__)

COUNTS_SQL = """
SELECT
  (SELECT COUNT(*) FROM slice WHERE category = 'kernel') AS kernels,
  (SELECT COUNT(*) FROM slice WHERE category = 'gpu_memcpy') AS memcpys,
  (SELECT COUNT(*) FROM slice WHERE category IN ('cuda_runtime', 'cuda_driver')) AS api,
  (SELECT TOTAL(dur) FROM slice WHERE category = 'kernel') AS kernel_ns,
  (SELECT COUNT(*) FROM flow) AS flows
"""
ERRORS_SQL = "SELECT name, value FROM stats WHERE value > 0 AND severity IN ('error', 'data_loss')"


@pytest.fixture(scope="module")
def browser():
    with perfetto_ui.chromium() as chromium:
        yield chromium


def _expected(src: Path) -> dict:
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    q = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    try:
        return {"kernels": q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
                "memcpys": q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"),
                "api": q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"),
                "kernel_ns": q("SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
                "flows": q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") +
                q("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")}
    finally:
        con.close()


def test_nsys_export_in_the_ui(browser):
    """`traceaug open` on the .sqlite: the UI loads its temporary conversion (the same bytes
    `traceaug convert` writes), announced and addressed by the export's own name."""
    src = shared_trace("nsys/a100_saxpy_mpi_rank0.sqlite")
    with perfetto_ui.TraceServer(src, src.name) as server, \
            perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        assert not ui.errors(), f"the UI showed an error: {ui.errors()}"
        assert state["ready"], state
        (got,) = ui.query(COUNTS_SQL)
        assert got == _expected(src)
        assert ui.query(ERRORS_SQL) == []
        names = ui.query("SELECT p.name AS p, t.name AS t FROM thread t JOIN process p USING (upid) "
                         "WHERE t.name IS NOT NULL")
        pairs = {(r["p"], r["t"]) for r in names}
        assert ("GPU 0", "stream 7") in pairs and ("./saxpy-mpi-cuda", "MPI Rank 0") in pairs
