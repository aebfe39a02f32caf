"""Per rank, the time per op name inside each collective's cause window (from the group's previous instance to
this launch / arrival), summed in the rank's task so the main process never receives its ops."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .collective_groups import predecessors

KINDS = ("cpu", "gpu")


@dataclass
class Windows:
    """Entry i is (``KINDS[kind[i]]``, ``row[i]``, ``prev[i]``: -1 for none); its ops' names
    are ``names[code[start[i]:start[i + 1]]]`` and their summed durations (ns) ``total[...]``."""

    names: np.ndarray
    kind: np.ndarray
    row: np.ndarray
    prev: np.ndarray
    start: np.ndarray
    code: np.ndarray
    total: np.ndarray

    def index(self) -> dict[tuple[str, int, int], int]:
        """{(kind, row, prev): entry}."""
        return {(KINDS[k], r, p): i for i, (k, r, p) in enumerate(zip(
            self.kind.tolist(), self.row.tolist(), self.prev.tolist()))}

    def totals(self, entry: int) -> pd.Series:
        """Per name, the time (ns, float) of entry ``entry``'s ops, names in sorted order."""
        lo, hi = int(self.start[entry]), int(self.start[entry + 1])
        return pd.Series(self.total[lo:hi].astype(np.float64),
                         index=self.names[self.code[lo:hi]]).groupby(level=0).sum()


class _Ops:
    """A rank's CPU ops per thread and non-communication kernels per device, in start order,
    their names as codes (-1: none) into one table of the rank's names."""

    def __init__(self, gpu: pd.DataFrame, cpu: pd.DataFrame) -> None:
        self.gpu, self.cpu = gpu, cpu
        codes, self.names = pd.factorize(pd.concat([cpu["name"], gpu["name"]],
                                                   ignore_index=True).astype(object))
        self.codes = {"cpu": codes[:len(cpu)], "gpu": codes[len(cpu):]}
        self._at: dict[tuple, tuple] = {}

    def of(self, kind: str, where) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ts, end, code) of the CPU ops on thread ``where`` or the non-communication GPU ops
        on device ``where``."""
        key = (kind, where)
        if key not in self._at:
            ops = self.cpu if kind == "cpu" else self.gpu
            pick = (ops["tid"].to_numpy() == where if kind == "cpu"
                    else ~ops["comm"].to_numpy(bool) & (ops["device"].to_numpy() == where))
            ts, end = ops["ts"].to_numpy(np.int64)[pick], ops["end"].to_numpy(np.int64)[pick]
            order = np.argsort(ts, kind="stable")
            self._at[key] = (ts[order], end[order], self.codes[kind][pick][order])
        return self._at[key]


def windows(colls: pd.DataFrame, gpu: pd.DataFrame, cpu: pd.DataFrame,
            steps: pd.DataFrame) -> Windows:
    """The cause windows of a rank's collectives ``colls`` from its ops (``gpu``: ts, end,
    name, device, comm; ``cpu``: ts, end, name, tid) and ``steps`` (ts, end), all in one clock."""
    ops = _Ops(gpu, cpu)
    firsts = [int(x["ts"].min()) for x in (cpu, gpu) if len(x)]
    col = {c: colls[c].to_numpy(dtype=object) for c in ("ts", "end", "launch_ts", "launch_tid",
                                                        "device")}
    held = (steps["ts"].to_numpy(), steps["end"].to_numpy())
    pairs = sorted(predecessors(colls))
    kinds = np.repeat(np.arange(len(KINDS), dtype=np.int8), len(pairs))
    rows = np.array([r for _ in KINDS for r, _p in pairs], np.int64)
    prevs = np.array([p for _ in KINDS for _r, p in pairs], np.int64)
    # the entries' windows by the ops they cover: (kind, thread or device) -> entries, bounds
    spans: dict[tuple, tuple[list, list, list]] = {}
    for e, (k, row, prev) in enumerate(zip(kinds.tolist(), rows.tolist(), prevs.tolist())):
        w = _window(col, held, firsts, KINDS[k], row, prev)
        if w is not None:
            where = col["launch_tid"][row] if KINDS[k] == "cpu" else col["device"][row]
            for part, x in zip(spans.setdefault((KINDS[k], where), ([], [], [])), (e, *w)):
                part.append(x)
    found = [_sums(*ops.of(*key), tuple(map(np.array, span))) for key, span in spans.items()]
    entry, code, total = (np.concatenate([f[i] for f in found]) if found else np.empty(0, np.int64)
                          for i in range(3))
    order = np.lexsort((code, entry))  # by entry, each entry's names in code order
    entry, code, total = entry[order], code[order], total[order]
    used, code = np.unique(code, return_inverse=True)  # only the names the windows hold
    return Windows(np.asarray(ops.names, dtype=object)[used], kinds, rows, prevs,
                   np.r_[0, np.cumsum(np.bincount(entry, minlength=len(kinds)))].astype(np.int64),
                   code.astype(np.int32), total.astype(np.int64))


def _window(col: dict, steps: tuple[np.ndarray, np.ndarray], firsts: list[int], kind: str,
            row: int, prev: int) -> tuple[int, int] | None:
    """Collective ``row``'s window after ``prev`` (-1: none), on the rank's clock (``col``:
    the collectives' columns; ``steps``: the steps' starts and ends)."""
    end = col["launch_ts"][row] if kind == "cpu" else col["ts"][row]
    if pd.isna(end):  # None, an Int64 column's NA, NaN
        return None
    start = (col["launch_ts"][prev] if kind == "cpu" else col["end"][prev]) if prev >= 0 else None
    if pd.isna(start):
        held = np.flatnonzero((steps[0] <= end) & (steps[1] >= end))
        if not len(held) and not firsts:
            return None
        start = int(steps[0][held[0]]) if len(held) else min(firsts)
    return int(start), int(end)


def _sums(ts: np.ndarray, end: np.ndarray, code: np.ndarray, windows: tuple) -> tuple[np.ndarray, ...]:
    """(entry, code, summed durations) of the named ops (``ts``-sorted) wholly inside each
    window (entry, lo_ns, hi_ns): every window at once, one row per (entry, code)."""
    entry, lo_ns, hi_ns = windows
    lo, hi = np.searchsorted(ts, lo_ns, "left"), np.searchsorted(ts, hi_ns, "right")
    size = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(len(entry)), size)  # each window's ops' positions, in a row
    at = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size) + lo[owner]
    keep = (end[at] <= hi_ns[owner]) & (code[at] >= 0)
    owner, at = owner[keep], at[keep]
    c = code[at].astype(np.int64)
    key = owner * (int(c.max(initial=0)) + 1) + c  # by window, then name
    order = np.argsort(key)
    key, owner, c, d = key[order], owner[order], c[order], (end[at] - ts[at])[order]
    if not len(c):
        return entry[owner].astype(np.int64), c, d.astype(np.int64)
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    return (entry[owner[first]].astype(np.int64), c[first],
            np.add.reduceat(d, first).astype(np.int64))
