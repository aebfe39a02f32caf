"""Frequent GPU kernel sequences: HTA's whole-sequence patterns per operator instance (``whole``), repeats
mined across instances (``operator``) and along each stream (``stream``); kernels K1.., patterns P1..."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..sql_text import literal
from .repeats import range_reduce, repeats
from .steps import shorten
from .tables import Columns, codes, first_match, frame, ints, objects, position_in

if TYPE_CHECKING:
    import pandas as pd

    from ..trace import Trace

SCOPES = ("whole", "operator", "stream")
PATTERN_COLUMNS = ("pattern", "scope", "operators", "kernel_ids", "kernels", "length", "count",
                   "gpu_total_ns", "gpu_mean_ns", "cpu_total_ns", "gpu_pct")

GPU_SQL = """
SELECT id, ts, dur, name, pid, device, stream, correlation FROM traceaug_gpu_op ORDER BY ts, id
"""
# Runtime calls by id: a GPU op's launch is the first one sharing its correlation id.
LAUNCH_SQL = "SELECT id, correlation FROM traceaug_runtime WHERE correlation IS NOT NULL ORDER BY id"
# Every slice with its parent and track (GPU ops too: no CPU op is their ancestor, so they
# own nothing; leaving them out by category cost more than reading them).
SLICE_SQL = """
SELECT id, COALESCE(parent_id, -1) AS parent, depth, ts, dur, track_id FROM slice ORDER BY id
"""
TRACK_SQL = "SELECT track_id, pid, tid FROM _traceaug_track ORDER BY track_id"
# The CPU ops matching the operator, with names; a named one may be a ``user_annotation`` (as HTA finds
# ``Optimizer.step#SGD.step``), the default leaves those out, or ``ProfilerStep#N`` would own everything.
MATCH_SQL = """
SELECT s.id, s.name FROM slice s WHERE s.category IN ({categories}) AND ({match})
ORDER BY s.id
"""
CPU_OP_CATEGORIES = "'cpu_op', 'Operator'"
NAMED_CATEGORIES = CPU_OP_CATEGORIES + ", 'user_annotation'"


def match_sql(operator: str | None) -> str:
    """The SQL condition on ``s.name`` for ``--operator``: an exact name, or a GLOB (SQLite's:
    ``*``, ``?``, ``[...]``, case-sensitive) when it has one of ``*?[``."""
    if operator is None:
        return "1"
    if any(c in operator for c in "*?["):
        return f"s.name GLOB {literal(operator)}"
    return f"s.name = {literal(operator)}"


@dataclass
class Patterns:
    """What ``compute`` found: ``patterns`` (one row per pattern), ``occurrences`` (one row
    per counted occurrence), the GPU ops (``gpu``) and every kernel name (``K<i+1>``)."""

    patterns: Columns
    occurrences: Columns
    gpu: Columns
    kernel_names: list[str]
    gpu_total_ns: int
    instances: int  # operator instances that launched GPU work


def instance_of(cpu: Columns) -> np.ndarray:
    """For each CPU slice, the row of its outermost ancestor-or-self that is a matching CPU
    op (``match``; -1 if none): one vectorised step per nesting depth."""
    match = cpu["match"].astype(bool)
    parent = position_in(cpu["id"], cpu["parent"])  # (ids are >= 0: no parent, -1, is never found)
    owner = np.full(len(cpu["id"]), -1, np.int64)
    depth = cpu["depth"].astype(np.int64)
    for d in range(int(depth.max(initial=-1)) + 1):
        rows = np.flatnonzero(depth == d)
        p = parent[rows]
        inherited = np.where(p >= 0, owner[np.maximum(p, 0)], -1)
        owner[rows] = np.where(inherited >= 0, inherited, np.where(match[rows], rows, -1))
    return owner


def _occurrence_table(flat: np.ndarray, seq_off: np.ndarray, seq: np.ndarray, start: np.ndarray,
                      length: np.ndarray, gpu: Columns, cpu: Columns,
                      launch_row: np.ndarray) -> Columns:
    """GPU span and time, and the CPU span of the launches, of occurrences given as
    (sequence, start, length) over sequences of GPU op rows (``flat``, split at ``seq_off``)."""
    lo = seq_off[seq] + start
    hi = lo + length
    big = np.iinfo(np.int64).max
    lr = launch_row[flat]
    has = lr >= 0
    at = np.maximum(lr, 0)
    ts = gpu["ts"][flat]
    first_launch = range_reduce(np.minimum, np.where(has, np.arange(len(flat)), big), lo, hi, big)
    found = first_launch != big
    flr = lr[np.where(found, first_launch, 0)] if len(flat) else np.zeros(0, np.int64)
    first = flat[lo] if len(flat) else np.zeros(0, np.int64)
    return {
        "first_op": gpu["id"][first], "gpu_pid": gpu["pid"][first],
        "device": gpu["device"][first], "stream": gpu["stream"][first],
        "gpu_ts": range_reduce(np.minimum, ts, lo, hi, big),
        "gpu_end": range_reduce(np.maximum, ts + gpu["dur"][flat], lo, hi, -big),
        "gpu_ns": range_reduce(np.add, gpu["dur"][flat], lo, hi, 0),
        "cpu_pid": np.where(found, cpu["pid"][flr], -1), "cpu_tid": np.where(found, cpu["tid"][flr], -1),
        "cpu_ts": np.where(found, range_reduce(np.minimum, np.where(has, cpu["ts"][at], big), lo, hi,
                                               big), -1),
        "cpu_end": np.where(found, range_reduce(np.maximum, np.where(has, cpu["ts"][at] + cpu["dur"][at],
                                                                     -big), lo, hi, -big), -1),
    }


def _sequences(keys: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """Rows grouped by key (rows already in GPU start order within a key): the rows end to
    end, each group's offset, length and key."""
    order = np.argsort(keys, kind="stable")
    flat, k = rows[order], keys[order]
    cut = np.r_[0, np.flatnonzero(k[1:] != k[:-1]) + 1] if len(k) else np.zeros(0, np.int64)
    length = np.diff(np.r_[cut, len(flat)]).astype(np.int64)
    return flat, cut.astype(np.int64), length, k[cut] if len(k) else k


def compute(trace: Trace, operator: str | None = None, min_len: int = 3) -> Patterns:
    """Patterns and their counted occurrences (engine ns). ``patterns``: pattern (n of P<n>), scope,
    operators, kernel_ids, kernels, length, count, gpu_total_ns, gpu_mean_ns, cpu_total_ns, gpu_pct;
    ``occurrences``: pattern, scope, seq, start (index in ``seq``), instance (CPU op id), operator, first_op,
    gpu_pid, device, stream, gpu_ts, gpu_end, gpu_ns, cpu_pid, cpu_tid, cpu_ts, cpu_end (-1: none)."""
    trace.include("traceaug.kineto")
    gpu = trace.columns(GPU_SQL)
    cpu = _slices(trace, operator)
    for c in ("id", "ts", "dur", "pid", "device", "stream"):
        gpu[c] = gpu[c].astype(np.int64)
    kernel_code, kernel_names = codes(gpu["name"])
    launch = trace.columns(LAUNCH_SQL)
    at = first_match(launch["correlation"], gpu["correlation"])
    ids = launch["id"].astype(np.int64)
    # no call launched them (no runtime table, NULL correlation ids): no launch, -1
    launch_id = np.where(at >= 0, ids[np.maximum(at, 0)], -1) if len(ids) else np.full(len(at), -1)
    n_cpu = len(cpu["id"])
    launch_row = position_in(cpu["id"], launch_id)
    owner = instance_of(cpu)
    gpu_owner = np.where(launch_row >= 0, owner[np.maximum(launch_row, 0)] if n_cpu else -1, -1)
    all_rows = np.arange(len(gpu["id"]), dtype=np.int64)

    tables: list[tuple[str, list, Columns]] = []  # scope, patterns, occurrences (no ids yet)
    owned = gpu_owner >= 0
    inst_flat, inst_off, inst_len, inst_key = _sequences(gpu_owner[owned], all_rows[owned])
    tables.append(_whole(inst_flat, inst_off, inst_len, inst_key, kernel_code, cpu, gpu,
                         launch_row, min_len))
    mined_seqs = [kernel_code[inst_flat[o:o + n]] for o, n in zip(inst_off.tolist(), inst_len.tolist())]
    tables.append(_mined("operator", mined_seqs, inst_flat, inst_off, inst_key, cpu, gpu, launch_row,
                         min_len))
    stream_key = gpu["device"] * (1 << 32) + (gpu["stream"] & 0xFFFFFFFF)
    st_flat, st_off, st_len, _ = _sequences(stream_key, all_rows)
    st_seqs = [kernel_code[st_flat[o:o + n]] for o, n in zip(st_off.tolist(), st_len.tolist())]
    tables.append(_mined("stream", st_seqs, st_flat, st_off, None, cpu, gpu, launch_row, min_len,
                         owner=gpu_owner))
    _drop_whole_duplicates(tables)
    gpu_total = int(gpu["dur"].sum())
    patterns, occurrences = _number(tables, kernel_names, gpu_total)
    return Patterns(patterns, occurrences, gpu, kernel_names, gpu_total, len(inst_key))


def _slices(trace: Trace, operator: str | None) -> Columns:
    """Every slice (id order) with parent, depth, ts, dur, thread (pid, tid; -1 off thread tracks), ``match``
    (a CPU op matching ``operator``) and, for those, its name (None elsewhere)."""
    cpu = {k: v.astype(np.int64) for k, v in trace.columns(SLICE_SQL).items()}
    tracks = {k: ints(v) for k, v in trace.columns(TRACK_SQL).items()}
    at = position_in(tracks["track_id"], cpu["track_id"])
    for c in ("pid", "tid"):
        cpu[c] = np.where(at >= 0, tracks[c][at], -1) if len(tracks[c]) else np.full(len(at), -1, np.int64)
    categories = CPU_OP_CATEGORIES if operator is None else NAMED_CATEGORIES
    matched = trace.columns(MATCH_SQL.format(categories=categories, match=match_sql(operator)))
    rows = np.searchsorted(cpu["id"], matched["id"].astype(np.int64))
    cpu["match"] = np.zeros(len(cpu["id"]), bool)
    cpu["match"][rows] = True
    cpu["name"] = np.full(len(cpu["id"]), None, object)
    cpu["name"][rows] = matched["name"]
    return cpu


def _whole(flat, off, length, key, kernel_code, cpu, gpu, launch_row, min_len):
    """HTA's grouping: instances with >= min_len GPU ops by (op name, whole sequence)."""
    keep = np.flatnonzero(length >= min_len)
    groups: dict[tuple, list[int]] = {}
    names = cpu["name"][key].tolist() if len(key) else []
    for i in keep.tolist():
        seq = tuple(kernel_code[flat[off[i]:off[i] + length[i]]].tolist())
        groups.setdefault((names[i], seq), []).append(i)
    seq = np.array([i for g in groups.values() for i in g], np.int64)
    occ = _occurrence_table(flat, off, seq, np.zeros(len(seq), np.int64), length[seq], gpu, cpu,
                            launch_row)
    inst = key[seq]
    occ["cpu_pid"], occ["cpu_tid"] = cpu["pid"][inst], cpu["tid"][inst]
    occ["cpu_ts"], occ["cpu_end"] = cpu["ts"][inst], cpu["ts"][inst] + cpu["dur"][inst]
    occ.update(seq=seq, start=np.zeros(len(seq), np.int64), instance=cpu["id"][inst],
               operator=objects(cpu["name"][inst].tolist()))
    group = np.repeat(np.arange(len(groups)), [len(g) for g in groups.values()])
    return "whole", [(k[1], k[0]) for k in groups], {**occ, "group": group}


def _mined(scope, seqs, flat, off, key, cpu, gpu, launch_row, min_len, owner=None):
    """Repeats over ``seqs`` with their occurrences (``key``: each sequence's instance row)."""
    found = repeats(seqs, min_len)
    lengths = np.array([len(r.symbols) for r in found], np.int64)
    counts = np.array([r.count for r in found], np.int64)
    seq = np.concatenate([r.seq for r in found]) if found else np.zeros(0, np.int64)
    start = np.concatenate([r.start for r in found]) if found else np.zeros(0, np.int64)
    length = np.repeat(lengths, counts)
    occ = _occurrence_table(flat, off, seq, start, length, gpu, cpu, launch_row)
    if key is not None:
        inst = key[seq]
    else:  # a stream occurrence's instance: that of its first GPU op
        inst = owner[flat[off[seq] + start]] if len(seq) else np.zeros(0, np.int64)
    has = inst >= 0
    occ.update(seq=seq, start=start, instance=np.where(has, cpu["id"][np.maximum(inst, 0)], -1),
               operator=objects([n if h else None for n, h in
                                 zip(cpu["name"][np.maximum(inst, 0)].tolist(), has.tolist())]
                                if len(cpu["id"]) else [None] * len(seq)))
    group = np.repeat(np.arange(len(found)), counts)
    return scope, [(r.symbols, None) for r in found], {**occ, "group": group}


def _drop_whole_duplicates(tables: list) -> None:
    """An operator-scope repeat with the kernels and count of a whole-sequence pattern is
    that pattern (each whole instance is one of its occurrences): keep the whole one."""
    _, whole, wocc = tables[0]
    whole_count = np.bincount(wocc["group"], minlength=len(whole))
    known = {(sym, int(c)) for (sym, _), c in zip(whole, whole_count.tolist())}
    scope, mined, occ = tables[1]
    count = np.bincount(occ["group"], minlength=len(mined))
    keep = np.array([(sym, int(c)) not in known for (sym, _), c in zip(mined, count.tolist())], bool)
    new_id = np.cumsum(keep) - 1
    rows = keep[occ["group"]] if len(occ["group"]) else np.zeros(0, bool)
    occ = {k: v[rows] for k, v in occ.items()}
    occ["group"] = new_id[occ["group"]]
    tables[1] = (scope, [m for m, k in zip(mined, keep.tolist()) if k], occ)


def _number(tables: list, kernel_names: list[str], gpu_total: int) -> tuple[Columns, Columns]:
    """Pattern rows in reporting order (scope, then count, length, GPU time: most first),
    numbered 1..n, and their occurrences carrying that number."""
    rows, occ_parts, next_id = [], [], 1
    short = {k: shorten(kernel_names[k]) for k in  # only the names a pattern holds
             {k for _, found, _ in tables for symbols, _ in found for k in symbols}}
    kid = [f"K{i + 1}" for i in range(len(kernel_names))]
    for scope, found, occ in tables:
        g = occ["group"]
        count = np.bincount(g, minlength=len(found))
        gpu_ns = np.bincount(g, weights=occ["gpu_ns"], minlength=len(found)).astype(np.int64)
        cpu_ns = np.bincount(g, weights=np.where(occ["cpu_ts"] >= 0, occ["cpu_end"] - occ["cpu_ts"], 0),
                             minlength=len(found)).astype(np.int64)
        length = np.array([len(s) for s, _ in found], np.int64)
        order = np.lexsort((-gpu_ns, -length, -count)) if len(found) else np.zeros(0, np.int64)
        ident = np.empty(len(found), np.int64)
        ident[order] = np.arange(next_id, next_id + len(found))
        ops_of = {}
        for grp, op in zip(g.tolist(), occ["operator"].tolist()):
            if op is not None:
                ops_of.setdefault(grp, dict.fromkeys([]))[op] = None
        for i in order.tolist():
            symbols, name = found[i]
            rows.append({"pattern": int(ident[i]), "scope": scope,
                         "operators": name if name is not None else ", ".join(ops_of.get(i, {})),
                         "kernel_ids": " ".join(map(kid.__getitem__, symbols)),
                         "kernels": " | ".join(map(short.__getitem__, symbols)),  # never cut
                         "length": len(symbols), "count": int(count[i]), "gpu_total_ns": int(gpu_ns[i]),
                         "gpu_mean_ns": gpu_ns[i] / count[i] if count[i] else float("nan"),
                         "cpu_total_ns": int(cpu_ns[i]),
                         "gpu_pct": 100 * gpu_ns[i] / gpu_total if gpu_total else float("nan")})
        part = {k: v for k, v in occ.items() if k != "group"}
        part["pattern"] = ident[g] if len(g) else np.zeros(0, np.int64)
        part["scope"] = objects([scope] * len(g))
        occ_parts.append(part)
        next_id += len(found)
    text, real = ("scope", "operators", "kernel_ids", "kernels"), ("gpu_mean_ns", "gpu_pct")
    patterns = {k: objects([r[k] for r in rows]) if k in text
                else np.array([r[k] for r in rows], np.float64 if k in real else np.int64)
                for k in PATTERN_COLUMNS}
    first = ("pattern", "scope", "seq", "start", "instance", "operator")
    occurrences = {k: np.concatenate([p[k] for p in occ_parts]) for k in
                   first + tuple(k for k in occ_parts[0] if k not in first)}
    order = np.lexsort((occurrences["gpu_ts"], occurrences["pattern"]))
    return patterns, {k: v[order] for k, v in occurrences.items()}


def patterns(trace: Trace, operator: str | None = None, min_len: int = 3
             ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``compute`` on a loaded trace as two DataFrames: the patterns and their occurrences
    (columns as there). ``traceaug.patterns`` does it on files, overlay included."""
    found = compute(trace, operator, min_len)
    return frame(found.patterns), frame(found.occurrences)
