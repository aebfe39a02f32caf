"""How results print: floats faithfully (inf, -inf, tiny, huge), missing values one way."""

from __future__ import annotations

import json
import math

from click.testing import CliRunner
from conftest import TESTDATA

from traceaug.cli import main
from traceaug.output import render_columns, render_records

SMALL = TESTDATA / "small_training.json"
EXTREMES = "SELECT 1e999 AS pinf, -1e999 AS ninf, 1e-20 AS tiny, -3.25e-9 AS neg, 1e300 AS huge, " \
           "2.5 AS f, NULL AS n"


def query(sql: str, *extra: str):
    result = CliRunner().invoke(main, ["query", str(SMALL), sql, *extra])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_extreme_floats_in_every_format() -> None:
    header, row = query(EXTREMES).splitlines()
    assert header.split() == ["pinf", "ninf", "tiny", "neg", "huge", "f", "n"]
    assert row.split() == ["inf", "-inf", "1e-20", "-3.25e-09", "1e+300", "2.5", "NULL"]
    csv_rows = query(EXTREMES, "--format", "csv").splitlines()
    assert csv_rows[1].split(",") == ["inf", "-inf", "1e-20", "-3.25e-09", "1e+300", "2.5", ""]
    parsed = [float(v) for v in csv_rows[1].split(",")[:6]]
    assert parsed == [math.inf, -math.inf, 1e-20, -3.25e-9, 1e300, 2.5]
    assert json.loads(query(EXTREMES, "--format", "json"))["rows"] == [
        {"pinf": "inf", "ninf": "-inf", "tiny": 1e-20, "neg": -3.25e-9, "huge": 1e300, "f": 2.5,
         "n": None}]


def test_a_column_keeps_its_decimals_and_its_tiny_values() -> None:
    table = render_columns({"x": [1.5, 0.0001, 0.00005, 1e-20, 0.0, 2e16, math.nan, None]}, "table")
    assert table.split() == ["x", "1.5000", "0.0001", "5e-05", "1e-20", "0.0000", "2e+16", "NULL", "NULL"]
    assert render_columns({"x": [1.25, 3.0]}, "table").split() == ["x", "1.25", "3.00"]


def test_missing_values_print_one_way() -> None:
    """None (objects, SQL NULL among text) and NaN (NULL among floats) print alike."""
    cols = {"text": ["a", None], "number": [1.5, math.nan]}
    assert render_columns(cols, "table").splitlines()[2].split() == ["NULL", "NULL"]
    assert render_columns(cols, "csv").splitlines()[2] == ","
    assert json.loads(render_columns(cols, "json"))[1] == {"text": None, "number": None}
    assert render_records([{"rank": None, "warnings": []}], "table").split() == [
        "rank", "NULL", "warnings", "none"]
