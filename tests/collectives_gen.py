"""Jobs of N ranks built from the real 8-rank DLRM job (rank r is real rank r % 8, its
``distributedInfo`` saying r of N), with stragglers planted so the answer is known: a CPU-side
delay (a data-loader op before a collective), a GPU-side one (a compute kernel running longer),
a shifted clock; for the collectives tests and ``bench/collectives_vs_hta.py``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from collectives_raw import is_nccl

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


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


def write_job(d: Path, job: dict[int, dict]) -> Path:
    """Each rank as ``rank-{r}.json`` in the new directory ``d`` (the name says the rank where
    ``distributedInfo`` comes after the events, beyond what a job reads to tell ranks apart)."""
    d.mkdir(parents=True)
    for r, raw in job.items():
        (d / f"rank-{r}.json").write_text(json.dumps(raw))
    return d


def kernels(raw: dict) -> list[dict]:
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
    for r, raw in job.items():
        if r == rank:
            _delay(raw, at, d_us, gpu=False)
            _delay(raw, k["ts"], d_us, gpu=True, stretch=False)
        else:
            kr = kernels(raw)[c]
            _delay(raw, kr["ts"] + kr["dur"], d_us)
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
    for r, raw in job.items():
        if r == rank:
            _delay(raw, victim["ts"] + victim["dur"], d_us, gpu=True)
        else:
            kr = kernels(raw)[c]
            _delay(raw, kr["ts"] + kr["dur"], d_us)
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
