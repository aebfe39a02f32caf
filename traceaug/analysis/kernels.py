"""Per-kernel statistics (GPU ops only: kernels, copies, sets; runtime calls are not kernels),
as HTA's ``get_gpu_kernel_breakdown`` and the GPU Kernel Analyzer's kernel table."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

import traceaug.runtime as runtime

from ..errors import TraceaugError
from .sums import group_sums, total
from .tables import Columns, codes, concat, first_appearance, objects

if TYPE_CHECKING:
    from .gpu_steps import GpuOps

TYPES = {"comp": "computation", "comm": "communication", "mem": "memory"}
SORTS = ("total", "count", "mean", "max", "min", "std", "share", "share_time", "share_launches", "name")
# kernel_table's columns; times in ns, shares in percent.
COLUMNS = ("rank", "name", "type", "count", "total", "mean", "std", "min", "max",
           "share_launches", "share_time")


def grouped(key: np.ndarray, values: np.ndarray, code: np.ndarray | None = None
            ) -> tuple[list, Columns]:
    """Count, total, mean, std (n-1, 0 for one), min and max of ``values`` per distinct ``key``
    (in order of first appearance; ``code``: the keys already numbered so, if known)."""
    if code is None:
        code, keys = codes(key)
    else:
        code = first_appearance(code)
        keys = key[np.unique(code, return_index=True)[1]].tolist()
    n = len(keys)
    v = values.astype(np.int64)
    count = np.bincount(code, minlength=n).astype(np.int64)
    total = np.bincount(code, v.astype(np.float64), n)
    exact_total = group_sums(code, v, n, "kernel durations")
    mean = total / np.maximum(count, 1)
    sq = np.bincount(code, (v - mean[code]) ** 2, n)
    std = np.where(count > 1, np.sqrt(sq / np.maximum(count - 1, 1)), 0.0)
    order = np.argsort(code, kind="stable")
    first = np.searchsorted(code[order], np.arange(n))
    lo = np.minimum.reduceat(v[order], first) if len(v) else np.empty(0, np.int64)
    hi = np.maximum.reduceat(v[order], first) if len(v) else np.empty(0, np.int64)
    return keys, {"count": count, "total": exact_total, "mean": mean, "std": std, "min": lo, "max": hi}


def load_kind(step: int | None) -> str:
    """What ``kernel_table`` needs loaded: a step's ops are told by their launches, and graph replays
    by theirs, attributed with ``--capture`` (``gpu_steps``); else only the GPU ops ("gpu_ops")."""
    return "gpu_steps" if step is not None or runtime.current().capture else "gpu_ops"


def kernel_table(g: GpuOps, step: int | None = None, kind: str | None = None) -> Columns:
    """One row per GPU op name (``COLUMNS``), largest total first: count, total / mean / std / min / max ns,
    type, share of launches and of GPU time (percent of the rows before the ``kind`` filter)."""
    rows = np.flatnonzero(g.rows(step))
    ops = g.ops
    code = first_appearance(ops["name_id"][rows])
    keys, stats = grouped(ops["name"][rows], ops["dur"][rows], code)
    types = ops["category"][rows][np.unique(code, return_index=True)[1]]
    all_count, all_total = max(int(stats["count"].sum()), 1), max(total(stats["total"]), 1)
    out = {"rank": objects([g.rank] * len(keys)), "name": objects(keys), "type": types, **stats,
           "share_launches": 100 * stats["count"] / all_count,
           "share_time": 100.0 * stats["total"] / all_total}
    if kind is not None:
        if kind not in TYPES:
            raise TraceaugError(f"--type must be one of {', '.join(TYPES)}")
        keep = types == TYPES[kind]
        out = {k: v[keep] for k, v in out.items()}
    return sort_by(out, "total")


def sort_by(table: Columns, by: str) -> Columns:
    """Rows ordered by column ``by`` (``share``: share of GPU time): largest first, names
    alphabetically (ties by name)."""
    by = "share_time" if by == "share" else by
    if by not in SORTS:
        raise TraceaugError(f"--sort must be one of {', '.join(SORTS)}")
    names = table["name"].astype(str)
    order = np.lexsort((names,) if by == "name" else (names, -table[by].astype(np.float64)))
    return {k: v[order] for k, v in table.items()}


def across_ranks(tables: list[Columns], comm: dict[str, dict] | None = None) -> Columns:
    """Per kernel name over ranks, largest mean first: ``ranks``, ``mean_total``, ``min_total``, ``max_total``
    (ns), ``max_total_rank`` (a comm kernel's: the rank that waited longest); with ``comm`` (``kernel_split``)
    also ``mean_wait``, ``mean_transfer`` (ns; they sum to the kernel's time) and ``waited_for_rank``."""
    name = np.concatenate([t["name"] for t in tables]) if tables else objects([])
    total = np.concatenate([t["total"] for t in tables]) if tables else np.empty(0, np.int64)
    rank = np.concatenate([t["rank"] for t in tables]) if tables else objects([])
    keys, stats = grouped(name, total)
    code, _ = codes(name)
    order = np.lexsort((-total, code))  # each name's largest total first
    first = order[np.searchsorted(code[order], np.arange(len(keys)))]
    out = {"name": objects(keys), "type": objects([None] * len(keys)), "ranks": stats["count"],
           "mean_total": stats["mean"], "min_total": stats["min"], "max_total": stats["max"],
           "max_total_rank": objects(rank[first].tolist())}
    if comm is not None:
        split = [comm.get(k, {}) for k in keys]
        out["mean_wait"] = np.array([s.get("wait", np.nan) for s in split], np.float64)
        out["mean_transfer"] = np.array([s.get("transfer", np.nan) for s in split], np.float64)
        out["waited_for_rank"] = objects([s.get("waited_for") for s in split])
    types = {n: t for tb in tables for n, t in zip(tb["name"].tolist(), tb["type"].tolist())}
    out["type"] = objects([types[k] for k in keys])
    order = np.lexsort((out["name"].astype(str), -out["mean_total"]))
    return {k: v[order] for k, v in out.items()}


def comm_rows(g: GpuOps, step: int | None) -> tuple[bool, Any]:
    """A rank's part of ``comm_split``: whether it has a communication kernel, and its
    communication kernels' rows (``collectives.from_gpu_ops``; rank None: set by the job)."""
    from . import collectives as co

    return (bool((g.ops["category"] == "communication").any()),
            co.from_gpu_ops(g.rank, g.trace.base_ns, g.ops, g.rows(step)))


def comm_split(rows: list[tuple[bool, Any]]) -> dict[str, dict] | None:
    """Each communication kernel's wait and transfer across the ranks (``kernel_split``) from
    each rank's ``comm_rows`` (a rank without a number: its place), None when no rank has one."""
    if not any(has for has, _ in rows):
        return None
    from . import collectives as co

    return co.kernel_split([t if t.rank is not None else replace(t, rank=i)
                            for i, (_, t) in enumerate(rows)])


def part(g: GpuOps, in_job: bool, step: int | None, kind: str | None = None,
         sort: str = "total") -> dict:
    """A rank's part of the ``kernels`` command: its sorted kernel table, and in a job of
    several ranks (``in_job``) its ``comm_rows``."""
    out = {"kernels": sort_by(kernel_table(g, step, kind), sort)}
    if in_job:
        out["comm"] = comm_rows(g, step)
    return out


def combine(parts: list[dict], top: int | None) -> list[tuple[str, Columns]]:
    """The ``kernels`` command's sections from each rank's ``part``."""
    tables = [p["kernels"] for p in parts]
    out = [("kernels", concat([{k: v[:top] for k, v in t.items()} for t in tables]))]
    if len(parts) > 1:
        across = across_ranks(tables, comm_split([p["comm"] for p in parts]))
        out.append(("kernels across ranks", {k: v[:top] for k, v in across.items()}))
    return out
