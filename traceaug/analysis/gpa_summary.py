"""The GPU Performance Analyzer's per-class iteration summary, its rules exact: per-iteration figures divide
by ``iters × gpus`` (times exactly, instances floored per kernel row, as it does); sums are integer ns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import TraceaugError
from .substrings import Substrings

OTHERS = "others"
NCCL = "nccl"
# The Analyzer's display names for the newer nsys spellings of copy kinds.
MEM_DISPLAY = {
    "[CUDA memcpy Device-to-Device]": "[CUDA memcpy D2D]",
    "[CUDA memcpy Device-to-Host]": "[CUDA memcpy D2H]",
    "[CUDA memcpy Host-to-Device]": "[CUDA memcpy H2D]",
    "[CUDA memcpy Host-to-Host]": "[CUDA memcpy H2H]",
}
MAX_PER = 2**62  # iterations × GPUs: a divisor that int64 holds


@dataclass
class SummaryInput:
    """What one summary reads: kernel and memory-op sums, iteration ranges, a timeline."""

    title: str
    kernels: dict[str, np.ndarray]  # name, total (ns), count: one row per kernel name
    mems: dict[str, np.ndarray] | None = None  # name (operation), total (ns), count
    ranges: dict[str, np.ndarray] | None = None  # name, duration (ns): NVTX ranges (projected)
    windows: dict[str, np.ndarray] | None = None  # start, end (ns) of each iteration range on the GPU
    compute: dict[str, np.ndarray] | None = None  # start, end (ns) of every non-NCCL kernel
    notes: list[str] = field(default_factory=list)


# traceaug's map when none is given (the Analyzer's default puts every kernel in ``others``): class -> name
# substrings, the first match in this order wins (``fmha_..._gemm`` is attention, ``splitKreduce`` gemm).
DEFAULT_CLASSES = (
    ("attention", ("fmha", "flash", "attention", "attn", "sdpa")),
    ("gemm", ("gemm", "matmul", "cublas", "cutlass", "xmma", "cijk_", "conv", "wgrad", "dgrad", "triton_mm",
              "triton_tem", "splitkreduce")),
    ("norm", ("norm", "softmax", "ln_fwd", "ln_bwd", "bn_fw", "bn_bw", "welford")),
    ("communication", ("allreduce", "all_reduce", "allgather", "all_gather", "reducescatter",
                       "reduce_scatter", "alltoall", "all_to_all", "sendrecv", "rccl", "nvshmem")),
    ("reduction", ("reduce", "reduction", "scan", "argmax", "argmin", "topk", "triton_red",
                   "triton_per")),
    ("memory", ("copy", "memcpy", "memset", "fill", "transpose", "concat", "catarray", "slice",
                "gather", "scatter", "index", "embedding", "broadcast", "permute", "pad")),
    ("elementwise", ("elementwise", "pointwise", "triton_poi", "loop_", "relu", "gelu", "silu",
                     "sigmoid", "tanh", "dropout", "cast", "add", "mul", "div", "multi_tensor",
                     "adam", "sgd")),
)
DEFAULT_MAP = {key: cls for cls, keys in DEFAULT_CLASSES for key in keys}
DEFAULT_NOTE = ("no kernel_to_class_map given: kernels classed by traceaug's default map ("
                + ", ".join(cls for cls, _ in DEFAULT_CLASSES) + ", the rest others)")


def class_map(mapping: object, source: str) -> dict[str, str]:
    """The Analyzer's map, lower-cased and checked: an object of strings, no key empty or inside
    another, no class named ``others`` (one pass over the keys: ``Substrings``)."""
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in mapping.items()):
        raise TraceaugError(f"{source}: kernel_to_class_map must be an object of "
                            '"name substring": "class" strings')
    out = {k.lower(): v.lower() for k, v in mapping.items()}
    if OTHERS in out.values() or "other" in out.values():
        raise TraceaugError(f"{source}: a class may not be named {OTHERS!r} (it is the rest)")
    if "" in out:
        raise TraceaugError(f"{source}: an empty key would match every kernel")
    keys = list(out)
    inside = Substrings(keys)
    for j, b in enumerate(keys):
        i = next((i for i in inside.found(b) if i != j), None)
        if i is not None:
            a, b = (keys[i], b) if i < j else (b, keys[i])
            raise TraceaugError(f"{source}: keys {a!r} and {b!r} overlap (one contains the other)")
    return out


def classify(names: np.ndarray, mapping: dict[str, str]) -> np.ndarray:
    """Class of each kernel name (``nccl``, the class of the first key in map order that the
    lower-cased name contains, or ``others``): each distinct name scanned once."""
    keys, classes = list(mapping), list(mapping.values())
    inside = Substrings(keys)
    distinct, back = np.unique(np.asarray(names).astype(str), return_inverse=True)
    found = []
    for name in distinct.tolist():
        lower = name.lower()
        first = min(inside.found(lower), default=None)
        found.append(NCCL if NCCL in lower else OTHERS if first is None else classes[first])
    return np.array(found, dtype=object)[back.reshape(-1)] if len(found) else np.full(0, OTHERS, object)


def _table(labels: np.ndarray, order: list[str], total: np.ndarray, count: np.ndarray,
           per: int) -> dict[str, np.ndarray]:
    """Per label (in ``order``): total ns and instances, in all and per iteration."""
    idx = {label: i for i, label in enumerate(order)}
    pos = np.array([idx[label] for label in labels], dtype=np.int64)
    n = len(order)
    total_ns = _sum(pos, total, n)
    return {
        "name": np.array(order, dtype=object),
        "total_ns": total_ns,
        "instances": _sum(pos, count, n),
        "per_iter_ns": total_ns / per,
        "per_iter_instances": _sum(pos, count // per, n),  # floored per row, as the Analyzer does
    }


def _sum(pos: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, pos, values.astype(np.int64))
    return out


def _share(part: np.ndarray, whole: float) -> np.ndarray:
    return np.asarray(part, dtype=np.float64) / whole * 100 if whole else np.zeros(len(part))


def collective(name: str) -> str:
    """The Analyzer's NCCL collective: the second ``_``-separated field of the kernel name."""
    parts = name.split("_")
    return parts[1] if len(parts) > 1 else name


def summarize(data: SummaryInput, mapping: dict[str, str], iters: int, gpus: int,
              tag: str | None) -> dict:
    """Every figure of the report, times in ns (totals exact int, per iteration / range means float);
    tables have columns name, per_iter_ns, per_iter_instances, per_iter_pct, total_ns, instances,
    total_pct (the kernel classes; NCCL and memory ops have no shares)."""
    if iters < 1 or gpus < 1:
        raise TraceaugError("--iters and --gpus must be at least 1")
    if iters * gpus > MAX_PER:
        raise TraceaugError(f"--iters × --gpus is {iters * gpus:,}, more than 2^62")
    per = iters * gpus
    k = data.kernels
    classes = classify(k["name"], mapping)
    order = [OTHERS, *dict.fromkeys(mapping.values())]
    compute = classes != NCCL
    table = _table(classes[compute], order, k["total"][compute], k["count"][compute], per)
    per_iter_ns = int(table["total_ns"].sum()) / per
    total_ns = int(table["total_ns"].sum())
    out: dict = {"title": data.title, "iters": iters, "gpus": gpus, "notes": list(data.notes)}
    out["kernel"] = {
        "per_iter_ns": per_iter_ns,
        "per_iter_instances": int(table["per_iter_instances"].sum()),
        "total_ns": total_ns,
        "instances": int(table["instances"].sum()),
    }
    out["classes"] = {
        "name": table["name"], "per_iter_ns": table["per_iter_ns"],
        "per_iter_instances": table["per_iter_instances"],
        "per_iter_pct": _share(table["per_iter_ns"], per_iter_ns),
        "total_ns": table["total_ns"], "instances": table["instances"],
        "total_pct": _share(table["total_ns"], total_ns),
    }
    nccl_names = k["name"][~compute]
    colls = np.array([collective(n) for n in nccl_names], dtype=object)
    nccl = _table(colls, list(dict.fromkeys(colls)), k["total"][~compute], k["count"][~compute], per)
    out["nccl_total"] = {
        "per_iter_ns": float(nccl["per_iter_ns"].sum()),
        "per_iter_instances": int(nccl["per_iter_instances"].sum()),
        "total_ns": int(nccl["total_ns"].sum()),
        "instances": int(nccl["instances"].sum()),
    }
    out["nccl"] = _plain(nccl)
    if data.mems is not None:
        names = np.array([MEM_DISPLAY.get(n, n) for n in data.mems["name"]], dtype=object)
        out["mem"] = _plain(_table(names, list(dict.fromkeys(names)), data.mems["total"],
                                   data.mems["count"], per))
    if data.ranges is not None:
        out["nvtx"] = _ranges(data, tag, iters, out["kernel"])
    if data.windows is not None and data.compute is not None and len(data.windows["start"]):
        out["measured"] = measure_non_hidden(data.windows, data.compute)
    out["notes"] = list(data.notes)
    return out


def _plain(t: dict) -> dict:
    return {"name": t["name"], "per_iter_ns": t["per_iter_ns"],
            "per_iter_instances": t["per_iter_instances"], "total_ns": t["total_ns"],
            "instances": t["instances"]}


def _ranges(data: SummaryInput, tag: str | None, iters: int, kernel: dict) -> dict | None:
    """NVTX iteration ranges (named exactly ``tag``) and the Analyzer's non-hidden NCCL / mem ops / bubble
    estimate: the mean range minus the per-iteration non-NCCL kernel time."""
    if tag is None:
        data.notes.append("no iteration tag (--iter-tag / nvtx_tag_of_iter): NVTX figures left out")
        return None
    r = data.ranges
    chosen = (r["name"] == tag) & (r["duration"] >= 0)
    n = int(chosen.sum())
    if n == 0:
        data.notes.append(f"no NVTX range named {tag!r}: NVTX figures left out")
        return None
    if n != iters:
        data.notes.append(f"{n} NVTX ranges named {tag!r}, but {iters} iterations given")
    total_ns = int(r["duration"][chosen].sum())
    mean_ns = total_ns / n
    est = mean_ns - kernel["per_iter_ns"]
    est_total = total_ns - kernel["total_ns"]
    return {"count": n, "mean_ns": mean_ns, "total_ns": total_ns,  # shares of no time: 0, as _share
            "non_hidden_per_range_ns": est, "non_hidden_per_range_pct": _share([est], mean_ns)[0],
            "non_hidden_total_ns": est_total,
            "non_hidden_total_pct": _share([est_total], total_ns)[0]}


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the same time as [start, end)."""
    if len(start) == 0:
        return start.astype(np.int64), end.astype(np.int64)
    order = np.argsort(start, kind="stable")
    s, e = start[order].astype(np.int64), end[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    last = np.append(np.flatnonzero(new)[1:] - 1, len(s) - 1)
    return s[new], reach[last]


def covered_before(s: np.ndarray, e: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Time covered by the disjoint sorted intervals (s, e) before each point x."""
    lengths = e - s
    cum = np.concatenate(([0], np.cumsum(lengths)))
    i = np.searchsorted(s, x, side="right")  # intervals starting at or before x
    prev = np.maximum(i - 1, 0)
    partial = np.where(i > 0, np.clip(x - s[prev], 0, lengths[prev] if len(s) else 0), 0)
    return cum[np.maximum(i - 1, 0)] * (i > 0) + partial


def measure_non_hidden(windows: dict[str, np.ndarray], compute: dict[str, np.ndarray]) -> dict:
    """Per iteration window: its length minus the union of compute kernels inside it. Columns
    of ``per_range``: start, end, window_ns, compute_ns, non_hidden_ns."""
    s, e = union(compute["start"], compute["end"])
    ws, we = windows["start"].astype(np.int64), windows["end"].astype(np.int64)
    if len(s):
        busy = covered_before(s, e, we) - covered_before(s, e, ws)
    else:
        busy = np.zeros(len(ws), dtype=np.int64)
    length = we - ws
    hidden_not = length - busy
    total = int(length.sum())
    return {
        "count": len(ws), "mean_ns": total / len(ws),
        "non_hidden_per_range_ns": int(hidden_not.sum()) / len(ws),
        "non_hidden_pct": int(hidden_not.sum()) / total * 100 if total else 0.0,
        "non_hidden_total_ns": int(hidden_not.sum()),
        "per_range": {"start": ws, "end": we, "window_ns": length, "compute_ns": busy,
                      "non_hidden_ns": hidden_not},
    }


def _matching(names: np.ndarray, tag: str) -> np.ndarray:
    """Names equal to ``tag`` (or matching it as a glob when it holds ``*``)."""
    if "*" in tag:
        import fnmatch

        return np.array([fnmatch.fnmatchcase(str(n), tag) for n in names], dtype=bool)
    return names == tag


def mem_label(kind: str, name: str) -> str:
    """nsys's memory-operation name for a Kineto copy / set: ``[CUDA memcpy HtoD]``."""
    if kind == "memset":
        return "[CUDA memset]"
    words = name.split()
    return f"[CUDA memcpy {words[1] if len(words) > 1 else 'Unknown'}]"


def from_trace(trace, title: str, tag: str | None) -> SummaryInput:
    """The summary's tables from a loaded trace (Kineto or converted nsys): kernel and memory-op sums, the
    ``tag`` ranges projected onto the GPU (``project``), the compute (non-NCCL) kernels' intervals."""
    trace.include("traceaug.base")
    k = trace.columns("SELECT name, SUM(dur) AS total, COUNT(*) AS count FROM traceaug_gpu_op "
                      "WHERE kind = 'kernel' GROUP BY name ORDER BY total DESC, name")
    kernels = {"name": k["name"].astype(object), "total": k["total"].astype(np.int64),
               "count": k["count"].astype(np.int64)}
    m = trace.columns("SELECT kind, name, SUM(dur) AS total, COUNT(*) AS count FROM traceaug_gpu_op "
                      "WHERE kind IN ('memcpy', 'memset') GROUP BY kind, name")
    labels = np.array([mem_label(a, b) for a, b in zip(m["kind"].tolist(), m["name"].tolist())],
                      dtype=object)
    uniq, inv = np.unique(labels.astype(str), return_inverse=True)
    tot, cnt = _sum(inv, m["total"], len(uniq)), _sum(inv, m["count"], len(uniq))
    order = np.argsort(-tot, kind="stable")
    mems = {"name": np.array(uniq, dtype=object)[order], "total": tot[order], "count": cnt[order]}
    c = trace.columns("SELECT ts, ts + dur AS e FROM traceaug_gpu_op "
                      "WHERE kind = 'kernel' AND name NOT LIKE '%nccl%'")
    compute = {"start": c["ts"].astype(np.int64), "end": c["e"].astype(np.int64)}
    data = SummaryInput(title, kernels, mems, compute=compute)
    tag = tag or "ProfilerStep#*"
    r = trace.columns("SELECT ts, dur, name FROM slice WHERE category IN "
                      "('user_annotation', 'cpu_op', 'Operator') AND dur >= 0 ORDER BY ts")
    chosen = _matching(r["name"].astype(object), tag) if len(r["name"]) else np.zeros(0, bool)
    if not chosen.any():
        data.notes.append(f"no range named {tag!r} in the trace: NVTX figures left out")
        return data
    starts, ends = r["ts"][chosen].astype(np.int64), (r["ts"] + r["dur"])[chosen].astype(np.int64)
    ws, we = project(trace, starts, ends)
    data.windows = {"start": ws, "end": we}
    data.ranges = {"name": np.full(len(ws), tag, dtype=object), "duration": we - ws}
    return data


def project(trace, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each CPU range [start, end) projected onto the GPU: from the first start to the last end
    of the GPU ops whose launch call began inside it (the range itself when it launched none)."""
    trace.include("traceaug.gpu")  # the launch join every analysis reads
    ops = trace.columns("SELECT ts, ts + dur AS e, launch_ts FROM traceaug_gpu_op_launch "
                        "WHERE launch_ts IS NOT NULL")
    launch = ops["launch_ts"].astype(np.int64)
    i = np.searchsorted(starts, launch, side="right") - 1
    inside = (i >= 0) & (launch < ends[np.maximum(i, 0)])
    first = np.full(len(starts), np.iinfo(np.int64).max)
    last = np.full(len(starts), np.iinfo(np.int64).min)
    np.minimum.at(first, i[inside], ops["ts"].astype(np.int64)[inside])
    np.maximum.at(last, i[inside], ops["e"].astype(np.int64)[inside])
    hit = last > np.iinfo(np.int64).min
    return np.where(hit, first, starts), np.where(hit, last, ends)
