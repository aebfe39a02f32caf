"""Answers computed straight from a trace's raw JSON, independently of traceaug.

Timestamps are parsed as Decimal from their text, so nanoseconds are exact.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

KINDS = {
    "kernel": ("kernel", "Kernel"),
    "memcpy": ("gpu_memcpy", "Memcpy"),
    "memset": ("gpu_memset", "Memset"),
    "runtime": ("cuda_runtime", "Runtime", "cuda_driver"),
    "cpu_op": ("cpu_op", "Operator"),
}
_KIND_OF = {cat: kind for kind, cats in KINDS.items() for cat in cats}


def load_raw(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


def ns(value) -> int:
    """µs (int or Decimal) to exact ns; Kineto writes at most 3 decimals."""
    exact = Decimal(value) * 1000
    assert exact == exact.to_integral_value(), value
    return int(exact)


def events_by_kind(path: Path) -> dict[str, list[tuple[int, int]]]:
    """kind -> sorted (ts_ns, dur_ns) of every complete event of that kind."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for ev in load_raw(path)["traceEvents"]:
        if ev.get("ph") == "X" and ev.get("cat") in _KIND_OF:
            out[_KIND_OF[ev["cat"]]].append((ns(ev["ts"]), ns(ev["dur"])))
    return {k: sorted(v) for k, v in out.items()}
