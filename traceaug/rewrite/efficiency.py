"""``traceaug efficiency`` OUT: per stream an "Efficiency" lane of the modelled ops (FLOPs, bytes, bound, % of
roofline in their args; the name says the % bucket, so the UI colours by it) and per device counter tracks of
the achieved TFLOP/s and TB/s."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import orjson

from ..analysis import efficiency as ef
from .events import counter_events, slice_events
from .pipeline import Rewriter

if TYPE_CHECKING:
    from ..trace import Trace

CATEGORY = "efficiency"
LANE = "Efficiency stream {stream}"  # a string tid: the v52 UI names the thread by it
TFLOPS, TBPS = "Achieved TFLOP/s", "Achieved TB/s"


def bucket(pct: float) -> str:
    """The % of roofline bucket a slice's name ends with (20-point steps; no peaks: none)."""
    if np.isnan(pct):
        return ""
    low = min(int(pct // 20) * 20, 100)
    return " [>=100%]" if low >= 100 else f" [{low}-{low + 20}%]"


def _lanes(rows: dict, roof: dict, pids: dict[int, int], base_ns: int) -> list[bytes]:
    on = rows["flops"] >= 0
    at = np.flatnonzero(on)
    at = at[np.lexsort((rows["ts"][at], rows["stream"][at], rows["device"][at]))]
    ts, end = rows["ts"][at].copy(), rows["end"][at]
    same = np.r_[False, (rows["device"][at][1:] == rows["device"][at][:-1])
                 & (rows["stream"][at][1:] == rows["stream"][at][:-1])]
    for i in np.flatnonzero(same):  # no partial overlap on a lane (the UI would drop the later slice)
        ts[i] = min(max(ts[i], end[i - 1]), end[i])
    pct = np.where(rows["gpu_ns"][at] > 0, roof["roofline_ns"][at] / np.maximum(rows["gpu_ns"][at], 1) * 100,
                   np.nan)
    args, names = [], []
    for j, i in enumerate(at.tolist()):
        a = {"family": rows["family"][i], "shapes": rows["shapes"][i], "dtypes": rows["dtypes"][i],
             "flops": int(rows["flops"][i]), "bytes": int(rows["bytes"][i]), "gpu_ns": int(rows["gpu_ns"][i])}
        if not np.isnan(pct[j]):
            a |= {"bound": roof["bound"][i], "roofline_pct": round(float(pct[j]), 2),
                  "roofline_ns": round(float(roof["roofline_ns"][i]), 1)}
        args.append(bytes(orjson.dumps(a)))  # a copy: each orjson result holds a ~4 KB buffer
        names.append(rows["name"][i] + bucket(pct[j]))
    pid = [pids.get(d, d) for d in rows["device"][at].tolist()]
    tid = [LANE.format(stream=s) for s in rows["stream"][at].tolist()]
    return slice_events(pid, tid, ts, end - ts, names, CATEGORY, args, base_ns)


def rates(rows: dict, pids: dict[int, int], what: str) -> dict[str, np.ndarray]:
    """Per device the summed rate (``what``: flops in TFLOP/s, bytes in TB/s) of the modelled ops running,
    each spread over its span: a step series ``pid, key, ts, value``."""
    on = (rows["flops"] >= 0) & (rows["end"] > rows["ts"])
    out: dict[str, list] = {"pid": [], "key": [], "ts": [], "value": []}
    for device in sorted(set(rows["device"][on].tolist())):
        at = on & (rows["device"] == device)
        rate = rows[what][at] / (rows["end"][at] - rows["ts"][at]) / 1e3  # per ns -> T per s
        t = np.r_[rows["ts"][at], rows["end"][at]]
        order = np.argsort(t, kind="stable")
        level = np.cumsum(np.r_[rate, -rate][order])
        t = t[order]
        last = np.r_[t[1:] != t[:-1], True]  # one value per time: after every change there
        value = np.round(np.where(np.abs(level[last]) < 1e-9, 0.0, level[last]), 4)
        out["ts"].append(t[last])
        out["value"].append(value)
        out["pid"] += [pids.get(device, device)] * int(last.sum())
        out["key"] += [device] * int(last.sum())
    return {"pid": np.array(out["pid"], dtype=np.int64), "key": np.array(out["key"], dtype=np.int64),
            "ts": np.concatenate(out["ts"]) if out["ts"] else np.zeros(0, np.int64),
            "value": np.concatenate(out["value"]) if out["value"] else np.zeros(0)}


def _summary(trace: Trace, options: dict) -> tuple[dict, dict, dict]:
    """The summary (``analysis.efficiency.compute``), the per-op rows and their roofline (the lane's)."""
    result = ef.compute(trace, options.get("peaks"))
    rows, roof = result.pop("rows"), result.pop("roof")
    result["top"] = options.get("top", 15)
    if options.get("replay"):
        result["opportunities"] = ef.opportunities(trace, rows, roof, min(result["top"], REPLAYED_GROUPS))
    return result, rows, roof


def tables(trace: Trace, options: dict) -> tuple[dict, list[bytes]]:
    """The summary alone (no OUT: no events made to be thrown away)."""
    return _summary(trace, options)[0], []


def rewrite(trace: Trace, options: dict) -> tuple[dict, list[bytes]]:
    """The summary and the lane and counter events."""
    result, rows, roof = _summary(trace, options)
    link = trace.columns("SELECT DISTINCT device, pid FROM traceaug_gpu_op")
    pids = dict(zip(link["device"].tolist(), link["pid"].tolist(), strict=True))
    events = _lanes(rows, roof, pids, trace.base_ns)
    for what, name in (("flops", TFLOPS), ("bytes", TBPS)):
        events += counter_events(rates(rows, pids, what), trace.base_ns, name, "value", False)
    return result, events


REWRITER = Rewriter("efficiency", "efficiency", rewrite)
TABLES = Rewriter("efficiency", "efficiency_tables", tables)  # no OUT: a skimmed load (read.kinds)
REPLAYED = Rewriter("efficiency", "sync_shapes", rewrite)  # --replay: the critical path's events too
REPLAYED_GROUPS = 10  # op groups replayed at their roofline, at most
