"""Collectives across ranks (issue 26): the per-rank tables, matching, waits, stragglers."""

from __future__ import annotations

import gzip
import json

from conftest import shared_trace

from traceaug.analysis.collective_rank import extract

A100 = "kineto/a100_nccl_rank0_of2.json.gz"


def _raw(path):
    with gzip.open(path) if str(path).endswith(".gz") else open(path, "rb") as f:
        return json.load(f)


def test_collective_args_read_for_every_nccl_kernel() -> None:
    path = shared_trace(A100)
    raw = [e for e in _raw(path)["traceEvents"]
           if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    raw.sort(key=lambda e: e["ts"])
    colls = extract(path).colls
    assert len(raw) == len(colls) == 21
    for e, (_, row) in zip(raw, colls.iterrows(), strict=True):
        a = e["args"]
        assert abs(row["ts"] / 1000 - e["ts"]) < 0.002  # absolute, the file's clock
        assert (row["coll_name"], row["in_nelems"], row["out_nelems"], row["dtype"],
                row["group_size"], row["pg_name"], row["pg_desc"], row["pg_ranks"]) == (
            a["Collective name"], a["In msg nelems"], a["Out msg nelems"], a["dtype"],
            a["Group size"], a["Process Group Name"], a["Process Group Description"],
            a["Process Group Ranks"])
        assert row["bytes"] == a["In msg nelems"] * {"Float": 4, "Long": 8}[a["dtype"]]
        assert row["kind"] == {"allreduce": "AllReduce", "broadcast": "Broadcast"}[a["Collective name"]]
        assert row["issue_op"] == {"allreduce": "nccl:all_reduce",
                                   "broadcast": "nccl:broadcast"}[a["Collective name"]]
