"""``traceaug critical-path`` as a rewriter: the "sync" load kind, ``rewrite.critical_path``'s
compute and the summary below; targets, copy, load and splice are ``rewrite.pipeline``'s."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..output import cut, json_text, render_columns
from ..rewrite import critical_path, pipeline

if TYPE_CHECKING:
    from ..job.run import JobOptions
    from ..read.prefetch import Prefetched


def run(src: Path, dst: str | Path | None, options: dict, rank: int | None = None,
        fmt: str = "table", tp_bin: str | None = None, prefetched: Prefetched | None = None,
        open_ui: bool | dict = False, job: JobOptions | None = None) -> str:
    """``critical-path`` over every target, through the pipeline; the formatted summary."""
    return pipeline.run(CRITICAL_PATH, src, dst, options, rank=rank, fmt=fmt, tp_bin=tp_bin,
                        prefetched=prefetched, open_ui=open_ui, job=job)


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
        parts += inferred_lines(r)
        parts.append(render_columns({"category": cats["category"],
                                     "us": [v / 1e3 for v in cats["ns"]],
                                     "share_pct": cats["share_pct"]}, "table"))
        top = r["top"]
        parts.append("top events on the path\n" + render_columns(
            {"event": [_short(e) for e in top["event"]], "us": [v / 1e3 for v in top["ns"]],
             "share_pct": top["share_pct"]}, "table"))
    return "\n".join(parts)


def inferred_lines(summary: dict) -> list[str]:
    """A line per kind of wait the graph inferred (``critical_path.Result.summary``)."""
    return [f"inferred: {calls:,} {what}" for what, calls in summary.get("inferred", {}).items()]


def _short(name, width: int = 60) -> str:
    return cut(str(name), width)


CRITICAL_PATH = pipeline.Rewriter(name="critical-path", kind="sync", compute=critical_path.compute,
                                  summary=summary_text)


# ----- a whole job (``--job``) ------------------------------------------------------------------
def run_job(src: str | Path, dst: str | Path | None, step: int | None = None,
            fmt: str = "table", options: dict | None = None, job: JobOptions | None = None,
            hta_weights: bool = False) -> str:
    """``job_paths``, formatted (``job_text``)."""
    return job_text(job_paths(src, dst, step, options, job, hta_weights), fmt)


def job_paths(src: str | Path, dst: str | Path | None, step: int | None = None,
              options: dict | None = None, job: JobOptions | None = None,
              hta_weights: bool = False) -> list:
    """The job's critical path per step (``analysis.job_path``: the timing path, or with
    ``hta_weights`` the longest by weight); OUT (unless None): the merged job trace
    (``merge``'s) with the path as lanes and arrows."""
    from .. import guard
    from ..analysis import job_path as jp
    from ..errors import TraceaugError
    from ..job.run import JobOptions
    from ..rewrite import job_path as drawn
    from ..rewrite.merge_job import write_job

    job = job or JobOptions()
    files = job.select(src)  # once: the tasks and OUT's merge take them
    if len(files) < 2:
        raise TraceaugError(f"{src}: --job needs a directory of two ranks or more")
    if dst is not None:  # before any work, as merge checks it
        guard.check([f.path for f in files], [Path(dst)])
    parts = jp.read(src, options, job, None if hta_weights else (), files=files)
    found, paths = jp.paths(parts, step, hta_weights)
    if dst is not None:
        write_job(src, Path(dst), found=found, extra=drawn.events(paths), files=files)
    return paths


def job_text(paths: list, fmt: str) -> str:
    """Per step: the path's length, its time per category and per rank, its segments."""
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
        parts.append("segments (us from the step's start)\n" + render_columns(
            {"rank": timed["rank"].to_numpy(), "at_us": (timed["ts_ns"] - s["start_ns"]) / 1e3,
             "us": timed["weight_ns"] / 1e3, "category": timed["category"].to_numpy(),
             "event": [_short(e) for e in timed["event"].tolist()]}, "table"))
    return "\n".join(parts)
