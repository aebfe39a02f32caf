"""``traceaug report --html``: kernels, gaps, breakdowns and launches of every rank in one
self-contained page (plotly charts, plotly.js inlined; works offline)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import orjson

from ..analysis import gaps as gp
from ..analysis import kernels as kn
from ..analysis import launches as ln
from ..analysis.gpu_steps import GpuOps
from ..analysis.tables import Columns, concat
from ..atomic import atomic_output
from .findings import Overview, overview, overview_part
from .job_html import job_parts
from .job_sections import JOB_NCCL
from .plotly_inline import BOOT, packed_plotly
from .sections import clip_names, shown

TYPES = ("computation", "communication", "memory")
SEGMENTS = (("comp_only", "computation"), ("comm_only", "communication"), ("mem_only", "memory"),
            ("comp_comm", "comp + comm"), ("comp_mem", "comp + mem"), ("comm_mem", "comm + mem"),
            ("comp_comm_mem", "all three"), ("idle", "idle"))


def _label(rank) -> str:
    return "trace" if rank is None else f"rank {rank}"


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def bar_labels(names: list[str], width: int = 60) -> list[str]:
    """Each name cut to ``width`` chars, all labels distinct (plotly draws one bar per label): a colliding
    cut keeps its start and shows where it differs (``start…part…``), then `` #n`` if still taken."""
    out = [_short(n, width) for n in names]
    groups: dict[str, list[int]] = {}
    for i, label in enumerate(out):
        groups.setdefault(label, []).append(i)
    head = width // 2
    for members in groups.values():
        if len(members) < 2:
            continue
        ordered = sorted(members, key=lambda i: names[i])
        for j, i in enumerate(ordered):  # where it first differs from its sorted neighbours
            d = max(_common(names[i], names[k]) for k in ordered[max(j - 1, 0):j + 2] if k != i)
            start = max(head, d - 8)
            out[i] = names[i][:head] + "…" + _short(names[i][start:], width - head - 1)
    seen: dict[str, int] = {}
    for i, label in enumerate(out):
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            out[i] = f"{label} #{seen[label]}"
    return out


def _wrapped(name: str, width: int = 110) -> str:
    """The full name in lines of ``width`` characters (a hover box no wider than the page)."""
    return "<br>".join(name[i:i + width] for i in range(0, len(name), width)) or name


def _common(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _fig(data: list[dict], title: str, **layout) -> dict:
    """A plotly figure as plain data (plotly.js draws it; no plotly import in Python)."""
    return {"data": data, "layout": {"title": {"text": title}, **layout}}


# a µs axis reads as µs: "20,000 µs", never plotly's SI "20k" (20 k µs?) or "1.5M"
US_AXIS = {"title": {"text": "µs"}, "tickformat": ",~f", "hoverformat": ",.1f", "ticksuffix": " µs"}


def _list(values) -> list:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def analyses(g: GpuOps, in_job: bool = False, step: int | None = None) -> dict:
    """What the page shows of one rank, computed where it is read (``in_job``: one rank of several): each
    analysis's table, positive gaps between ops on a stream, and ``findings.rank_figures``."""
    gap = gp.stream_pairs(g, step)["gap"]
    return {**overview_part(g, step), "gap": gap[gap > 0], "stream_gaps": gp.stream_gaps(g, step),
            "launches": ln.summary(ln.launch_table(g, step), g, step)}


def by_name(parts: list[dict]) -> dict[str, list]:
    """The ranks' ``analyses``, each name's values in rank order."""
    return {k: [p[k] for p in parts] for k in parts[0]}


def figures(a: dict[str, list], top: int, nccl: Columns | None = None) -> list[tuple[str, dict]]:
    """Every chart of the report, named, from the ranks' ``analyses`` (``by_name``); ``nccl``: a job's NCCL
    kernels' wait vs transfer (``job_sections.nccl_table``), how their bars are split."""
    tables = a["kernels"]
    n = len(tables)
    pies = [{"type": "pie", "labels": list(TYPES), "sort": False, "name": _label(rank),
             "title": {"text": _label(rank)}, "domain": {"x": [i / n, (i + 1) / n]},
             "values": [int(t["total"][t["type"] == typ].sum()) / 1e3 for typ in TYPES]}
            for i, (rank, t) in enumerate(zip(a["rank"], tables))]
    out = [("kernel types", _fig(pies, "GPU time per kernel type (µs), per rank"))]
    across = kn.across_ranks(tables)
    for typ in TYPES:
        rows = np.flatnonzero(across["type"] == typ)[:top]
        if not len(rows):
            continue
        mean = across["mean_total"][rows] / 1e3
        names = across["name"][rows].tolist()
        bar = {"type": "bar", "orientation": "h", "x": _list(mean), "y": bar_labels(names),
               "customdata": names, "hovertext": [_wrapped(n) for n in names],
               "hovertemplate": "%{hovertext}<br>%{x:,.1f} µs<extra></extra>",
               "error_x": {"type": "data", "symmetric": False,
                           "array": _list(across["max_total"][rows] / 1e3 - mean),
                           "arrayminus": _list(mean - across["min_total"][rows] / 1e3)}}
        data, what = [bar], "total µs (mean over ranks, bars min–max)"
        if typ == "communication":
            data, what = _split(bar, nccl)
        out.append((f"top {typ}", _fig(
            data, f"Top {typ} kernels: {what}", barmode="stack",
            yaxis={"autorange": "reversed"}, xaxis=US_AXIS, margin={"l": 420},
            height=max(300, 26 * len(rows) + 120))))
    hist = gp.histogram(gp.counted(np.concatenate(a["gap"])), bins=30)
    out.append(("gap histogram", _fig(
        [{"type": "bar", "x": [f"{a:.3g}–{b:.3g}" for a, b in zip(hist["lo_us"], hist["hi_us"])],
          "y": _list(hist["count"])}],
        "Idle gaps between ops on a stream (µs, log-spaced bins)",
        xaxis={"title": {"text": "gap (µs)"}}, yaxis={"title": {"text": "gaps"}})))
    idle = concat(a["idle"])
    bars = []
    for cat in ("host_wait", "kernel_wait", "other"):
        m = idle["category"] == cat
        bars.append({"type": "bar", "name": cat, "y": _list(idle["idle"][m] / 1e3),
                     "x": [f"{_label(r)} stream {s}" for r, s in zip(idle["rank"][m], idle["stream"][m])]})
    out.append(("idle breakdown", _fig(
        bars, "Idle time per stream (µs): host wait / kernel wait / other", barmode="stack",
        yaxis=US_AXIS)))
    temporal = concat(a["temporal"])
    per_step = np.array([s is not None for s in temporal["step"]], bool)
    x = [f"{_label(r)} step {s}" for r, s in zip(temporal["rank"][per_step], temporal["step"][per_step])]
    bars = [{"type": "bar", "name": label, "x": x, "y": _list(temporal[col][per_step] / 1e3)}
            for col, label in SEGMENTS]
    out.append(("timeline", _fig(bars, "Busy and idle time per step in its GPU window (µs)",
                                 barmode="stack", yaxis=US_AXIS)))
    return out


def _split(bar: dict, nccl: Columns | None) -> tuple[list[dict], str]:
    """The communication chart's bars: each NCCL kernel's as its wait for the last rank's arrival and
    its transfer after it (µs per rank, mean over ranks), the others' as totals; one rank: said unknown."""
    names = bar["customdata"]
    split = {} if nccl is None else dict(zip(nccl["name"].tolist(), zip(
        (nccl["wait_ns"] / 1e3).tolist(), (nccl["transfer_ns"] / 1e3).tolist())))
    if not any(n in split for n in names):
        return [bar], "total µs (mean over ranks, bars min–max; wait vs transfer: report the job's ranks)"

    def part(label: str, values: list) -> dict:
        return {**{k: v for k, v in bar.items() if k != "error_x"}, "name": label, "x": values,
                "hovertemplate": f"%{{hovertext}}<br>{label} %{{x:,.1f}} µs<extra></extra>"}
    parts = [part(label, [split[n][i] if n in split else None for n in names])
             for i, label in enumerate(("wait for the last rank", "transfer"))]
    if all(n in split for n in names):
        return parts, "NCCL wait for the last rank vs transfer (µs per rank, mean over ranks)"
    rest = part("total", [None if n in split else x for n, x in zip(names, bar["x"])])
    return [*parts, rest], "NCCL wait vs transfer, others' totals (µs per rank, mean over ranks)"


def _cells(values: np.ndarray, digits: int) -> list[str]:
    """One column's ``<td>`` cells: floats to ``digits`` places, the rest as text, escaped
    (column by column: a table of 20,000 steps formatted cell by cell took seconds)."""
    if values.dtype.kind == "f":
        return [f"<td>{v:,.{digits}f}</td>" for v in values.tolist()]
    if values.dtype.kind in "iu":  # nothing to escape in a number
        return [f"<td>{v:,}</td>" for v in values.tolist()]
    if values.dtype.kind == "b":
        return [f"<td>{v}</td>" for v in values.tolist()]
    return [f"<td>{html.escape(f'{v:,.{digits}f}' if isinstance(v, float) else str(v))}</td>"
            for v in values.tolist()]


def _table(t: Columns, digits: int = 1) -> str:
    """A table to sort by any column; long headers break after their underscores."""
    t = shown(t, "table", full_names=False)
    head = "".join(f"<th title='sort by {html.escape(c)}'>{html.escape(c).replace('_', '_<wbr>')}</th>"
                   for c in t)
    rows = map("".join, zip(*(_cells(v, digits) for v in t.values())))
    return (f"<div class='scroll'><table class='sortable'><thead><tr>{head}</tr></thead><tbody>"
            f"{''.join(f'<tr>{r}</tr>' for r in rows)}</tbody></table></div>")


def _rows(t: Columns) -> int:
    return len(next(iter(t.values()))) if t else 0


def _overview(o: Overview, ranks: int) -> str:
    """The first screen: the verdict, the top three findings, the key figures."""
    f = o.figures
    items = "".join(f"<li>{html.escape(x.text)}</li>" for x in o.findings[:3])
    return ("<section id='overview'>"
            f"<p class='verdict'>{html.escape(o.verdict)}</p><ol class='findings'>{items}</ol>"
            f"<p class='figures'>GPU window {f['window_ns'] / 1e3:,.0f} µs over {ranks} rank(s): "
            f"busy {f['busy_pct']:.1f} %, idle {f['idle_pct']:.1f} %.</p></section>")


# click a column's header to sort by it (numbers as numbers; again: the other way)
SORT_JS = r"""
document.querySelectorAll("table.sortable th").forEach(th => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0], col = th.cellIndex;
  const up = th.dataset.order !== "asc";
  th.closest("tr").querySelectorAll("th").forEach(h => delete h.dataset.order);
  th.dataset.order = up ? "asc" : "desc";
  const key = r => { const t = r.cells[col].textContent, n = parseFloat(t.replace(/,/g, ""));
                     return isNaN(n) || !/^[-+\d.,e]+$/i.test(t.trim()) ? t : n; };
  const rows = Array.from(body.rows).sort((a, b) => {
    const x = key(a), y = key(b);
    const c = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
    return up ? c : -c; });
  body.append(...rows);
}));
"""

STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1400px}"
         "#overview{border:1px solid #ccc;border-left:6px solid #c60;padding:.5em 1.2em;"
         "margin-bottom:1.5em;background:#fffaf5}.verdict{font-size:1.25em;font-weight:bold}"
         ".findings li{margin:.3em 0;font-size:1.05em}.figures{color:#555}"
         "details{margin:.6em 0}summary{cursor:pointer;font-weight:bold;font-size:1.1em}"
         ".scroll{max-width:100%;max-height:32em;overflow:auto}"
         "table{border-collapse:collapse;font-size:12px;margin:.5em 0}"
         "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
         "th{cursor:pointer;position:sticky;top:0;background:#eee;max-width:8em}"
         "th[data-order=asc]::after{content:' ▲'}"
         "th[data-order=desc]::after{content:' ▼'}.chart{min-height:300px}")


def write_report(ranks: list[dict], path: Path, step: int | None = None, top: int = 10,
                 title: str = "traceaug report", job: list[tuple[str, Columns]] | None = None,
                 tables: list[tuple[str, Columns]] = ()) -> int:
    """Write the page atomically from each rank's ``analyses``; returns the number of charts. ``job``: a job's
    section (``job_sections.job_sections``), drawn first after the overview; ``tables``: more titled
    tables, after the page's own (the memory sections)."""
    a = by_name(ranks)
    figs = figures(a, top, dict(job or []).get(JOB_NCCL))
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>{html.escape(title)}</title>", f"<style>{STYLE}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>", _overview(overview(a, step, _short, job), len(ranks))]
    head, tail, job_figs = job_parts(job, _table) if job else ("", "", [])
    charts = [f"<div class='chart' id='chart{i}' data-chart='{html.escape(name)}'></div>"
              for i, (name, _) in enumerate(job_figs + figs)]
    parts += [head, *charts[:len(job_figs)], tail, *charts[len(job_figs):]]
    specs = [fig for _, fig in job_figs + figs]
    summary = a["launches"]
    sections = [("Temporal breakdown per step", concat(a["temporal"])),
                ("Idle breakdown per stream", concat(a["idle"])),
                ("Top kernels", concat([{k: v[:top] for k, v in t.items()} for t in a["kernels"]])),
                ("Gaps per stream", concat(a["stream_gaps"])),
                ("Launch summary", {k: np.array([r[k] for r in summary],
                                                dtype=object if k == "rank" else None)
                                    for k in summary[0]}), *tables]
    parts.append("<h2>Tables</h2>")
    for name, t in sections:
        parts.append(f"<details><summary>{html.escape(name)} ({_rows(t):,} rows)</summary>"
                     + _table(clip_names(t, 60)) + "</details>")
    parts.append(f"<script>{SORT_JS}</script><script>{BOOT}</script>")
    parts.append("<script>const FIGS = " + orjson.dumps(specs).decode().replace("</", "<\\/")
                 + ";\nconst PLOTLY = \"")
    tail = ("\";\nbootPlotly(PLOTLY, () => { FIGS.forEach((f, i) => Plotly.newPlot("
            "'chart' + i, f.data, f.layout, {responsive: true})); "
            "document.body.dataset.ready = '1'; });</script></body></html>")
    with atomic_output(path, "wb") as f:  # plotly.js as the cached bytes: no 2 MB decode / encode
        f.write("\n".join(parts).encode())
        f.write(packed_plotly())
        f.write(tail.encode())
    return len(job_figs) + len(figs)

