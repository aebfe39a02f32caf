"""The job's critical path on the merged job trace (``merge_job``'s clock and pids): a lane per rank
(``rank N Critical path``, a slice per segment naming its event) and arrows along its jumps, across
ranks at collectives."""

from __future__ import annotations

import numpy as np
import orjson

from ..analysis import job_path as jp
from ..analysis.steps import shorten
from ..read.rebase import unsigned_tid
from .critical_path import ARROW_KINDS, CATEGORY, LANE_ID, LANE_NAME
from .events import async_slice_events, flow_events, process_name_events
from .merge_job import ARROWS
from .relabel_text import RANK_PIDS, sort_index

LANE_PID = RANK_PIDS - 1  # within each rank's pids: the lane's process
PATH_FLOWS = ARROWS + (1 << 39)  # flow ids of the path's arrows, above the collectives' ones


def events(paths: list[jp.JobPath]) -> list[bytes]:
    """The lanes (one per rank the paths pass through) and the arrows of every step's path."""
    lanes: dict[int, list] = {}
    for p in paths:
        seg = jp.segments(p)
        seg = seg[seg["category"] != "idle"]
        for r, rows in seg.groupby("rank", sort=True):
            lanes.setdefault(int(r), []).append(rows)
    out: list[bytes] = []
    for r in sorted(lanes):
        rows = lanes[r]
        ts = np.concatenate([x["ts_ns"].to_numpy(np.int64) for x in rows])
        dur = np.concatenate([x["weight_ns"].to_numpy(np.int64) for x in rows])
        name = np.concatenate([x["event"].to_numpy(object) for x in rows])
        cat = np.concatenate([x["category"].to_numpy(object) for x in rows])
        kind = np.concatenate([x["kind"].to_numpy(object) for x in rows])
        short = {n: shorten(n) if isinstance(n, str) else str(n) for n in set(name.tolist())}
        # each slice names the event it stands for (in full: the title is shortened) and its kind
        args = {k: orjson.dumps({"category": k[0], "kind": k[1], "event": k[2], "rank": r})
                for k in set(zip(cat.tolist(), kind.tolist(), name.tolist()))}
        pid = r * RANK_PIDS + LANE_PID
        title = f"rank {r} {LANE_NAME}"
        out += process_name_events([pid], title, sort_index=sort_index(r, "path"))
        out += async_slice_events(pid, pid, ts, dur, [short[n] for n in name.tolist()], CATEGORY, LANE_ID,
                                  [args[k] for k in zip(cat.tolist(), kind.tolist(), name.tolist())],
                                  track_name=title)
    return out + arrows(paths)


def arrows(paths: list[jp.JobPath]) -> list[bytes]:
    """An arrow per jump of each path (dependencies, launches, syncs, and the collectives'
    edges between ranks) whose two events take time (an arrow binds to a slice)."""
    cols: dict[str, list] = {k: [] for k in ("sp", "st", "sts", "dp", "dt", "dts", "args")}
    for p in paths:
        e = p.edges
        jump = np.isin(e["kind"], (*ARROW_KINDS, jp.JOIN)) & (e["src_dur"] > 0) & (e["dst_dur"] > 0)
        for i in np.flatnonzero(jump).tolist():
            cols["sp"].append(int(e["src_rank"][i]) * RANK_PIDS + int(e["src_pid"][i]))
            cols["st"].append(unsigned_tid(int(e["src_tid"][i])))
            cols["sts"].append(int(e["src_bind"][i]))
            cols["dp"].append(int(e["dst_rank"][i]) * RANK_PIDS + int(e["dst_pid"][i]))
            cols["dt"].append(unsigned_tid(int(e["dst_tid"][i])))
            cols["dts"].append(int(e["dst_bind"][i]))
            cols["args"].append({"type": jp.EDGE_KINDS[int(e["kind"][i])],
                                 "weight_us": int(e["weight"][i]) / 1e3, "step": p.step})
    n = len(cols["sp"])
    if not n:
        return []
    ids = PATH_FLOWS + np.arange(1, n + 1, dtype=np.int64)
    return flow_events(np.array(cols["sp"]), np.array(cols["st"]), np.array(cols["sts"]),
                       np.array(cols["dp"]), np.array(cols["dt"]), np.array(cols["dts"]), ids,
                       CATEGORY, CATEGORY, cols["args"])
