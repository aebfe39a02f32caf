"""Numpy tables (column name -> array of equal length) and what analyses do with them: the command line avoids
DataFrames, since pandas' import alone is slow; ``frame`` makes a DataFrame of one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

Columns = dict[str, np.ndarray]


def take(table: Columns, rows: np.ndarray) -> Columns:
    """The rows ``rows`` (indices or a mask) of every column."""
    return {k: v[rows] for k, v in table.items()}


def codes(column: np.ndarray | list) -> tuple[np.ndarray, list]:
    """Each value's number in order of first appearance, and the distinct values in that
    order (any hashable values, None too): pandas' ``factorize``, NaN aside."""
    seen: dict = {}
    values = column.tolist() if isinstance(column, np.ndarray) else column
    out = np.fromiter((seen.setdefault(v, len(seen)) for v in values), np.int64, len(values))
    return out, list(seen)


def groups(*keys: np.ndarray) -> np.ndarray:
    """Each row's group over ``keys``, numbered in order of first appearance (pandas'
    ``groupby(..., sort=False).ngroup()``)."""
    code = np.zeros(len(keys[0]), np.int64)
    for key in keys:
        c = codes(key)[0]
        code = code * (int(c.max(initial=0)) + 1) + c
    return first_appearance(code)


def first_appearance(code: np.ndarray) -> np.ndarray:
    """Integer codes renumbered 0, 1, ... in order of first appearance."""
    if not len(code):
        return code.astype(np.int64)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def sorted_codes(values: np.ndarray) -> np.ndarray:
    """Each integer's rank among the distinct values (``np.unique(values,
    return_inverse=True)[1]``, by one stable argsort)."""
    v = np.asarray(values, dtype=np.int64)
    o = np.argsort(v, kind="stable")
    s = v[o]
    out = np.empty(len(v), np.int64)
    out[o] = np.cumsum(np.r_[True, s[1:] != s[:-1]]) - 1 if len(v) else s
    return out


def position_in(sorted_keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each value's index in ``sorted_keys`` (the first equal key), -1 where none is equal: a join by one
    binary search."""
    at = np.searchsorted(sorted_keys, values)
    hit = at < len(sorted_keys)
    hit[hit] = sorted_keys[at[hit]] == values[hit]
    return np.where(hit, at, -1)


def first_match(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query, the index of the first row of ``keys`` holding the same value, else
    -1 (a join on the first match, as a launch to its GPU ops; None and NaN match nothing)."""
    first: dict = {}
    for i, k in enumerate(keys.tolist()):
        if k is not None and k == k:
            first.setdefault(k, i)
    return np.fromiter((first.get(q, -1) for q in queries.tolist()), np.int64, len(queries))


def matches(values: np.ndarray | list, test) -> np.ndarray:
    """Which values pass ``test`` (a str's predicate; no other value passes), each distinct value tested once:
    names repeat by the thousand, and a regex over a long kernel name is the cost."""
    values = values.tolist() if isinstance(values, np.ndarray) else values
    found = {v: isinstance(v, str) and bool(test(v)) for v in set(values)}
    return np.fromiter(map(found.__getitem__, values), bool, len(values))


def objects(values: list) -> np.ndarray:
    """A list as a 1-D object array (never split into dimensions, whatever the items)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def ints(column: np.ndarray, missing: int = -1) -> np.ndarray:
    """An engine column as int64, ``missing`` where a value is no integer (NULL, text, a real):
    ids stay exact (through float64 they round past 2^53, and int64's ends overflow)."""
    if column.dtype.kind in "iub":
        return column.astype(np.int64)
    return np.fromiter((v if v.__class__ is int else missing for v in column.tolist()), np.int64,
                       len(column))


def isin(column: np.ndarray, values) -> np.ndarray:
    """Membership by equality of hashable values (None and mixed types too)."""
    allowed = set(values.tolist() if isinstance(values, np.ndarray) else values)
    return np.fromiter((v in allowed for v in column.tolist()), bool, len(column))


def frame(table: Columns) -> pd.DataFrame:
    """The table as a pandas DataFrame (imports pandas); object columns of integers int64 (``_ints``)."""
    import pandas as pd

    return pd.DataFrame({k: _ints(k, v, pd) for k, v in table.items()})


def _ints(name: str, column, pd):
    """An object column of integers as int64, with None as pandas' nullable Int64 (None is ``<NA>``, the
    integers stay exact), a rank or step column so even when every value is None; any other as it is."""
    ranks = name in ("rank", "step") or name.endswith("_rank")
    if not isinstance(column, np.ndarray) or column.dtype != object:
        return column
    values = column.tolist()
    if not all(v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool))
               for v in values):
        return column
    if None not in values:
        return column.astype(np.int64) if values or ranks else column
    if values.count(None) == len(values) and not ranks:
        return column
    return pd.array([None if v is None else int(v) for v in values], dtype="Int64")


def concat(tables: list[Columns]) -> Columns:
    """Tables with the same columns, one after the other."""
    if not tables:
        return {}
    return {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}


def columns_of(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """A DataFrame as ``render_columns`` and report sections take it (``frame``'s inverse): numpy
    columns, pandas' NA as None (NaN is missing to ``render_columns`` as it is)."""
    import pandas as pd

    out = {}
    for c in df.columns:
        values = df[c].to_numpy(dtype=object) if df[c].dtype == object or str(df[c].dtype) in (
            "Int64", "Float64") else df[c].to_numpy()
        if values.dtype == object:
            values = np.array([None if v is pd.NA else v for v in values.tolist()] or [],
                              dtype=object)
        out[c] = values
    return out
