"""Kineto-shaped traces generated for tests: a valid base and its events as dicts.

``events(steps)`` is a small training loop (ProfilerSteps, a CPU op, a launch, its kernel,
a memcpy with bytes) whose answers are known: ``steps`` steps, one kernel and one memcpy
each. ``write_large`` writes the same shape with many steps, fast, as text (signal tests).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

BASE_US = 1_712_198_313_370_000  # epoch µs
STEP_US = 1000
HEADER = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2},
          "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]}


METADATA = [
    {"ph": "M", "name": "process_name", "pid": 1000, "tid": 0, "args": {"name": "python"}},
    {"ph": "M", "name": "thread_name", "pid": 1000, "tid": 1000, "args": {"name": "main"}},
]


def step(i: int) -> list[dict]:
    """Step ``i``: ProfilerStep, aten::mm, cudaLaunchKernel -> kernel, cudaMemcpyAsync -> memcpy."""
    t = BASE_US + i * STEP_US
    c = 2 * i + 1
    return [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1000,
         "tid": 1000, "ts": t, "dur": 900},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1000, "tid": 1000,
         "ts": t + 10, "dur": 100, "args": {"External id": c}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000,
         "tid": 1000, "ts": t + 20, "dur": 10, "args": {"correlation": c}},
        {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7,
         "ts": t + 50, "dur": 200, "args": {"correlation": c, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1000,
         "tid": 1000, "ts": t + 300, "dur": 10, "args": {"correlation": c + 1}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
         "pid": 0, "tid": 7, "ts": t + 400, "dur": 100,
         "args": {"correlation": c + 1, "device": 0, "stream": 7, "bytes": 1_000_000}},
    ]


NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def collective(i: int, rank: int) -> list[dict]:
    """Step ``i``'s all-reduce on rank ``rank`` (of 2): its launch and NCCL kernel, which
    starts ``5 * rank`` µs late on that rank and ends with the other's."""
    t = BASE_US + i * STEP_US
    c = 1_000_000 + i
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000,
         "tid": 1000, "ts": t + 600, "dur": 10, "args": {"correlation": c}},
        {"ph": "X", "cat": "kernel", "name": NCCL_KERNEL, "pid": 0, "tid": 20,
         "ts": t + 650 + 5 * rank, "dur": 100 - 5 * rank,
         "args": {"correlation": c, "device": 0, "stream": 20, "Collective name": "allreduce",
                  "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
                  "Group size": 2}},
    ]


def rank_trace(rank: int, steps: int = 3) -> dict:
    """Rank ``rank`` of a 2-rank job: ``events(steps)`` and an all-reduce in each step."""
    evs = [*METADATA, *(e for i in range(steps) for e in (*step(i), *collective(i, rank)))]
    return trace(evs, distributedInfo={"rank": rank, "world_size": 2})


def events(steps: int = 3) -> list[dict]:
    """The metadata, then ``steps`` steps."""
    return [*METADATA, *(e for i in range(steps) for e in step(i))]


def trace(evs: list | None = None, **header) -> dict:
    """A whole trace object: the header, then ``traceEvents``."""
    return {**HEADER, **header, "traceEvents": events() if evs is None else evs}


def write(path: Path, obj) -> Path:
    """``obj`` as JSON (gzip when the name ends in .gz)."""
    data = json.dumps(obj).encode() if not isinstance(obj, bytes) else obj
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path


def write_large(path: Path, steps: int, rank: int = 0, collectives: bool = False) -> Path:
    """``steps`` steps of the same loop, about 1.1 KB of JSON per step, from rank ``rank``
    (``collectives``: each step with its all-reduce, ``collective``)."""
    header = {**HEADER, "distributedInfo": {"rank": rank, "world_size": max(rank + 1, 2)}}
    head = json.dumps({**header, "traceEvents": []})[:-2]
    with open(path, "w") as f:
        f.write(head + ",\n".join(json.dumps(e) for e in METADATA))
        for i in range(steps):
            evs = [*step(i), *(collective(i, rank) if collectives else ())]
            f.write(",\n" + ",\n".join(json.dumps(e) for e in evs))
        f.write("]}")
    return path


def unrecorded_stream_wait(gap_us: int = 2) -> dict:
    """Stream 20's ``consumer`` kernel waits on stream 7's ``producer`` (a
    ``cudaStreamWaitEvent`` the trace does not record: no ``cuda_sync`` event), µs from
    ``BASE_US``: launch 0..10 -> producer 15..315 on stream 7; launch 20..30 -> consumer from
    315 + ``gap_us`` for 100 on stream 20; ``cudaStreamSynchronize`` 40 until 3 after the
    consumer's end."""
    t = BASE_US
    consumer = 315 + gap_us
    cpu = {"ph": "X", "cat": "cuda_runtime", "pid": 1000, "tid": 1000}
    gpu = {"ph": "X", "cat": "kernel", "pid": 0}
    return trace([
        *METADATA,
        {**cpu, "name": "cudaLaunchKernel", "ts": t, "dur": 10, "args": {"correlation": 1}},
        {**gpu, "name": "producer", "tid": 7, "ts": t + 15, "dur": 300,
         "args": {"correlation": 1, "device": 0, "stream": 7}},
        {**cpu, "name": "cudaLaunchKernel", "ts": t + 20, "dur": 10, "args": {"correlation": 2}},
        {**gpu, "name": "consumer", "tid": 20, "ts": t + consumer, "dur": 100,
         "args": {"correlation": 2, "device": 0, "stream": 20}},
        {**cpu, "name": "cudaStreamSynchronize", "ts": t + 40, "dur": consumer + 100 + 3 - 40,
         "args": {"correlation": 3}},
    ])
