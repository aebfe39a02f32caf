"""ProfilerStep windows and each op's step: a CPU event's holds its start, a GPU op's is its launching call's
(by correlation, as HTA assigns iterations); the engine counts CPU ops per (name, step) in SQL."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TraceaugError
from .serving import steps as serving_steps
from .tables import Columns, codes, matches, objects

if TYPE_CHECKING:
    from ..trace import Trace

GPU_KINDS = ("kernel", "memcpy", "memset")
_COMM = re.compile(r"^nccl|ncclKernel|^hip.*nccl|^rccl|ncclDevKernel", re.IGNORECASE)
_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
STEP_MAX = 2**63 - 1  # step numbers are int64 columns


def is_comm(names: np.ndarray | list) -> np.ndarray:
    """Which names are NCCL / RCCL communication kernels' (``_COMM``; None and non-text: no),
    as a boolean array, each distinct name matched once."""
    return matches(names, _COMM.search)


def steps(trace: Trace) -> Columns:
    """The steps: a serving trace's scheduler steps (``serving.steps``: numbered 0, 1, … in start order),
    else the ProfilerStep annotations; ``step`` number, ``ts``, ``dur`` (engine ns), sorted by ts; the first
    annotation of each number."""
    served = serving_steps(trace)
    if len(served["step"]):
        return {k: served[k] for k in ("step", "ts", "dur")}
    trace.include("traceaug.base")  # not .kineto: its every-event view is no use here
    c = trace.columns("SELECT ts, dur, name FROM traceaug_step ORDER BY ts")
    first: dict[int, int] = {}  # step number -> its first row
    for i, name in enumerate(c["name"].tolist()):
        n = step_number(trace.path, name)
        if n is not None:
            first.setdefault(n, i)
    keep = list(first.values())
    return {"step": np.array(list(first), np.int64), "ts": c["ts"][keep].astype(np.int64),
            "dur": c["dur"][keep].astype(np.int64)}


def step_number(path, name) -> int | None:
    """The N of a ``ProfilerStep#N`` name (None for another name); a number beyond int64 is
    no step a profiler wrote: the user's error naming the file, not a wrapped or dropped step."""
    m = _STEP.search(name) if isinstance(name, str) else None
    if m is None:
        return None
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > 19 or int(digits) > STEP_MAX:
        raise TraceaugError(f"{path}: ProfilerStep#{m.group(1)[:40]}: step number out of range "
                            f"(at most {STEP_MAX})")
    return int(digits)


def check_step(path, numbers: np.ndarray, step: int, serving: bool = False) -> None:
    """Raise the user's error when ``step`` is not among the trace's step ``numbers`` (listed when few, else
    their count and range: a line, not 20,000 numbers): ProfilerSteps, or ``serving`` steps."""
    if (numbers == step).any():
        return
    have = (", ".join(map(str, numbers.tolist())) if len(numbers) <= 12 else
            f"{len(numbers)} from {int(numbers.min())} to {int(numbers.max())}")
    what = "serving step " if serving else "ProfilerStep#"
    raise TraceaugError(f"{path}: no {what}{step} (steps: {have or 'none'})")


STEP_TABLE = "_traceaug_step_window"
_BATCH = 5000  # rows per INSERT: SQLite caps one statement's length


def step_table(trace: Trace, st: Columns) -> str:
    """The steps as an indexed SQLite table (``pos``, ``start``, ``end``, ``step``) for ``step_of``: a B-tree
    seek per lookup, not an SQL CASE branch per step (slow for many steps)."""
    trace.execute(f"DROP TABLE IF EXISTS {STEP_TABLE}")
    trace.execute(f"CREATE TABLE {STEP_TABLE} (pos INTEGER PRIMARY KEY, start INT, end INT, "
                  "step INT)")
    rows = [f"({i},{s},{s + d},{n})" for i, (n, s, d) in
            enumerate(zip(st["step"].tolist(), st["ts"].tolist(), st["dur"].tolist()))]
    for i in range(0, len(rows), _BATCH):
        trace.execute(f"INSERT INTO {STEP_TABLE} VALUES {','.join(rows[i : i + _BATCH])}")
    trace.execute(f"CREATE INDEX {STEP_TABLE}_start ON {STEP_TABLE} (start, pos)")
    return STEP_TABLE


def step_of(ts: str, table: str) -> str:
    """SQL for the step whose window [start, end) in ``table`` (``step_table``) holds the
    timestamp expression ``ts``, else -1: of the steps starting at or before it, the last."""
    return (f"COALESCE((SELECT IIF({ts} < w.end, w.step, -1) FROM {table} w "
            f"WHERE w.start <= {ts} ORDER BY w.start DESC, w.pos DESC LIMIT 1), -1)")


def is_gpu(kind: np.ndarray) -> np.ndarray:
    """Which rows are GPU ops (compared in C: kinds are a handful of strings)."""
    out = np.zeros(len(kind), dtype=bool)
    for k in GPU_KINDS:
        out |= kind == k
    return out


def category(kind: np.ndarray, name_code: np.ndarray, names: list) -> np.ndarray:
    """HTA's kernel types for GPU ops (communication, memory, computation); the kind otherwise.
    ``name_code`` numbers each row's name in ``names`` (each name is matched once)."""
    comm = is_comm(names)
    gpu = is_gpu(kind)
    out = kind.astype(object)
    out[gpu] = "computation"  # each assignment overrides the last: communication wins
    out[gpu & ((kind == "memcpy") | (kind == "memset"))] = "memory"
    out[gpu & comm[name_code]] = "communication"
    return out


def gpu_ops(trace: Trace, table: str) -> Columns:
    """GPU ops in id order: ``id``, ``ts``, ``dur``, ``name``, ``kind``, ``correlation`` and the ``step`` (in
    ``table``) of the runtime call that launched them (the first with their correlation id), else -1."""
    trace.include("traceaug.gpu")
    c = trace.columns(f"SELECT id, ts, dur, name, kind, correlation, {step_of('launch_ts', table)} AS step "
                      "FROM traceaug_gpu_op_launch ORDER BY id")
    return {**c, "kind": c["kind"].astype(object)}


def cpu_op_groups(trace: Trace, table: str) -> Columns:
    """CPU ops per ``name`` and ``step`` (in ``table``) holding their start: ``count``, ``total`` and
    ``self`` (less the CPU ops nested in them: ``aten::item`` without its ``_local_scalar_dense``). Not the
    ProfilerStep annotations (2021-schema ops): runs numbering steps apart would differ in every one."""
    trace.include("traceaug.kineto")
    return trace.columns(  # up: each op and its ancestors up to the nearest CPU op, whatever the load kept
        "WITH RECURSIVE op AS (SELECT s.id, s.parent_id, s.name, s.ts, s.dur FROM slice s "
        "JOIN _traceaug_kind k USING (category) WHERE k.kind = 'cpu_op'), "
        "up(dur, at) AS (SELECT dur, parent_id FROM op WHERE parent_id IS NOT NULL UNION ALL "
        "SELECT up.dur, s.parent_id FROM up JOIN slice s ON s.id = up.at "
        "WHERE s.parent_id IS NOT NULL AND up.at NOT IN (SELECT id FROM op)), "
        "nested AS (SELECT at AS id, SUM(dur) AS dur FROM up WHERE at IN (SELECT id FROM op) "
        "GROUP BY 1) "
        f"SELECT o.name, {step_of('o.ts', table)} AS step, COUNT(*) AS count, SUM(o.dur) AS total, "
        "SUM(o.dur - COALESCE(n.dur, 0)) AS self FROM op o LEFT JOIN nested n ON n.id = o.id "
        "WHERE o.name NOT GLOB 'ProfilerStep#*' GROUP BY 1, 2")


def op_groups(trace: Trace) -> tuple[Columns, Columns, list, Columns]:
    """The ops to compare, counted in SQL: CPU ops per (name, step), GPU ops one each (``gpu, kind, category,
    name_code, step, count, total, self``); the GPU ops (with ``category``); the distinct names; the steps."""
    st = steps(trace)
    table = step_table(trace, st)
    cpu, gpu = cpu_op_groups(trace, table), gpu_ops(trace, table)
    n_cpu = len(cpu["step"])
    kind = np.concatenate([np.full(n_cpu, "cpu_op", dtype=object), gpu["kind"]])
    name_code, names = codes(np.concatenate([objects(cpu["name"].tolist()), gpu["name"]]))
    cat = category(kind, name_code, names)
    gpu["category"] = cat[n_cpu:]
    groups = {"gpu": np.r_[np.zeros(n_cpu, bool), np.ones(len(gpu["step"]), bool)], "kind": kind,
              "category": cat, "name_code": name_code,
              "step": np.r_[cpu["step"], gpu["step"]].astype(np.int64),
              "count": np.r_[cpu["count"], np.ones(len(gpu["step"]), np.int64)].astype(np.int64),
              "total": np.r_[cpu["total"], gpu["dur"]].astype(np.int64),
              "self": np.r_[cpu["self"], gpu["dur"]].astype(np.int64)}
    return groups, gpu, names, st


def shorten(name: str) -> str:
    """A kernel / op name without template and argument lists (``f<int>(x)`` -> ``f``)."""
    if name.startswith(("Memcpy", "Memset")) or ("<" not in name and "(" not in name):
        return name
    out: list[str] = []
    depth = 0
    for c in name.replace("->", ""):
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(c)
    return " ".join("".join(out).split()) or name
