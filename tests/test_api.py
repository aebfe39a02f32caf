"""The Python API as a first user meets it: typed DataFrames, ``traceaug.query`` answering
like the command line, ``traceaug.diff``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import TESTDATA
from conftest import run_cli as cli

import traceaug
from traceaug.sql_modules import modules_for

SMALL = TESTDATA / "small_training.json"
ANSWERS = json.loads((TESTDATA / "small_training.answers.json").read_text())


def test_trace_query_types_columns_as_numbers() -> None:
    """int64 for integers (exact ns), float64 for numbers, nullable Int64 for integers with
    NULL, text as strings; the values equal ``Trace.columns``'s."""
    sql = ("SELECT ts, dur, name, COUNT(*) AS n, AVG(dur) AS mean, "
           "IIF(MIN(dur) > 100000, NULL, MIN(dur)) AS short, NULL AS absent "
           "FROM slice WHERE category = 'kernel' GROUP BY name ORDER BY name")
    with traceaug.load(SMALL, progress=False) as t:
        df = t.query(sql)
        cols = t.columns(sql)
    assert df.dtypes["ts"] == np.int64 and df.dtypes["dur"] == np.int64
    assert df.dtypes["n"] == np.int64 and df.dtypes["mean"] == np.float64
    assert str(df.dtypes["short"]) == "Int64" and df["short"].isna().any() and df["short"].notna().any()
    assert pd.api.types.is_string_dtype(df["name"]) and df["absent"].isna().all()
    assert df["n"].sum() == ANSWERS["counts"]["kernels"]
    assert df["ts"].tolist() == cols["ts"].tolist()
    assert df["short"].dropna().tolist() == [v for v in cols["short"].tolist() if v is not None]


def test_api_query_includes_modules_like_the_cli() -> None:
    sql = "SELECT kind, COUNT(*) AS n FROM traceaug_gpu_op GROUP BY kind ORDER BY kind"
    df = traceaug.query(SMALL, sql, progress=False)
    counts = ANSWERS["counts"]
    assert dict(zip(df["kind"], df["n"])) == {"kernel": counts["kernels"], "memcpy": counts["memcpys"],
                                              "memset": counts["memsets"]}
    assert df.dtypes["n"] == np.int64
    out = cli("query", str(SMALL), sql, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows"] == df.to_dict("records")
    ev = traceaug.query(SMALL, "SELECT COUNT(*) AS n FROM traceaug_event WHERE kind = 'cpu_op'",
                        progress=False)
    assert ev["n"].tolist() == [counts["cpu_ops"]]
    flows = traceaug.query(SMALL, "SELECT COUNT(*) AS n FROM flow", progress=False)  # a full load
    assert flows["n"].tolist() == [ANSWERS["flows"]]


def test_modules_for_names_the_defining_module() -> None:
    assert modules_for("SELECT * FROM traceaug_step") == ["traceaug.base"]
    assert modules_for("select * from TRACEAUG_EVENT e join traceaug_gpu_op g") == [
        "traceaug.kineto", "traceaug.base"]
    assert modules_for("SELECT * FROM slice -- traceaug_gpu_op_x") == []
    assert modules_for("SELECT * FROM _traceaug_kind") == []  # private: no module is guessed


def test_api_query_on_a_rank_directory_takes_a_rank() -> None:
    rank_dir = TESTDATA / "rank_dir"
    answers = json.loads((TESTDATA / "rank_dir.answers.json").read_text())["per_rank"]
    sql = "SELECT COUNT(*) AS n FROM traceaug_gpu_op WHERE kind = 'kernel'"
    for rank in (0, 1):
        df = traceaug.query(rank_dir, sql, rank=rank, progress=False)
        assert df["n"].tolist() == [answers[str(rank)]["counts"]["kernels"]]
    with pytest.raises(traceaug.TraceaugError, match="holds 2 ranks; choose one"):
        traceaug.query(rank_dir, sql)
