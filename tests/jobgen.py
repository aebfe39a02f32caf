"""Generated jobs of N ranks with planted stragglers, so the answers are known; for the
collectives, job-path, whatif and ``diff --explain`` tests and ``bench/collectives_vs_hta.py``.

Two bases, one way of planting (``_delay``: events from a point on later, the events spanning
it longer):
- ``copy_job``: the real 8-rank DLRM job (rank r is real rank r % 8, its ``distributedInfo``
  saying r of N), planted with ``plant_cpu`` (a new data-loader op before a collective),
  ``plant_gpu`` (a compute kernel running longer), ``shift_clock``, ``split_groups``.
- ``job``: a job built from nothing whose critical path and what-if answers are computable by
  hand. Each rank, each step: a data-loader op (``LOADER_US``, the straggler's ``delay_us``
  longer), a matmul launching a gemm, a ``record_param_comms`` launching an NCCL all_reduce on
  the gemm's stream (it arrives ``ARRIVE_US`` after the step's start plus the loader's excess,
  and ends ``TRANSFER_US`` after the last rank's arrival on every rank), a stream sync waiting
  for it, an add launching a small kernel, the step's end ``TAIL_US`` after the all_reduce's
  end. One clock for every rank. So a step lasts ``STEP_US + delay_us``, ``STEP_US`` without
  the straggler, and the path runs through the straggler's loader.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from collectives_raw import is_nccl

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")

BASE_US = 1_712_198_313_370_000
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
LOADER_US = 100
ARRIVE_US = 205  # the all_reduce's start after the step's start, for a rank on time
TRANSFER_US = 100
TAIL_US = 60
STEP_US = ARRIVE_US + TRANSFER_US + TAIL_US
GAP_US = 100  # between steps


def copy_job(base: Path, ranks: int = 8) -> dict[int, dict]:
    """``ranks`` ranks, rank r the raw JSON of rank r % n of the real job of n ranks ``base``
    (a directory of ranks, or one rank's file)."""
    texts = {}
    for f in sorted(base.iterdir()) if base.is_dir() else [base]:
        with gzip.open(f, "rt") as fh:
            text = fh.read()
        texts[json.loads(text)["distributedInfo"]["rank"]] = text
    out = {}
    for r in range(ranks):
        raw = json.loads(texts[sorted(texts)[r % len(texts)]])
        raw["distributedInfo"].update(rank=r, world_size=ranks)
        out[r] = raw
    return out


def write(d: Path, job: dict[int, dict]) -> Path:
    """Each rank as ``rank-{r}.json`` in the directory ``d`` (the name says the rank where
    ``distributedInfo`` comes after the events, beyond what a job reads to tell ranks apart)."""
    d.mkdir(parents=True, exist_ok=True)
    for r, raw in job.items():
        (d / f"rank-{r}.json").write_text(json.dumps(raw))
    return d


def kernels(raw: dict) -> list[dict]:
    """A rank's NCCL kernels in time order."""
    return sorted((e for e in raw["traceEvents"] if is_nccl(e)), key=lambda e: e["ts"])


def _delay(raw: dict, at: int, by: int, gpu: bool | None = None, stretch: bool = True) -> None:
    """Every event from ``at`` on (``gpu``: only the GPU's / only the others) ``by`` µs later;
    ``stretch``: events spanning ``at`` that much longer."""
    for e in raw["traceEvents"]:
        if e.get("ph") == "M" or "ts" not in e:
            continue
        if gpu is not None and (e.get("cat") in GPU_CATS) != gpu:
            continue
        if e["ts"] >= at:
            e["ts"] += by
        elif stretch and e.get("ph") == "X" and e["ts"] < at <= e["ts"] + e["dur"]:
            e["dur"] += by


def _others_wait(job: dict[int, dict], rank: int, c: int, d_us: int) -> None:
    """Every rank but ``rank`` waits ``d_us`` longer in collective ``c``: it ends that much
    later, and all after it."""
    for r, raw in job.items():
        if r != rank:
            kr = kernels(raw)[c]
            _delay(raw, kr["ts"] + kr["dur"], d_us)


def plant_cpu(job: dict[int, dict], rank: int, c: int, d_us: int) -> str:
    """Rank ``rank``'s CPU spends ``d_us`` more in a new data-loader op right before it issues
    collective ``c``: its CPU events from there on, and its GPU work from collective ``c`` on
    (what it launched since), ``d_us`` later (the GPU work already queued runs as it ran); the
    others' kernel c waits that much longer."""
    k = kernels(job[rank])[c]
    launch = next(e for e in job[rank]["traceEvents"] if e.get("cat") == "cuda_runtime"
                  and e["args"].get("correlation") == k["args"]["correlation"])
    issue = max((e for e in job[rank]["traceEvents"] if e.get("name") == "record_param_comms"
                 and e["tid"] == launch["tid"] and e["ts"] <= launch["ts"]), key=lambda e: e["ts"])
    at = issue["ts"]
    _delay(job[rank], at, d_us, gpu=False)
    _delay(job[rank], k["ts"], d_us, gpu=True, stretch=False)
    _others_wait(job, rank, c, d_us)
    name = "enumerate(DataLoader)#planted.__next__"
    job[rank]["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": name,
                                     "pid": launch["pid"], "tid": launch["tid"],
                                     "ts": at, "dur": d_us, "args": {}})
    return name


def plant_gpu(job: dict[int, dict], rank: int, c: int, d_us: int) -> str:
    """Rank ``rank``'s last compute kernel before collective ``c`` runs ``d_us`` longer (its
    GPU work after it starts later; its CPU issues on time)."""
    ks = kernels(job[rank])
    prev_end = ks[c - 1]["ts"] + ks[c - 1]["dur"]
    compute = [e for e in job[rank]["traceEvents"] if e.get("cat") == "kernel" and not is_nccl(e)
               and e["ts"] >= prev_end and e["ts"] + e["dur"] <= ks[c]["ts"]]
    victim = max(compute, key=lambda e: e["ts"] + e["dur"])
    _delay(job[rank], victim["ts"] + victim["dur"], d_us, gpu=True)
    _others_wait(job, rank, c, d_us)
    return victim["name"]


def shift_clock(raw: dict, by: int) -> None:
    """Every timestamp of a rank ``by`` µs later (its host's clock off by that)."""
    for e in raw["traceEvents"]:
        if e.get("ph") != "M" and "ts" in e:
            e["ts"] += by


def split_groups(job: dict[int, dict], groups: dict[str, list[int]]) -> None:
    """Each rank's NCCL kernels in the process group that lists it, as the args say."""
    for name, ranks in groups.items():
        for r in ranks:
            for k in kernels(job[r]):
                k["args"].update({"Process Group Name": name, "Process Group Ranks": str(ranks),
                                  "Group size": len(ranks)})


def _x(cat, name, ts, dur, tid=1000, pid=1000, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def _step(t0: int, corr: int, k: int, gemm_us: int) -> list[dict]:
    """Step ``k`` of a rank on time, from ``t0``, its gemm ``gemm_us`` long."""
    end = t0 + ARRIVE_US + TRANSFER_US  # the all_reduce's end
    p = t0 + 10 + LOADER_US + 10
    q = p + 60
    return [
        _x("user_annotation", f"ProfilerStep#{k}", t0, end + TAIL_US - t0),
        _x("cpu_op", LOADER, t0 + 10, LOADER_US),
        _x("cpu_op", "aten::mm", p, 50),
        _x("cuda_runtime", "cudaLaunchKernel", p + 10, 10, correlation=corr),
        _x("kernel", "gemm_kernel", p + 30, gemm_us, tid=7, pid=0, correlation=corr,
           device=0, stream=7),
        _x("cpu_op", "record_param_comms", q, 30),
        _x("cuda_runtime", "cudaLaunchKernel", q + 5, 10, correlation=corr + 1),
        _x("kernel", NCCL, q + 25, end - (q + 25), tid=7, pid=0, correlation=corr + 1,
           device=0, stream=7),
        _x("cuda_runtime", "cudaStreamSynchronize", q + 40, end + 5 - (q + 40),
           correlation=corr + 2),
        _x("cpu_op", "aten::add", end + 10, 20),
        _x("cuda_runtime", "cudaLaunchKernel", end + 15, 10, correlation=corr + 3),
        _x("kernel", "add_kernel", end + 35, 10, tid=7, pid=0, correlation=corr + 3,
           device=0, stream=7),
    ]


def job(n: int, straggler: int, delay_us: int, steps: int = 1, where: str = "cpu"
        ) -> dict[int, dict]:
    """{rank: trace} of an ``n``-rank job where ``straggler``'s loader takes ``delay_us``
    more at every step (``where="gpu"``: its gemm instead, the all_reduce queued right behind
    it on its stream, its CPU on time and waiting in the sync). Each step's delays move every
    later step whole on every rank, so step k starts ``k * delay_us`` later than on time."""
    out = {}
    for r in range(n):
        # the gpu straggler's gemm (from 150 µs into the step) runs up to the all_reduce, so
        # its excess delays it
        gemm_us = ARRIVE_US - 150 if where == "gpu" and r == straggler else 20
        evs = [{"ph": "M", "name": "process_name", "pid": 1000, "tid": 0,
                "args": {"name": "python"}},
               {"ph": "M", "name": "thread_name", "pid": 1000, "tid": 1000,
                "args": {"name": "main"}}]
        for k in range(steps):
            step = {"traceEvents": _step(BASE_US + k * (STEP_US + GAP_US + delay_us), 1 + 4 * k, k, gemm_us)}
            if r != straggler:  # waits for the straggler in the step's all_reduce
                ar = kernels(step)[0]
                _delay(step, ar["ts"] + ar["dur"], delay_us)
            elif where == "cpu":
                loader = next(e for e in step["traceEvents"] if e["name"] == LOADER)
                _delay(step, loader["ts"] + loader["dur"], delay_us)
            else:
                ar = kernels(step)[0]
                ar_end = ar["ts"] + ar["dur"]
                gemm = next(e for e in step["traceEvents"] if e["name"] == "gemm_kernel")
                _delay(step, gemm["ts"] + gemm["dur"], delay_us, gpu=True)
                _delay(step, ar_end, delay_us, gpu=False)  # its sync waits for the all_reduce
            evs += step["traceEvents"]
        out[r] = {"schemaVersion": 1, "distributedInfo": {"rank": r, "world_size": n},
                  "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
                  "traceEvents": evs}
    return out
