"""Collectives across ranks computed straight from the raw JSON of a job's ranks (issue 26),
independently of traceaug: the k-th NCCL kernel of a group on each rank is the same
collective; each group's clocks aligned on its lowest rank by the median difference of ends;
per collective its straggler, skew, every rank's wait, and the transfer."""

from __future__ import annotations

import statistics
from pathlib import Path

from rawjson import load_raw, ns


def is_nccl(e: dict) -> bool:
    return e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"].startswith("nccl")


def raw_ranks(d: Path) -> dict[int, list[dict]]:
    """Each rank's events (the rank from ``distributedInfo``)."""
    out = {}
    for f in sorted(d.iterdir()):
        raw = load_raw(f)
        out[raw["distributedInfo"]["rank"]] = raw["traceEvents"]
    return out


def raw_kernels(events: list[dict]) -> list[tuple[int, int, dict]]:
    """(start ns, end ns, event) of the NCCL kernels in GPU start order."""
    ks = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e) for e in events if is_nccl(e)]
    return sorted(ks, key=lambda k: k[:2])


def oracle(events: dict[int, list[dict]], groups: dict[str, list[int]] | None = None,
           upto: dict[str, int] | None = None, align: bool = True) -> dict[tuple[str, int], dict]:
    """Per (group, position): straggler, skew, waits, transfer; the k-th NCCL kernel of a group
    on each rank is the same collective; each group's ranks aligned on its lowest rank by the
    median difference of ends."""
    groups = groups or {"all": sorted(events)}
    out = {}
    for g, ranks in groups.items():
        ks = {r: raw_kernels(events[r]) for r in ranks}
        n = min(len(k) for k in ks.values()) if upto is None or g not in upto else upto[g]
        ref = ranks[0]
        off = {r: (round(statistics.median(ks[r][p][1] - ks[ref][p][1] for p in range(n)))
                   if align else 0) for r in ranks}  # whole ns: epoch ns do not fit a float
        for p in range(n):
            arr = {r: ks[r][p][0] - off[r] for r in ranks}
            end = {r: ks[r][p][1] - off[r] for r in ranks}
            last = max(arr.values())
            straggler = min(r for r in ranks if arr[r] == last)
            wait = {r: last - arr[r] for r in ranks}
            ns_of = {"skew_ns": last - min(arr.values()), "wait_ns": wait,
                     "mean_wait_ns": statistics.mean(wait[r] for r in ranks if r != straggler),
                     "max_wait_ns": max(wait.values()),
                     "transfer_ns": statistics.median(end[r] - last for r in ranks)}
            out[(g, p)] = {
                "straggler": straggler, "arrival_ns": last, **ns_of,  # and in µs, as shown
                **{k[:-3] + "_us": ({r: w / 1e3 for r, w in v.items()} if isinstance(v, dict)
                                    else v / 1e3) for k, v in ns_of.items()},
                "offset_us": {r: o / 1e3 for r, o in off.items()}}
    return out
