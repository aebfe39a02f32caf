"""A small Kineto trace whose kernel, gap, launch and breakdown answers are known by
construction (worked out by hand in ``ANSWERS`` from the schedule below, never through
traceaug). Times are µs from the step start; every timestamp is written as epoch µs with
``.123`` (ns resolution), durations are whole µs.

Step 1 (CPU [0, 100)) has a GPU-side ProfilerStep#1 annotation [10, 90) holding 3 of the 4
ops it launched, so its GPU window starts there; step 2 (CPU [100, 200)) has none, so its
GPU work starts at the first op it launched (140) and, as the last step, ends at the last
one's end (180). The windows tile the GPU time: step 1's runs to step 2's start, [10, 140)
(its gemm at [112, 130) inside). Two kernels named ``relu`` have no launching call
(correlation 999 / 998): one starts in step 1's GPU window, the other in no window.
"""

from __future__ import annotations

import json
from pathlib import Path

BASE_US = 1712198313370000
GEMM, NCCL, RELU = "ampere_sgemm_128x64_tn", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "relu_kernel"
MEMCPY, MEMSET = "Memcpy HtoD (Pinned -> Device)", "Memset (Device)"

# (correlation, launch name, launch ts, launch dur, op category, op name, stream, op ts, op dur)
LAUNCHED = [
    (1, "cudaLaunchKernel", 5, 4, "kernel", GEMM, 7, 20, 20),
    (2, "cudaLaunchKernel", 12, 3, "kernel", NCCL, 20, 30, 40),
    (3, "cudaMemcpyAsync", 16, 2, "gpu_memcpy", MEMCPY, 7, 45, 5),
    (4, "cudaLaunchKernel", 50, 60, "kernel", GEMM, 7, 112, 18),
    (5, "cudaLaunchKernel", 131, 5, "kernel", GEMM, 7, 140, 20),
    (6, "cudaLaunchKernel", 137, 5, "kernel", NCCL, 20, 150, 30),
    (7, "cudaMemsetAsync", 143, 2, "gpu_memset", MEMSET, 7, 170, 2),
]
UNLAUNCHED = [(999, "kernel", RELU, 7, 60, 5), (998, "kernel", RELU, 7, 185, 5)]

US = 1000
ANSWERS = {
    "windows": {1: (10 * US, 140 * US, "gpu_annotation"), 2: (140 * US, 180 * US, "launches")},
    "op_steps": {GEMM: [1, 1, 2], NCCL: [1, 2], MEMCPY: [1], MEMSET: [2], RELU: [1, -1]},
    # per step row: busy, idle, computation, communication, memory, comp_only, comm_only,
    # mem_only, comp_comm, comp_mem, comm_mem, comp_comm_mem (µs), comm_overlap_pct
    "temporal": {
        1: (68, 62, 43, 40, 5, 28, 20, 0, 15, 0, 5, 0, 37.5),
        2: (40, 0, 20, 30, 2, 10, 18, 0, 10, 0, 2, 0, 100 * 10 / 30),
        None: (108, 62, 63, 70, 7, None, None, None, None, None, None, None, None),
    },
    # name -> (count, total µs, min, max) over the whole trace
    "kernels": {GEMM: (3, 58, 18, 20), NCCL: (2, 70, 30, 40), MEMCPY: (1, 5, 5, 5),
                MEMSET: (1, 2, 2, 2), RELU: (2, 10, 5, 5)},
    "kernels_step1": {GEMM: (2, 38), NCCL: (1, 40), MEMCPY: (1, 5), RELU: (1, 5)},
    # stream -> gaps (µs) in start order
    "stream_gaps": {7: [5, 10, 47, 10, 10, 13], 20: [80]},
    "device_gaps": [42, 10, 5],
    "transitions": {(GEMM, MEMCPY): [5], (MEMCPY, RELU): [10], (RELU, GEMM): [47],
                    (GEMM, GEMM): [10], (GEMM, MEMSET): [10], (MEMSET, RELU): [13],
                    (NCCL, NCCL): [80]},
    # (stream, category) -> (count, idle µs), threshold 30 µs
    "idle": {(7, "kernel_wait"): (4, 38), (7, "host_wait"): (1, 10), (7, "other"): (1, 47),
             (20, "host_wait"): (1, 80)},
    # correlation -> (cpu dur, gpu dur, launch delay) µs
    "launches": {1: (4, 20, 11), 2: (3, 40, 15), 3: (2, 5, 27), 4: (60, 18, 2), 5: (5, 20, 4),
                 6: (5, 30, 8), 7: (2, 2, 25)},
    "short": 1, "runtime_outliers": 1, "delay_outliers_20us": 2, "unlaunched": 2,
}


def _ts(us: int) -> str:
    return f"{BASE_US + us}.123"


def write(path: Path, mtia: bool = False) -> Path:
    """Write the trace (``mtia``: MTIA categories, every GPU op a ``mtia_ccp_events``)."""
    runtime = "mtia_runtime" if mtia else "cuda_runtime"
    ev = [
        '{"ph":"M","name":"process_name","pid":1000,"tid":0,"args":{"name":"python"}}',
        '{"ph":"M","name":"process_name","pid":0,"tid":0,"args":{"name":"GPU 0"}}',
    ]
    for n, lo in ((1, 0), (2, 100)):
        ev.append(f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{n}","pid":1000,'
                  f'"tid":1000,"ts":{_ts(lo)},"dur":100.000,"args":{{}}}}')
    ev.append(f'{{"ph":"X","cat":"gpu_user_annotation","name":"ProfilerStep#1","pid":0,"tid":1,'
              f'"ts":{_ts(10)},"dur":80.000,"args":{{"External id":1}}}}')

    def op(corr, cat, name, stream, ts, dur):
        cat = "mtia_ccp_events" if mtia else cat
        return (f'{{"ph":"X","cat":"{cat}","name":{json.dumps(name)},"pid":0,"tid":{stream},'
                f'"ts":{_ts(ts)},"dur":{dur}.000,"args":{{"device":0,"stream":{stream},'
                f'"correlation":{corr}}}}}')

    for corr, lname, lts, ldur, cat, name, stream, ts, dur in LAUNCHED:
        lname = "runFunction - job_prep_and_submit_for_execution" if mtia else lname
        ev.append(f'{{"ph":"X","cat":"{runtime}","name":"{lname}","pid":1000,"tid":1000,'
                  f'"ts":{_ts(lts)},"dur":{ldur}.000,"args":{{"correlation":{corr}}}}}')
        ev.append(op(corr, cat, name, stream, ts, dur))
    for corr, cat, name, stream, ts, dur in UNLAUNCHED:
        ev.append(op(corr, cat, name, stream, ts, dur))
    text = ('{"schemaVersion":1,"distributedInfo":{"rank":0,"world_size":1},\n"traceEvents":[\n'
            + ",\n".join(ev) + "\n]}\n")
    path.write_text(text)
    return path
