"""``traceaug critical-path``' summary: each rank's path (length, share per category, top
events), or per step the job's path across ranks (``--job``), as a table, CSV or JSON."""

from __future__ import annotations

from ..output import cut, json_text, render_columns


def summary_text(results: list[dict], fmt: str) -> str:
    """Length, share per category and top events of each rank's path."""
    if fmt == "json":
        data = results[0] if len(results) == 1 else results
        return json_text(data)
    if fmt == "csv":  # long form: rank, section, key, ns, share_pct
        rows: dict[str, list] = {c: [] for c in ("rank", "section", "key", "ns", "share_pct")}
        for r in results:
            for section, key in (("length", None), ("categories", "category"), ("top", "event")):
                if key is None:
                    items = [("length", r["length_ns"], 100.0)]
                else:
                    t = r[section]
                    items = list(zip(t[key], t["ns"], t["share_pct"]))
                for k, ns, share in items:
                    for c, v in zip(rows, (r["rank"], section, k, ns, share)):
                        rows[c].append(v)
        return render_columns(rows, "csv")
    parts = []
    for r in results:
        who = f"rank {r['rank']}: " if r["rank"] is not None and len(results) > 1 else ""
        parts.append(f"{who}critical path of {r['window']}: {r['length_ns'] / 1e3:,.3f} us "
                     f"(window {(r['end_ns'] - r['start_ns']) / 1e3:,.3f} us)")
        cats = r["categories"]
        parts += inferred_lines(r) + blocked_lines(r) + ([r["reliability"]] if "reliability" in r else [])
        parts.append(render_columns({"category": cats["category"],
                                     "us": [v / 1e3 for v in cats["ns"]],
                                     "share_pct": cats["share_pct"]}, "table"))
        top = r["top"]
        ops = {"op": [o or "" for o in top["op"]]} if any(top.get("op", ())) else {}  # graph replays'
        parts.append("top events on the path\n" + render_columns(
            {"event": [str(e) for e in top["event"]], **ops, "us": [v / 1e3 for v in top["ns"]],
             "share_pct": top["share_pct"]}, "table"))
    return "\n".join(parts)


def inferred_lines(summary: dict) -> list[str]:
    """A line per kind of wait the graph inferred (``critical_path.Result.summary``)."""
    return [f"inferred: {calls:,} {what}" for what, calls in summary.get("inferred", {}).items()]


def blocked_lines(summary: dict, top: int = 3) -> list[str]:
    """Two lines per longest wait of a call for the GPU on the path: what it waited for, the streams the path
    ran on, how much was GPU work, and the rest, ``blocked`` (``critical_path.Result.blocked``)."""
    b = summary.get("blocked") or {}
    out = []
    for i in range(min(top, len(b.get("call", [])))):
        streams = ", ".join(map(str, b["streams"][i])) or "none"
        out += [f"blocked: {b['call'][i]} at {(b['start_ns'][i] - summary['start_ns']) / 1e3:,.3f} us waited "
                f"{b['wait_ns'][i] / 1e3:,.3f} us for {cut(str(b['waited_for'][i]))}",
                f"  path through streams {streams}: GPU work {b['gpu_ns'][i] / 1e3:,.3f} us "
                f"({b['gpu_pct'][i]:.1f} %), launches, gaps and CPU {b['other_ns'][i] / 1e3:,.3f} us, "
                f"blocked {b['blocked_ns'][i] / 1e3:,.3f} us"]
    return out


def job_text(paths: list, fmt: str, top: int = 10) -> str:
    """Per step: the path's length, its time per category and per rank, and in the terminal its
    ``top`` longest segments (csv / json: every segment)."""
    from ..analysis import job_path as jp
    from ..analysis.job_timing import LATE_START

    summaries = [jp.summary(p) for p in paths]
    segs = [jp.segments(p) for p in paths]
    if fmt == "json":
        for s, seg in zip(summaries, segs):
            s["segments"] = {k: v.tolist() for k, v in seg.items()}
        return json_text(summaries)
    if fmt == "csv":  # long form: step, section, rank, category, event, ts_ns, ns, share_pct
        rows: dict[str, list] = {c: [] for c in ("step", "section", "rank", "category", "event",
                                                  "ts_ns", "ns", "share_pct")}

        def add(*values):
            for c, v in zip(rows, values):
                rows[c].append(v)
        for s, seg in zip(summaries, segs):
            total = max(s["step_ns"], 1)
            for c, ns, share in zip(*s["categories"].values()):
                add(s["step"], "category", None, c, None, None, ns, share)
            for r, ns, share in zip(*s["ranks"].values()):
                add(s["step"], "rank", r, None, None, None, ns, share)
            for r, ts, w, c, e in zip(seg["rank"], seg["ts_ns"], seg["weight_ns"],
                                      seg["category"], seg["event"]):
                add(s["step"], "segment", int(r), c, e, int(ts), int(w), 100 * w / total)
        return render_columns(rows, "csv")
    parts = []
    for s, seg in zip(summaries, segs):
        ranks = s["ranks"]["rank"]
        parts.append(f"job critical path of {s['window']}: {s['length_ns'] / 1e3:,.3f} us of the "
                     f"step's {s['step_ns'] / 1e3:,.3f} us (first rank's start to last rank's "
                     f"end, job clock), through rank(s) {', '.join(map(str, ranks)) or 'none'}")
        late = seg[seg["kind"] == LATE_START]
        parts += [f"rank {int(r)}'s step started {us / 1e3:,.3f} us after the first rank's "
                  f"(idle on the path)" for r, us in zip(late["rank"], late["weight_ns"])]
        parts += inferred_lines(s)  # over every rank's graph
        cats = s["categories"]
        parts.append(render_columns({"category": cats["category"],
                                     "us": [v / 1e3 for v in cats["ns"]],
                                     "share_pct": cats["share_pct"]}, "table"))
        parts.append("per rank\n" + render_columns(
            {"rank": ranks, "us": [v / 1e3 for v in s["ranks"]["ns"]],
             "share_pct": s["ranks"]["share_pct"]}, "table"))
        timed = seg[seg["category"] != "idle"]
        longest = timed.sort_values(["weight_ns", "ts_ns"], ascending=[False, True],
                                    kind="stable").head(top)
        parts.append(f"top {len(longest)} of {len(timed):,} segments by time (us from the step's "
                     "start; --format csv or json lists every one)\n" + render_columns(
            {"rank": longest["rank"].to_numpy(), "at_us": (longest["ts_ns"] - s["start_ns"]) / 1e3,
             "us": longest["weight_ns"] / 1e3,
             "share_pct": 100 * longest["weight_ns"] / max(s["step_ns"], 1),
             "category": longest["category"].to_numpy(),
             "event": longest["event"].to_numpy()}, "table"))
    return "\n".join(parts)
