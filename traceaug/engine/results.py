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


class _Batch:
    """One batch's cells: for each cell type, its values in row-major order and each cell's
    place among them, made once per batch on first use."""

    def __init__(self, batch, ncols: int) -> None:
        self.batch = batch
        self.types = np.array(batch.cells, dtype=np.int8).reshape(-1, ncols)
        self._values: dict[int, np.ndarray] = {}
        self._places: dict[int, np.ndarray] = {}

    def cells(self, kind: int, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Where column ``c`` holds cells of type ``kind``, and their values."""
        if kind not in self._values:
            self._values[kind] = _values(self.batch, kind)
            self._places[kind] = np.cumsum(self.types == kind).reshape(self.types.shape) - 1
        at = self.types[:, c] == kind
        return at, self._values[kind][self._places[kind][:, c][at]]

    def column(self, c: int) -> np.ndarray:
        # which cell types (bincount: np.unique would import numpy.ma, 7 ms of a command)
        present = set(np.flatnonzero(np.bincount(self.types[:, c].astype(np.intp))).tolist())
        if present == {VARINT}:
            return self.cells(VARINT, c)[1]
        numeric = present <= {VARINT, FLOAT64, NULL} and FLOAT64 in present
        col = np.full(len(self.types), np.nan) if numeric else np.full(len(self.types), None, object)
        for kind in (VARINT, FLOAT64, STRING, BLOB):
            if kind in present:
                at, values = self.cells(kind, c)
                objects = not numeric and kind in (VARINT, FLOAT64)  # Python ints / floats
                col[at] = values.tolist() if objects else values
        return col


def _values(batch, kind: int) -> np.ndarray:
    """A batch's cells of one type, in order: int64, float64, or objects (text, blobs)."""
    if kind == VARINT:
        return np.array(batch.varint_cells, dtype=np.int64)
    if kind == FLOAT64:
        return np.array(batch.float64_cells, dtype=np.float64)
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
        if not len(batch.cells):
            continue
        cells = _Batch(batch, len(names))
        for c in range(len(names)):
            parts[c].append(cells.column(c))
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
