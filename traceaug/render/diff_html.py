"""``traceaug diff --html``: a small self-contained page; per rank a verdict, the headline table, the top
changes as plain-HTML bars, and every op in a collapsed table a few lines of script filter, sort and page."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from ..analysis.diff import DiffResult, clip
from ..analysis.serving_phases import latency_table
from ..analysis.tables import Columns
from ..atomic import atomic_output
from ..output import valid_utf8
from .diff_text import explain_tables, headline_table, ops_us, top_changes
from .sections import shown

PAGE_ROWS = 50  # rows of the all-ops table per page
COLUMNS = (("device", "device"), ("key", "op"), ("status", "status"), ("count_a", "count A"),
           ("count_b", "count B"), ("total_a_us", "A (µs)"), ("total_b_us", "B (µs)"),
           ("delta_us", "Δ (µs)"), ("delta_pct", "Δ %"), ("p_value", "p"))

STYLE = """
body{font-family:sans-serif;margin:1.5em 2em;color:#222}
h2{margin-top:1.5em;border-bottom:1px solid #ccc}
.verdict{font-size:1.15em;margin:.4em 0 .8em}
.worse{color:#b03a2e}.better{color:#1e8449}
.paths{color:#555;font-size:.9em}
table{border-collapse:collapse;margin:.3em 0}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right;font-size:.9em}
th{background:#f4f4f4}th.name,td.name{text-align:left}
td.name{max-width:46em;overflow:hidden;white-space:nowrap}
.key{display:inline-block;width:.8em;height:.6em;margin:0 .2em 0 .5em}
td.bars{width:18em;text-align:left}
.bar{height:6px;margin:1px 0}.a{background:#7f8c8d}.b{background:#2e86c1}
.up{background:#c0392b}.down{background:#27ae60}
.ops th{cursor:pointer}.pager{margin:.3em 0}
"""

# Every all-ops table: filter (device, name or status substring), sort (click a header), PAGE_ROWS-row pages.
SCRIPT = """
document.querySelectorAll('section.ops').forEach(sec => {
  const table = sec.querySelector('table'), body = table.tBodies[0];
  const rows = Array.from(body.rows), input = sec.querySelector('input');
  const info = sec.querySelector('.info'), size = PAGE;
  let shown = rows, page = 0, col = -1, dir = 1;
  function draw() {
    const pages = Math.max(1, Math.ceil(shown.length / size));
    page = Math.min(page, pages - 1);
    body.replaceChildren(...shown.slice(page * size, page * size + size));
    info.textContent = `${shown.length} of ${rows.length} ops, page ${page + 1} of ${pages}`;
  }
  function filter() {
    const q = input.value.toLowerCase();
    shown = rows.filter(r => r.dataset.text.includes(q));
    if (col >= 0) sort(col, false);
    page = 0; draw();
  }
  function sort(c, flip) {
    if (flip) { dir = c === col ? -dir : (c < 3 ? 1 : -1); col = c; }
    const value = r => { const t = r.cells[c].dataset.v ?? r.cells[c].textContent;
                         const n = parseFloat(t); return c < 3 ? t : (isNaN(n) ? -Infinity : n); };
    shown.sort((x, y) => { const a = value(x), b = value(y); return (a < b ? -1 : a > b ? 1 : 0) * dir; });
  }
  input.addEventListener('input', filter);
  table.tHead.querySelectorAll('th').forEach((th, c) =>
    th.addEventListener('click', () => { sort(c, true); draw(); }));
  sec.querySelector('.prev').addEventListener('click', () => { page = Math.max(0, page - 1); draw(); });
  sec.querySelector('.next').addEventListener('click', () => { page += 1; draw(); });
  draw();
});
document.body.dataset.ready = '1';
"""


DIGITS = {"delta_pct": 1, "p_value": 4}  # decimals shown per column (3 elsewhere: µs to the ns)
LEGEND = ("<th class='name'>A<span class='key a'></span>B<span class='key b'></span>"
          "Δ<span class='key up'></span><span class='key down'></span></th>")


def _number(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return ""
    return f"{v:.{digits}f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)


def _verdict(res: dict, ops: Columns, worse: np.ndarray, better: np.ndarray) -> str:
    """One sentence: the step time A -> B, and the largest regression and improvement."""
    a, b = res["a"]["step_ns"] / 1e3, res["b"]["step_ns"] / 1e3
    change = f" ({100 * (b - a) / a:+.1f} %)" if a else ""
    cls = "worse" if b > a else "better"
    parts = [f"Step time <b class='{cls}'>{a:,.3f} → {b:,.3f} µs{change}</b> per step"]
    for rows, word, sign in ((worse, "largest regression", "worse"), (better, "largest improvement",
                                                                        "better")):
        if len(rows):
            i = rows[0]
            name = html.escape(clip(ops["key"][i], 60))
            parts.append(f"{word}: <span class='{sign}'>{ops['device'][i]} "
                         f"<span title='{html.escape(str(ops['key'][i]))}'>{name}</span> "
                         f"{ops['delta_us'][i]:+,.3f} µs</span>")
    return "<p class='verdict'>" + "; ".join(parts) + ".</p>"


def _table(columns: Columns) -> str:
    """A small table (the headline) from columns."""
    names = list(columns)
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_number(columns[n][i], 3))}</td>" for n in names)
                   + "</tr>" for i in range(len(columns[names[0]])))
    return f"<table><tr>{head}</tr>{rows}</table>"


def _top(ops: Columns, rows: np.ndarray, title: str, scale: float) -> str:
    """The top rows with their A and B bars (one scale for the whole rank) and a Δ bar."""
    if not len(rows):
        return f"<h3>{title}</h3><p>none</p>"
    head = _head() + LEGEND
    out = [f"<h3>{title} (per step)</h3><table class='top'><tr>{head}</tr>"]
    for i in rows.tolist():
        cells = []
        for c, _label in COLUMNS:
            v = ops[c][i]
            if c == "key":
                cells.append(f"<td class='name' title='{html.escape(str(v))}'>"
                             f"{html.escape(clip(v, 90))}</td>")
            else:
                cells.append(f"<td>{html.escape(_number(v, DIGITS.get(c, 3)))}</td>")
        d = ops["delta_us"][i]
        widths = [100 * ops["total_a_us"][i] / scale, 100 * ops["total_b_us"][i] / scale,
                  100 * abs(d) / scale]
        bars = "".join(f"<div class='bar {k}' style='width:{w:.1f}%'></div>"
                       for k, w in zip(("a", "b", "up" if d > 0 else "down"), widths, strict=True))
        out.append("<tr>" + "".join(cells) + f"<td class='bars'>{bars}</td></tr>")
    return "".join(out) + "</table>"


def _head() -> str:
    return "".join(f"<th class='name'>{label}</th>" if c == "key" else f"<th>{label}</th>"
                   for c, label in COLUMNS)


def _all_ops(ops: Columns) -> str:
    """Every op, collapsed: filter, sort by a header, pages of ``PAGE_ROWS``."""
    n = len(ops["key"])
    head = _head()
    body = []
    for i in range(n):
        key = str(ops["key"][i])
        text = html.escape(f"{ops['device'][i]} {key} {ops['status'][i]}".lower())
        cells = "".join(
            f"<td class='name' title='{html.escape(key)}' data-v='{html.escape(key)}'>"
            f"{html.escape(clip(key, 90))}</td>" if c == "key" else
            f"<td>{html.escape(_number(ops[c][i], DIGITS.get(c, 3)))}</td>" for c, _l in COLUMNS)
        body.append(f"<tr data-text='{text}'>{cells}</tr>")
    return (f"<section class='ops'><details><summary><b>All {n} ops</b> (per step): filter, "
            f"sort by a column, pages of {PAGE_ROWS}</summary><p><input size='40' "
            "placeholder='filter: part of a name, device or status'> <button class='prev'>‹</button>"
            " <span class='info'></span> <button class='next'>›</button></p>"
            f"<table class='ops'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"
            "</table></details></section>")


def _gate(g: dict, what: str = "Step time") -> str:
    """What ``--fail-on-regression`` decided: the step time (``what``), then every op past both thresholds
    with its p- and q-value and whether it gates."""
    step = "fails the gate" if g["step_regressed"] else "passes"
    out = [f"<h3>Gate: --fail-on-regression {g['fail_on_regression_pct']:g}</h3><p>{what} "
           f"{g['step_a_ns'] / 1e3:,.3f} → {g['step_b_ns'] / 1e3:,.3f} µs ({g['step_change_pct']:+.1f} %): "
           f"{step}. Ops present on both sides that changed by over {g['fail_on_regression_pct']:g} % "
           f"and {g['min_delta_ns'] / 1e3:,.1f} µs per step: {len(g['ops'])}; a regression among them gates "
           f"when significant ({html.escape(g['test'])}, q ≤ {g['level']:g}).</p>"]
    if not g["enough_steps"]:
        out.append(f"<p class='worse'>{g['steps_a']} vs {g['steps_b']} steps are too few to tell a "
                   "change from noise: op changes are reported, not gated.</p>")
    if g["ops"]:
        columns = {c: np.array([o[c] for o in g["ops"]], dtype=object) for c in
                   ("device", "key", "change", "delta_ns", "delta_pct", "p_value", "q_value", "gates")}
        columns = ops_us(columns)  # delta_us
        columns["key"] = np.array([clip(k, 90) for k in columns["key"]], dtype=object)
        out.append(_table(columns))
    return "".join(out)


def _scale(ops: Columns, worse: np.ndarray, better: np.ndarray) -> float:
    """The bars' scale (µs) of one table of top changes: the largest A or B time shown."""
    rows = np.concatenate([worse, better])
    return max(float(np.max(np.maximum(ops["total_a_us"][rows], ops["total_b_us"][rows])))
               if len(rows) else 0.0, 1e-12)


def _phases(phases: list[dict], top: int) -> str:
    """A serving trace's phases (``analysis.serving_phases``): their step latencies, then per phase on both
    sides its gate and its top regressions and improvements (per step of that phase)."""
    out = ["<h2>Serving phases: step latency (µs)</h2>", _table(shown(latency_table(phases), "table"))]
    for p in phases:
        if "ops" not in p:
            out.append(f"<p>{html.escape(p['phase'])}: {p['present']}, nothing to compare it with.</p>")
            continue
        ops = ops_us(p["ops"])
        worse, better = top_changes(p["ops"], top)
        scale, name = _scale(ops, worse, better), html.escape(p["phase"])
        out.append(f"<h3>{name} steps: latency {p['status']}</h3>"
                   + (_gate(p["gate"], "Step latency") if "gate" in p else "")
                   + _top(ops, worse, f"Top regressions in {name} steps", scale)
                   + _top(ops, better, f"Top improvements in {name} steps", scale))
    return "".join(out)


def _explain(split: dict, top: int) -> str:
    """``--explain``: the step-time change along both critical paths, per category and the ``top``
    events that moved most (µs per step)."""
    head, table, events = explain_tables(split, top)
    return (f"<h2>Step time along the critical paths</h2><p>{html.escape(head)}</p>{_table(table)}"
            f"<h3>Events that moved most along the paths (per step)</h3>{_table(events)}")


def write_report(result: DiffResult, path: Path, top: int = 20, split: dict | None = None) -> None:
    """Write the page atomically (``split``: ``--explain``'s, shown after the ranks)."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>traceaug diff</title>",
             f"<style>{STYLE}</style></head><body><h1>traceaug diff</h1>"]
    for side, ranks in result.unmatched.items():
        if ranks:
            parts.append(f"<p>only in {side.upper()}: rank(s) {', '.join(map(str, ranks))}</p>")
    for r in result.ranks:
        ops = ops_us(r.result["ops"])
        worse, better = top_changes(r.result["ops"], top)
        scale = _scale(ops, worse, better)
        if r.rank is not None:
            parts.append(f"<h2>rank {r.rank}</h2>")
        parts.append(_verdict(r.result, ops, worse, better))
        parts.append(f"<p class='paths'>A = {html.escape(str(r.a))}<br>B = {html.escape(str(r.b))}</p>")
        parts.append(_table(headline_table(r.result)))
        if r.gate is not None:
            parts.append(_gate(r.gate))
        parts.append(_top(ops, worse, "Top regressions", scale))
        parts.append(_top(ops, better, "Top improvements", scale))
        parts.append(_all_ops(ops))
        if r.result.get("phases"):
            parts.append(_phases(r.result["phases"], top))
    if split is not None:
        parts.append(_explain(split, top))
    for title, table in result.efficiency:  # render.efficiency_text: folded, as long as the steps
        rows = len(next(iter(table.values())))
        parts.append(f"<details><summary>{html.escape(title)} ({rows:,} rows)</summary>{_table(table)}"
                     "</details>")
    for title, table in result.memory:  # render.memory_text.diff_sections
        parts.append(f"<h2>{html.escape(title)}</h2>{_table(table)}")
    parts.append(f"<script>const PAGE = {PAGE_ROWS};{SCRIPT}</script></body></html>")
    with atomic_output(path, "w") as f:
        f.write(valid_utf8("\n".join(parts)))  # a path not UTF-8 shows its bytes as \xff
