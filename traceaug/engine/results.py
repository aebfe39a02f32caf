"""A query's result as typed numpy columns, straight from its protobuf batches.

Upstream's ``QueryResultIterator`` builds one object array of every cell and
``as_pandas_dataframe`` keeps it as objects; for a 75k-row result that and the
typing after it cost as much as the query itself. Here each batch's varint and
float cells go to int64 / float64 columns in bulk; only columns holding text,
blobs or NULL among integers become object arrays.
"""

from __future__ import annotations

import numpy as np

# QueryResult.CellsBatch.CellType (protos/perfetto/trace_processor/trace_processor.proto)
NULL, VARINT, FLOAT64, STRING, BLOB = 1, 2, 3, 4, 5


def _strings(batch) -> list[str]:
    text = batch.string_cells
    if isinstance(text, bytes):  # not UTF-8 throughout: protobuf left it as bytes
        text = text.decode("utf-8", "replace")
    return text.split("\0")[:-1] if text else []


def _batch_columns(batch, ncols: int) -> list[np.ndarray]:
    types = np.array(batch.cells, dtype=np.int8)
    if not len(types):
        return [np.empty(0, dtype=object) for _ in range(ncols)]
    grid = types.reshape(-1, ncols)
    flat = {kind: np.cumsum(types == kind).reshape(grid.shape) - 1 for kind in (VARINT, FLOAT64)}
    values = {VARINT: np.array(batch.varint_cells, dtype=np.int64),
              FLOAT64: np.array(batch.float64_cells, dtype=np.float64)}
    texts: dict = {}  # STRING / BLOB -> the batch's cells of that type, as an object array
    out = []
    for c in range(ncols):
        kinds = grid[:, c]
        present = set(np.unique(kinds).tolist())
        if present == {VARINT}:
            out.append(values[VARINT][flat[VARINT][:, c]])
        elif present <= {VARINT, FLOAT64, NULL} and FLOAT64 in present:
            col = np.full(len(kinds), np.nan)
            for kind in (VARINT, FLOAT64):
                at = kinds == kind
                col[at] = values[kind][flat[kind][:, c][at]]
            out.append(col)
        else:
            out.append(_objects(batch, grid, c, present, flat, values, texts))
    return out


def _objects(batch, grid, c, present, flat, values, texts: dict) -> np.ndarray:
    kinds = grid[:, c]
    col = np.full(len(kinds), None, dtype=object)
    for kind in (VARINT, FLOAT64):
        at = kinds == kind
        if at.any():
            col[at] = values[kind][flat[kind][:, c][at]].tolist()
    for kind in (STRING, BLOB):
        if kind not in present:
            continue
        cells = texts[kind] if kind in texts else texts.setdefault(kind, _cells_array(batch, kind))
        index = np.cumsum(grid == kind).reshape(grid.shape) - 1  # the k-th such cell, row-major
        at = kinds == kind
        col[at] = cells[index[:, c][at]]
    return col


def _cells_array(batch, kind: int) -> np.ndarray:
    """A batch's string (or blob) cells as one object array, made once per batch."""
    cells = _strings(batch) if kind == STRING else list(batch.blob_cells)
    out = np.empty(len(cells), dtype=object)
    out[:] = cells
    return out


def typed_columns(result) -> dict[str, np.ndarray]:
    """Each column of a QueryResult: int64 when every value is an integer, float64 when they
    are numbers with at least one float (NULL as NaN), else objects (None for NULL)."""
    names = list(result.column_names)
    parts: list[list[np.ndarray]] = [[] for _ in names]
    for batch in result.batch:
        for c, col in enumerate(_batch_columns(batch, len(names))):
            parts[c].append(col)
    out = {}
    for name, cols in zip(names, parts):
        cols = [c for c in cols if len(c)]
        if not cols:
            out[name] = np.empty(0, dtype=object)
        elif len({c.dtype for c in cols}) == 1:
            out[name] = np.concatenate(cols)
        else:  # batches typed differently: type the whole column as one
            out[name] = _retyped(np.concatenate([c.astype(object) for c in cols]))
    return out


def _retyped(column: np.ndarray) -> np.ndarray:
    kinds = set(map(type, column.tolist()))
    if kinds <= {int}:
        return column.astype(np.int64)
    if kinds <= {int, float, type(None)} and float in kinds:
        return column.astype(np.float64)
    return column
