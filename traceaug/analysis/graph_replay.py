"""CUDA / HIP graph replays attributed to the ops that captured them: the kernels one graph launch replays
share its correlation id, so no CPU op launched them; the capture (``--capture``, or a capture inside the
trace) records each dispatch as a launch call inside its op. Kernels match captured dispatches by graph
node id where the trace records it (CUDA), else by dispatch order within the launch (ROCm), checked."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

import traceaug.runtime as runtime

from ..progress import note
from ..read.inputs import capture_files
from .serving import GRAPH_LAUNCHES
from .shapes import recorded
from .tables import Columns, codes, objects

if TYPE_CHECKING:
    from ..trace import Trace

_IN = ", ".join(f"'{n}'" for n in GRAPH_LAUNCHES)
UNKNOWN = "(unattributed: graph replay)"  # the op of a replayed kernel no capture explains
# What to record when the capture is missing (item 4 of the serving view: never a guess).
RECORD = ("profile the graph capture too (vLLM / SGLang capture traces) and pass it with --capture; "
          "per-op time, launch delay and the critical path through the graph are unreliable without it")


@dataclass
class Graph:
    """One captured graph: where it came from, the batch size its capture says, and per dispatch (in
    order) the kernel it recorded, its graph node id (-1: none), the CPU op it ran in, that op's call (a
    number, one per op call in the capture) and its recorded shapes (``flops.Inputs``, None: none)."""

    source: str
    batch: int | None
    kernels: list[str]
    nodes: list[int]
    ops: list[str]
    calls: list[int] = field(default_factory=list)
    inputs: list = field(default_factory=list)


@dataclass
class Replays:
    """The graph-replayed GPU ops (``ops``: ts, dur, name, correlation, node, ``op`` attributed or
    ``UNKNOWN``, ``call``: that op's call, one number per launch and captured call, -1: none, ``inputs``: its
    shapes), how many were attributed, and a line per launch that could not be."""

    ops: Columns
    attributed: int = 0
    captures: int = 0  # captured graphs found
    problems: list[str] = field(default_factory=list)

    @property
    def replayed(self) -> int:
        return len(self.ops["ts"])

    def line(self) -> str:
        """``info``'s line: how many replayed kernels were attributed, and what to do if not all."""
        if not self.replayed:
            return "no graph-replayed kernels"
        out = f"{self.attributed} of {self.replayed} graph-replayed kernels attributed to their ops"
        if not self.captures:
            out += f" (no capture: {RECORD})"
        elif self.problems:
            out += (f" ({'; '.join(self.problems)}; per-op time, launch delay and the critical path "
                    "through those graphs are unreliable)")
        return out


def replayed(trace: Trace, launch_names: np.ndarray | None = None) -> Columns:
    """The GPU ops graph launches replayed, by launch then start: ``id``, ``ts``, ``dur``, ``name``, ``kind``,
    ``correlation``, ``node`` (graph node id, -1: none), ``launch_ts`` (engine ns), ``pid``, ``stream``;
    ``launch_names`` (the GPU ops' launching calls, when known): none a graph launch, no query."""
    trace.include("traceaug.gpu")
    none = launch_names is not None and not np.isin(launch_names, GRAPH_LAUNCHES).any()
    c = trace.columns(
        "SELECT g.id, g.ts, g.dur, g.name, g.kind, g.correlation, r.ts AS launch_ts, g.pid, g.stream, "
        "COALESCE(CAST(extract_arg(g.arg_set_id, 'args.graph node id') AS INT), -1) AS node "
        "FROM traceaug_gpu_op g JOIN _traceaug_first_launch l USING (correlation) "
        f"JOIN slice r ON r.id = l.id WHERE r.name IN ({_IN}) {'AND 0' if none else ''} "
        "ORDER BY r.ts, g.correlation, g.ts, g.id")
    return {"ts": c["ts"].astype(np.int64), "dur": c["dur"].astype(np.int64),
            "name": c["name"].astype(object), "kind": c["kind"].astype(object),
            "correlation": c["correlation"].astype(np.int64), "node": c["node"].astype(np.int64),
            "launch_ts": c["launch_ts"].astype(np.int64), "pid": c["pid"].astype(np.int64),
            "stream": c["stream"].astype(np.int64), "id": c["id"].astype(np.int64)}


def captured(trace: Trace, source: str, batch: int | None = None) -> list[Graph]:
    """The graphs captured in ``trace``: per ``*StreamBeginCapture`` / ``*StreamEndCapture`` pair on a
    thread, the launch calls between them in order, with the innermost CPU op holding each."""
    c = trace.columns(
        "WITH b AS (SELECT id, ts, track_id FROM slice WHERE name GLOB '*StreamBeginCapture*'), "
        # materialized: inlined, each window's end was searched again for every slice joined to it
        "w AS MATERIALIZED (SELECT b.id AS graph, b.ts AS lo, (SELECT MIN(e.ts) FROM slice e WHERE "
        "e.track_id = b.track_id AND e.ts > b.ts AND e.name GLOB '*StreamEndCapture*') AS hi, b.track_id "
        "FROM b) "
        "SELECT w.graph, r.name AS call, extract_arg(r.arg_set_id, 'args.kernel') AS kernel, "
        "COALESCE(CAST(extract_arg(r.arg_set_id, 'args.graph node id') AS INT), -1) AS node, "
        # the innermost CPU op holding the call: its parent when that is one (the deepest), else searched
        "CASE WHEN p.category IN ('cpu_op', 'Operator') THEN p.id ELSE (SELECT a.id FROM "
        "ancestor_slice(r.id) a WHERE a.category IN ('cpu_op', 'Operator') ORDER BY a.depth DESC LIMIT 1) "
        "END AS op_id "
        "FROM slice r LEFT JOIN slice p ON p.id = r.parent_id "
        "JOIN w ON r.track_id = w.track_id AND r.ts > w.lo AND r.ts < w.hi "
        "WHERE r.category IN ('cuda_runtime', 'cuda_driver', 'Runtime') AND (r.name GLOB '*Launch*' "
        "OR r.name GLOB '*Memcpy*' OR r.name GLOB '*Memset*') ORDER BY w.graph, r.ts, r.id")
    op_of, inputs_of = recorded(trace, sorted({int(i) for i in c["op_id"].tolist() if i is not None
                                               and i == i}))
    graphs: dict[int, Graph] = {}
    for g, call, kernel, node, op in zip(*(c[k].tolist() for k in ("graph", "call", "kernel", "node",
                                                                   "op_id"))):
        graph = graphs.setdefault(g, Graph(source, batch, [], [], []))
        graph.kernels.append(kernel if isinstance(kernel, str) else _copy_kind(call))
        graph.nodes.append(-1 if node is None or node != node else int(node))
        name, arg_set = op_of.get(op if op is not None and op == op else -1, (call, -1))
        graph.ops.append(name)
        graph.calls.append(int(op) if op is not None and op == op else -1)
        graph.inputs.append(inputs_of.get(arg_set))
    return list(graphs.values())


def _copy_kind(call: str) -> str:
    """What a captured copy / set call replays as: a ``memcpy`` or ``memset`` op (compared by kind)."""
    return "memset" if "Memset" in call else "memcpy" if "Memcpy" in call else call


def graphs_for(trace: Trace) -> list[Graph]:
    """The captured graphs for ``trace``'s replays: the runtime's ``--capture`` (``read_ahead``'s, if it
    was), else a capture inside the trace itself (read again with the launch calls' kernel names)."""
    given = runtime.current().capture
    cache = trace.__dict__.setdefault("_capture_graphs", {})  # per --capture: several analyses ask
    if given not in cache:
        ahead = _AHEAD.pop(given, None)
        cache[given] = _taken(ahead, given) if ahead is not None else _graphs(trace, given)
    return cache[given]


def _taken(ahead: Future, given: str) -> list[Graph]:
    """``read_ahead``'s graphs (its thread shows no progress line): a wait of over half a second is said."""
    try:
        return ahead.result(timeout=0.5)
    except TimeoutError:
        note(f"reading the capture {given}")
        return ahead.result()


_AHEAD: dict[str, Future] = {}  # --capture: its graphs, being read in a thread


def read_ahead(given: str) -> None:
    """Read the captures ``given`` names in a thread while the command reads its trace (their engine parses
    and answers outside the GIL); its graphs (or its error) go to the first ``graphs_for`` of ``given``."""
    from ..engine.imports import perfetto_light
    from ..processes import Threads

    perfetto_light()  # (before the perfetto API's first import, as the command line's own)
    from ..trace import Trace  # noqa: F401  (imported here: the thread imports nothing first)

    with runtime.using(progress=False, workers=1):  # (no progress line and no pass-1 child from it)
        threads = Threads(1, thread_name_prefix="traceaug-capture")
        _AHEAD[given] = threads.submit(_graphs, None, given)
    threads.shutdown(wait=False)


def forget_ahead(given: str) -> None:
    """Drop ``read_ahead``'s graphs of ``given`` if no ``graphs_for`` took them (its thread ends alone)."""
    _AHEAD.pop(given, None)


def _graphs(trace: Trace | None, given: str | None) -> list[Graph]:
    from ..trace import Trace as Loaded

    if given:
        out = []
        for file, batch in capture_files(given):
            with Loaded(file, "capture") as t:
                out += captured(t, file.name, batch)
        return out
    begins = trace.columns("SELECT COUNT(*) AS n FROM slice WHERE name GLOB '*StreamBeginCapture*'")
    if not begins["n"][0]:
        return []
    with Loaded(trace.path, "capture") as t:
        return captured(t, Path(trace.path).name)


def attribute(trace: Trace, batch_of=None, launch_names: np.ndarray | None = None) -> Replays:
    """The replayed GPU ops (``replayed``) with the ops that captured them (``graphs_for``), each launch
    matched to a captured graph by node id where both record it, else by order with names and count
    checked; ``batch_of(launch_ts)``: the serving step's batch size there, to prefer a capture of it."""
    ops = replayed(trace, launch_names)
    n = len(ops["ts"])
    ops["op"] = np.full(n, UNKNOWN, dtype=object)
    ops["call"], ops["inputs"] = np.full(n, -1, np.int64), np.full(n, None, object)
    out = Replays(ops)
    if not n:
        return out
    graphs = graphs_for(trace)
    out.captures = len(graphs)
    if not graphs:
        return out
    starts = np.flatnonzero(np.r_[True, ops["correlation"][1:] != ops["correlation"][:-1]])
    for lo, hi in zip(starts, np.r_[starts[1:], n]):
        batch = batch_of(int(ops["launch_ts"][lo])) if batch_of else None
        g, found, why = match(ops, slice(lo, hi), graphs, batch)
        if g is None:
            at = trace.absolute(int(ops["launch_ts"][lo])) / 1000
            out.problems.append(f"the graph launch at {at:.3f} µs replaying {hi - lo} kernels matches no "
                                f"captured graph ({'; '.join(why)})")
            continue
        ops["op"][lo:hi] = [g.ops[i] for i in found]
        ops["inputs"][lo:hi] = [g.inputs[i] for i in found]
        calls = np.array([g.calls[i] for i in found], np.int64)  # a number per launch and call: lo + k
        ops["call"][lo:hi] = np.where(calls >= 0, codes(calls.tolist())[0] + lo, -1)
        out.attributed += hi - lo
    return out


def match(ops: Columns, at: slice, graphs: list[Graph], batch: int | None
          ) -> tuple[Graph | None, list[int], list[str]]:
    """The first graph that agrees with one launch's replayed ``ops[at]`` (a graph of the step's ``batch``
    first) and each replayed op's dispatch in it, else None and why each graph does not."""
    names, kinds, nodes = ops["name"][at].tolist(), ops["kind"][at].tolist(), ops["node"][at].tolist()
    order = sorted(graphs, key=lambda g: g.batch != batch)
    why = []
    for g in order:
        if min(nodes) >= 0 and min(g.nodes, default=-1) >= 0:  # CUDA: by graph node id
            where = {node: i for i, node in enumerate(g.nodes)}
            if all(x in where for x in nodes):
                return g, [where[x] for x in nodes], []
            why.append(f"{g.source}: node ids {sorted(set(nodes) - set(where))[:3]} not captured")
            continue
        if len(g.kernels) != len(names):
            why.append(f"{g.source}: {len(g.kernels)} captured dispatches, {len(names)} replayed")
            continue
        bad = next((i for i, (k, nm, kd) in enumerate(zip(g.kernels, names, kinds))
                    if k != (nm if kd == "kernel" else kd)), None)
        if bad is None:
            return g, list(range(len(names))), []
        why.append(f"{g.source}: dispatch {bad} captured {g.kernels[bad][:60]!r}, replayed "
                   f"{names[bad][:60]!r}")
    return None, [], why


def op_times(r: Replays, phase: np.ndarray | None = None) -> Columns:
    """GPU time per attributed op (``op``, ``count`` of kernels, ``total`` ns, exact), largest first, the
    unattributed kernels as one ``UNKNOWN`` row; with each replayed op's ``phase``, per (``phase``, op)."""
    return times(r.ops["op"], r.ops["dur"], phase)


def op_of(r: Replays | None, ids: np.ndarray, column: str = "op") -> np.ndarray:
    """Per GPU op (by engine ``ids``): the op that captured it (or that op's ``column``: ``call``,
    ``inputs``) where a graph replayed it and a capture attributed it, else None."""
    out = np.full(len(ids), None, object)
    if r is None or not r.attributed:
        return out
    known = r.ops["op"] != UNKNOWN
    order = np.argsort(r.ops["id"][known], kind="stable")
    rid, op = r.ops["id"][known][order], r.ops[column][known][order]
    at = np.minimum(np.searchsorted(rid, ids), len(rid) - 1)
    hit = rid[at] == ids
    out[hit] = op[at[hit]]
    return out


def times(op: np.ndarray, dur: np.ndarray, phase: np.ndarray | None = None) -> Columns:
    """``op_times`` of any GPU ops: per (``phase``, ``op``) the ``count`` and exact ``total`` ns of ``dur``,
    largest first."""
    phase = np.full(len(op), "", object) if phase is None else phase
    code, keys = codes(list(zip(phase.tolist(), op.tolist())))
    total = np.zeros(len(keys), np.int64)
    np.add.at(total, code, dur)
    order = np.argsort(-total, kind="stable")
    return {"phase": objects([keys[i][0] for i in order]), "op": objects([keys[i][1] for i in order]),
            "count": np.bincount(code, minlength=len(keys))[order], "total": total[order]}
