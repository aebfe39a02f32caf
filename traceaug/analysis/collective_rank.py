"""One rank's collectives as small tables with no engine, so they pickle back from any task (the per-rank half
of ``collectives``): an instance is an NCCL / RCCL kernel, its launch and the CPU op that issued it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..read.kinds import COLLECTIVE_OPS
from ..sql_text import literal_list
from .collective_windows import Windows, windows
from .gpu_steps import GpuOps, gpu_ops, step_at
from .steps import is_comm, steps
from .tables import matches, take

if TYPE_CHECKING:
    from ..trace import Trace

LOAD = {"kind": "collectives"}
# Bytes per element of the dtypes PyTorch writes in "dtype" / "Input type" args.
DTYPE_BYTES = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "uint32": 4, "unsigned int": 4,
    "double": 8, "float64": 8, "long": 8, "long int": 8, "int64": 8, "long long": 8,
    "unsigned long": 8, "uint64": 8, "half": 2, "float16": 2, "bfloat16": 2, "c10::half": 2,
    "c10::bfloat16": 2, "short": 2, "int16": 2, "char": 1, "int8": 1, "byte": 1, "uint8": 1,
    "bool": 1, "unsigned char": 1, "signed char": 1, "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}
# Canonical collective kinds, from args ("allreduce", "all_to_all"), annotations
# ("nccl:all_reduce", "nccl:_allgather_base") or kernel names ("ncclDevKernel_AllGather_RING_LL").
KINDS = {
    "allreduce": "AllReduce", "allgather": "AllGather", "allgatherbase": "AllGather",
    "allgatherintocoalesced": "AllGather", "allgathercoalesced": "AllGather",
    "allgatherintotensorcoalesced": "AllGather", "reducescatter": "ReduceScatter",
    "reducescatterbase": "ReduceScatter", "reducescattertensorcoalesced": "ReduceScatter",
    "alltoall": "AllToAll", "alltoallbase": "AllToAll", "alltoallv": "AllToAll",
    "broadcast": "Broadcast", "reduce": "Reduce", "sendrecv": "SendRecv", "send": "Send",
    "recv": "Recv", "gather": "Gather", "scatter": "Scatter", "barrier": "Barrier",
    "allreducecoalesced": "AllReduce",
}
_KERNEL_KIND = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+?)(?:_|\(|$)", re.IGNORECASE)
_ARG = {"Collective name": "coll_name", "In msg nelems": "in_nelems", "Out msg nelems": "out_nelems",
        "Group size": "group_size", "dtype": "dtype", "Process Group Name": "pg_name",
        "Process Group Description": "pg_desc", "Process Group Ranks": "pg_ranks", "Seq": "seq",
        "seq": "seq"}
COLL_COLUMNS = ("ts", "end", "dur", "name", "device", "stream", "launch_ts", "launch_tid",
                "issue_ts", "issue_op", "kind", "coll_name", "in_nelems", "out_nelems", "bytes",
                "dtype", "group_size", "pg_name", "pg_desc", "pg_ranks", "seq", "step")


def kind_of_name(text: str | None) -> str | None:
    """The canonical kind (``KINDS``) of a collective name, annotation or kernel name."""
    if not isinstance(text, str) or not text:
        return None
    m = _KERNEL_KIND.match(text)
    key = m.group(1) if m else text.split(":", 1)[-1]
    return KINDS.get(re.sub(r"[^a-z]", "", key.lower()))


@dataclass
class RankTables:
    """A rank's ``colls`` (per NCCL / RCCL kernel, GPU start order), ``steps`` and cause ``windows`` (None:
    ops unknown), in absolute ns (engine ns + ``base_ns``); sized by the collectives, not the events."""

    path: str
    rank: int | None
    base_ns: int
    world_size: int | None
    pg_config: list = field(default_factory=list)
    colls: pd.DataFrame = field(default_factory=lambda: _empty(COLL_COLUMNS))
    steps: pd.DataFrame = field(default_factory=lambda: _empty(("step", "ts", "end")))
    windows: Windows | None = None
    # the read's text rebase (prefix, spacing; ``read.rebase.Rebase``), which every load of
    # the file chooses alike: merge rebases the file's text with it instead of planning again
    text_base: tuple[bytes | None, bytes | None] | None = None


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def _args_by_slice(trace: Trace, ids: list[int]) -> dict[int, dict[str, object]]:
    """The args of slices ``ids`` as {id: {key without "args.": value}}. The ids come as a
    VALUES table joined to the slices (looked up by id): ``id IN (...)`` read every slice."""
    out: dict[int, dict[str, object]] = {i: {} for i in ids}
    for lo in range(0, len(ids), 2000):
        chunk = ",".join(f"({i})" for i in ids[lo:lo + 2000])
        c = trace.columns("SELECT s.id, a.key, COALESCE(a.int_value, a.string_value, a.real_value) "
                          f"AS v FROM (VALUES {chunk}) v JOIN slice s ON s.id = v.column1 "
                          "JOIN args a ON a.arg_set_id = s.arg_set_id")
        for i, k, v in zip(c["id"].tolist(), c["key"].tolist(), c["v"].tolist()):
            out[i][k.removeprefix("args.")] = v
    return out


def _dims_bytes(args: dict) -> int | None:
    """Bytes of the first tensor an op's ``Input Dims`` / ``Input type`` args describe."""
    dims = [v for k, v in args.items() if k.startswith("Input Dims[0][")]
    dtype = args.get("Input type[0]")
    size = DTYPE_BYTES.get(str(dtype).lower()) if dtype is not None else None
    if not dims or size is None or not all(isinstance(d, int) for d in dims):
        return None
    return int(np.prod(dims)) * size


def _collective_args(kernel: dict, ops: list[dict]) -> dict:
    """The instance's fields from the kernel's args, else its issuing ops' (kernel first)."""
    out: dict = {}
    for source in (kernel, *ops):
        for key, col in _ARG.items():
            if out.get(col) is None and source.get(key) is not None:
                out[col] = source[key]
    nelems = [out.get(k) for k in ("in_nelems", "out_nelems") if isinstance(out.get(k), int)]
    size = DTYPE_BYTES.get(str(out.get("dtype", "")).lower())
    out["bytes"] = (max(nelems) * size if nelems and size
                    else next((b for b in map(_dims_bytes, ops) if b is not None), None))
    return out


def _gpu_frame(o: dict, comm: np.ndarray, base: int) -> pd.DataFrame:
    """The GPU ops (``GpuOps.ops``) as ``collective_windows.windows`` takes them."""
    return pd.DataFrame({"ts": o["ts"] + base, "end": o["end"] + base, "name": o["name"],
                         "device": o["device"], "comm": comm})


def tables(trace: Trace, causes: bool = True, ops: GpuOps | None = None) -> RankTables:
    """One rank's tables from its trace (``LOAD``, or any kind keeping its events); ``causes``: with cause
    windows; ``ops``: the trace's ``gpu_ops`` if the caller has them (else read if the windows need them)."""
    base = trace.base_ns
    trace.include("traceaug.gpu")
    if ops is None and causes:  # the windows take every GPU op
        ops = gpu_ops(trace)
    if ops is not None:
        # every GPU op's kind is kernel / memcpy / memset: its category is "communication"
        # exactly where ``steps.is_comm`` says so (``steps.category``)
        comm = ops.ops["category"] == "communication"
        comm_names = ops.ops["name"][comm]
    else:  # no windows: of the GPU ops, the NCCL / RCCL kernels' names are all it needs
        comm_names = trace.columns("SELECT DISTINCT name FROM traceaug_gpu_op")["name"]
        comm_names = comm_names[is_comm(comm_names)]
    g = trace.columns(
        "SELECT g.id, g.ts, g.dur, g.name, g.device, g.stream, r.ts AS launch_ts, "
        "tr.tid AS launch_tid FROM traceaug_gpu_op g "
        "LEFT JOIN _traceaug_first_launch l USING (correlation) "
        "LEFT JOIN slice r ON r.id = l.id LEFT JOIN _traceaug_track tr ON tr.track_id = r.track_id "
        f"WHERE g.name IN {literal_list(sorted(set(comm_names.tolist())))} ORDER BY g.ts, g.id")
    names = g["name"].tolist()
    ts = g["ts"].astype(np.int64) + base
    end = ts + np.maximum(g["dur"].astype(np.int64), 0)
    c = trace.columns("SELECT s.id, s.ts, s.dur, s.name, tr.tid FROM slice s "
                      "JOIN _traceaug_track tr USING (track_id) "
                      "WHERE s.category IN ('cpu_op', 'Operator', 'user_annotation')")
    # in start order, ties in the engine's order (numpy's stable sort: SQL's ORDER BY is slower)
    c = take(c, np.argsort(c["ts"], kind="stable"))
    cts = c["ts"].astype(np.int64) + base
    cpu = pd.DataFrame({"ts": cts, "end": cts + np.maximum(c["dur"].astype(np.int64), 0),
                        "name": c["name"].astype(object), "tid": c["tid"]})
    st = steps(trace)
    step_df = pd.DataFrame({"step": st["step"], "ts": st["ts"] + base,
                            "end": st["ts"] + np.maximum(st["dur"], 0) + base})
    issuing = np.flatnonzero(matches(c["name"], lambda n: n.startswith(COLLECTIVE_OPS)))
    kernel_ids = g["id"].astype(np.int64).tolist()
    args = _args_by_slice(trace, kernel_ids + c["id"][issuing].astype(np.int64).tolist())
    launch = g["launch_ts"].astype(np.float64)
    i_ts, i_end, i_tid = cts[issuing], cpu["end"].to_numpy()[issuing], c["tid"][issuing]
    records = []
    for i, kid in enumerate(kernel_ids):
        lts = int(launch[i]) + base if launch[i] == launch[i] else None  # (NaN: no launch)
        issuers = []  # the issuing ops: collective ops holding the launch on its thread
        if lts is not None:
            issuers = issuing[(i_ts <= lts) & (i_end >= lts) & (i_tid == g["launch_tid"][i])].tolist()
        rec = _collective_args(args[kid], [args[int(c["id"][h])] for h in issuers])
        rec["kind"] = (kind_of_name(rec.get("coll_name"))
                       or next((kind_of_name(c["name"][h]) for h in issuers
                                if c["name"][h].startswith(("nccl:", "rccl:"))
                                and kind_of_name(c["name"][h])), None)
                       or kind_of_name(names[i]) or "Unknown")
        rec.update(ts=int(ts[i]), end=int(end[i]), dur=int(end[i] - ts[i]), name=names[i],
                   device=g["device"][i], stream=g["stream"][i],
                   launch_ts=lts, launch_tid=g["launch_tid"][i] if lts is not None else None,
                   issue_ts=int(cts[issuers[0]]) if issuers else lts,
                   issue_op=str(c["name"][issuers[-1]]) if issuers else None)
        records.append(rec)
    colls = pd.DataFrame.from_records(records, columns=list(COLL_COLUMNS))
    when = np.array([r["launch_ts"] if r["launch_ts"] is not None else r["ts"] for r in records],
                    np.int64)
    colls["step"] = step_at(when, step_df["ts"].to_numpy(), step_df["end"].to_numpy(),
                            step_df["step"].to_numpy())
    for col in ("seq", "group_size", "bytes", "in_nelems", "out_nelems", "launch_ts", "issue_ts"):
        # from the records, not the frame: pandas makes ints beside None float64, which
        # rounds epoch ns to 256 ns
        colls[col] = pd.array([int(v) if isinstance(v, (int, float, np.integer)) and v == v else None
                               for v in (r.get(col) for r in records)], dtype="Int64")
    info = trace.distributed_info
    return RankTables(path=str(trace.path), rank=trace.rank, base_ns=base,
                      world_size=trace.world_size, pg_config=list(info.get("pg_config") or []),
                      colls=colls, steps=step_df,
                      windows=windows(colls, _gpu_frame(ops.ops, comm, base), cpu, step_df)
                      if causes else None,
                      text_base=(trace.plan.rebase.prefix, trace.plan.rebase.sep)
                      if trace.plan is not None else None)
