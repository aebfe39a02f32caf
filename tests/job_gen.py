"""Generated jobs whose critical path and what-if answers are known by hand.

Each rank, each step: a data-loader op (``LOADER_US``, the straggler's ``delay_us`` longer),
a matmul launching a gemm, a ``record_param_comms`` launching an NCCL all_reduce on the
gemm's stream (it arrives ``ARRIVE_US`` after the step's start plus the loader's excess, and ends
``TRANSFER_US`` after the last rank's arrival on every rank), a stream sync waiting for it,
an add launching a small kernel, the step's end ``TAIL_US`` after the all_reduce's end. One
clock for every rank. So a step lasts ``STEP_US + delay_us``, ``STEP_US`` without the
straggler, and the path runs through the straggler's loader.
"""

from __future__ import annotations

import json
from pathlib import Path

BASE_US = 1_712_198_313_370_000
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
LOADER_US = 100
ARRIVE_US = 205  # the all_reduce's start after the step's start, for a rank on time
TRANSFER_US = 100
TAIL_US = 60
STEP_US = ARRIVE_US + TRANSFER_US + TAIL_US
GAP_US = 100  # between steps


def _x(cat, name, ts, dur, tid=1000, pid=1000, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def job(n: int, straggler: int, delay_us: int, steps: int = 1, where: str = "cpu"
        ) -> dict[int, dict]:
    """{rank: trace} of an ``n``-rank job where ``straggler``'s loader takes ``delay_us``
    more at every step (``where="gpu"``: its gemm instead, the all_reduce queued behind it
    on its stream, its CPU on time)."""
    out = {}
    for r in range(n):
        evs = [{"ph": "M", "name": "process_name", "pid": 1000, "tid": 0,
                "args": {"name": "python"}},
               {"ph": "M", "name": "thread_name", "pid": 1000, "tid": 1000,
                "args": {"name": "main"}}]
        t0 = BASE_US
        corr = 1
        for k in range(steps):
            late = delay_us if r == straggler else 0
            mine = late if where == "cpu" else 0
            gemm = 20 if where == "cpu" or r != straggler else 55 + late
            end = t0 + ARRIVE_US + delay_us + TRANSFER_US  # every rank's all_reduce end
            p = t0 + 10 + LOADER_US + mine + 10
            q = p + 60
            evs += [
                _x("user_annotation", f"ProfilerStep#{k}", t0, end + TAIL_US - t0),
                _x("cpu_op", LOADER, t0 + 10, LOADER_US + mine),
                _x("cpu_op", "aten::mm", p, 50),
                _x("cuda_runtime", "cudaLaunchKernel", p + 10, 10, correlation=corr),
                _x("kernel", "gemm_kernel", p + 30, gemm, tid=7, pid=0, correlation=corr,
                   device=0, stream=7),
                _x("cpu_op", "record_param_comms", q, 30),
                _x("cuda_runtime", "cudaLaunchKernel", q + 5, 10, correlation=corr + 1),
                _x("kernel", NCCL, q + 25 + late - mine, end - (q + 25 + late - mine), tid=7,
                   pid=0, correlation=corr + 1, device=0, stream=7),
                _x("cuda_runtime", "cudaStreamSynchronize", q + 40, end + 5 - (q + 40),
                   correlation=corr + 2),
                _x("cpu_op", "aten::add", end + 10, 20),
                _x("cuda_runtime", "cudaLaunchKernel", end + 15, 10, correlation=corr + 3),
                _x("kernel", "add_kernel", end + 35, 10, tid=7, pid=0, correlation=corr + 3,
                   device=0, stream=7),
            ]
            corr += 4
            t0 = end + TAIL_US + GAP_US
        out[r] = {"schemaVersion": 1, "distributedInfo": {"rank": r, "world_size": n},
                  "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
                  "traceEvents": evs}
    return out


def write(d: Path, traces: dict[int, dict]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for r, t in traces.items():
        (d / f"rank{r}.json").write_text(json.dumps(t))
    return d
