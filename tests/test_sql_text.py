"""SQL literals (``traceaug.sql_text``): each text reads back as itself in SQLite (the
dialect of Perfetto's SQL and of Nsight's exports), quotes and all."""

from __future__ import annotations

import sqlite3

from traceaug.sql_text import literal, literal_list

TEXTS = ["plain", "it's", "''", "", "a'); DROP TABLE t; --",
         "void at::native::elementwise_kernel<128, 4>(int, 'x')", "µs ∑"]


def test_a_literal_reads_back_as_its_text() -> None:
    db = sqlite3.connect(":memory:")
    for t in TEXTS:
        assert db.execute(f"SELECT {literal(t)}").fetchone()[0] == t


def test_a_literal_list_holds_exactly_its_texts() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (v TEXT)")
    db.executemany("INSERT INTO t VALUES (?)", [(t,) for t in [*TEXTS, "other", "it"]])
    got = {r[0] for r in db.execute(f"SELECT v FROM t WHERE v IN {literal_list(TEXTS[:4])}")}
    assert got == set(TEXTS[:4])
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == len(TEXTS) + 2
