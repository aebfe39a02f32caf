"""A query's result as typed numpy columns straight from its protobuf batches: varint and float cells go to
int64 / float64 in bulk; only columns with text, blobs or NULL among integers become objects."""

from __future__ import annotations

import sys

import numpy as np

# QueryResult.CellsBatch.CellType (protos/perfetto/trace_processor/trace_processor.proto)
NULL, VARINT, FLOAT64, STRING, BLOB = 1, 2, 3, 4, 5


def _strings(batch) -> list[str]:
    """A batch's text cells, interned: a name on thousands of rows is one string (held and pickled once)."""
    text = batch.string_cells
    if isinstance(text, bytes):  # not UTF-8 throughout: protobuf left it as bytes
        text = text.decode("utf-8", "replace")
    return list(map(sys.intern, text.split("\0")[:-1])) if text else []


class _Cells:
    """A result's cells, all batches joined (typing each batch apart cost more numpy calls than the cells):
    per cell type, its values in row-major order and each cell's place among them, made on first use."""

    def __init__(self, batches: list, ncols: int) -> None:
        self.batches = batches
        self.types = np.concatenate([np.array(b.cells, dtype=np.int8) for b in batches]
                                    ).reshape(-1, ncols)
        self._values: dict[int, np.ndarray] = {}
        self._places: dict[int, np.ndarray] = {}

    def cells(self, kind: int, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Where column ``c`` holds cells of type ``kind``, and their values."""
        if kind not in self._values:
            self._values[kind] = _values(self.batches, kind)
            self._places[kind] = np.cumsum(self.types == kind).reshape(self.types.shape) - 1
        at = self.types[:, c] == kind
        return at, self._values[kind][self._places[kind][:, c][at]]

    def column(self, c: int) -> np.ndarray:
        # which cell types (bincount: np.unique would import numpy.ma, a slow import)
        present = set(np.flatnonzero(np.bincount(self.types[:, c].astype(np.intp))).tolist())
        if len(present) == 1 and present <= {VARINT, FLOAT64, STRING, BLOB}:  # one type: as it is
            return self.cells(present.pop(), c)[1]
        numeric = present <= {VARINT, FLOAT64, NULL} and FLOAT64 in present
        col = np.full(len(self.types), np.nan) if numeric else np.full(len(self.types), None, object)
        for kind in (VARINT, FLOAT64, STRING, BLOB):
            if kind in present:
                at, values = self.cells(kind, c)
                objects = not numeric and kind in (VARINT, FLOAT64)  # Python ints / floats
                col[at] = values.tolist() if objects else values
        return col


def _values(batches: list, kind: int) -> np.ndarray:
    """The batches' cells of one type, in order: int64, float64, or objects (text, blobs)."""
    if kind == VARINT:
        return np.concatenate([np.array(b.varint_cells, dtype=np.int64) for b in batches])
    if kind == FLOAT64:
        return np.concatenate([np.array(b.float64_cells, dtype=np.float64) for b in batches])
    cells = [v for b in batches for v in (_strings(b) if kind == STRING else b.blob_cells)]
    out = np.empty(len(cells), dtype=object)
    out[:] = cells
    return out


def typed_columns(result) -> dict[str, np.ndarray]:
    """Each column of a QueryResult: int64 if every value is an integer, float64 if numbers with a float
    (NULL as NaN), else objects (None for NULL; numbers as Python ints / floats)."""
    names = list(result.column_names)
    batches = [b for b in result.batch if len(b.cells)]
    if not batches:
        return {name: np.empty(0, dtype=object) for name in names}
    cells = _Cells(batches, len(names))
    return {name: cells.column(c) for c, name in enumerate(names)}
