"""Per rank, what can name a late arrival's cause, made in the rank's task from its ops.

A collective's cause window on its rank's own clock runs from the group's previous instance
(its launch for the CPU, its end for the GPU; else the start of the step holding this one,
else the rank's first op) to this launch (CPU) / arrival (GPU). For every (collective,
previous collective) pair matching may make (``collective_groups.predecessors``) and both
kinds, ``Windows`` keeps the time per name of the CPU ops on the launch thread / the
non-communication kernels on the collective's device wholly inside the window: a few names
and sums per collective, so the main process never receives a rank's ops.
"""

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
            pick = (self.cpu["tid"] == where if kind == "cpu"
                    else ~self.gpu["comm"].astype(bool) & (self.gpu["device"] == where))
            ops = (self.cpu if kind == "cpu" else self.gpu)[pick.to_numpy()]
            code = self.codes[kind][pick.to_numpy()]
            order = np.argsort(ops["ts"].to_numpy(np.int64), kind="stable")
            self._at[key] = (ops["ts"].to_numpy(np.int64)[order],
                             ops["end"].to_numpy(np.int64)[order], code[order])
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
    kinds, rows, prevs, sizes, codes, totals = [], [], [], [], [], []
    pairs = sorted(predecessors(colls))
    for k, kind in enumerate(KINDS):
        for row, prev in pairs:
            w = _window(col, held, firsts, kind, row, prev)
            code = total = np.empty(0, np.int64)
            if w is not None:
                where = col["launch_tid"][row] if kind == "cpu" else col["device"][row]
                code, total = _sums(*ops.of(kind, where), *w)
            kinds.append(k)
            rows.append(row)
            prevs.append(prev)
            sizes.append(len(code))
            codes.append(code)
            totals.append(total)
    code = np.concatenate(codes) if codes else np.empty(0, np.int64)
    used, code = np.unique(code, return_inverse=True)  # only the names the windows hold
    return Windows(np.asarray(ops.names, dtype=object)[used], np.array(kinds, np.int8),
                   np.array(rows, np.int64), np.array(prevs, np.int64),
                   np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]),
                   code.astype(np.int32),
                   np.concatenate(totals) if totals else np.empty(0, np.int64))


def _window(col: dict, steps: tuple[np.ndarray, np.ndarray], firsts: list[int], kind: str,
            row: int, prev: int) -> tuple[int, int] | None:
    """Collective ``row``'s window after ``prev`` (-1: none), on the rank's clock (``col``:
    the collectives' columns; ``steps``: the steps' starts and ends)."""
    end = col["launch_ts"][row] if kind == "cpu" else col["ts"][row]
    if end is None or end != end:
        return None
    start = None
    if prev >= 0:
        start = col["launch_ts"][prev] if kind == "cpu" else col["end"][prev]
    if start is None or start != start:
        held = np.flatnonzero((steps[0] <= end) & (steps[1] >= end))
        if not len(held) and not firsts:
            return None
        start = int(steps[0][held[0]]) if len(held) else min(firsts)
    return int(start), int(end)


def _sums(ts: np.ndarray, end: np.ndarray, code: np.ndarray, lo_ns: int, hi_ns: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """(codes, summed durations) of the named ops wholly inside [lo_ns, hi_ns]."""
    lo, hi = np.searchsorted(ts, lo_ns, "left"), np.searchsorted(ts, hi_ns, "right")
    inside = np.flatnonzero(end[lo:hi] <= hi_ns) + lo
    inside = inside[code[inside] >= 0]
    c = code[inside]
    order = np.argsort(c, kind="stable")
    c, d = c[order], (end[inside] - ts[inside])[order]
    if not len(c):
        return c.astype(np.int64), d.astype(np.int64)
    first = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    return c[first].astype(np.int64), np.add.reduceat(d, first).astype(np.int64)
