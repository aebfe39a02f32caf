"""``traceaug diff A B --trace OUT`` (what ``--open`` shows) in the real Perfetto UI (v52, headless Chromium).

The merged trace once had B's processes labelled and A's not, both sides aligned at their first step whatever
step was compared, nothing linking an op of A to the same op of B and no figure of the change. Now every
process is "A: ..." or "B: ...", the compared step of each starts at one time and is what the UI shows first,
each matched pair of ops of the top changes (the i-th of a key in A's step and in B's) has an arrow, a
pinned Δ counter per top change holds ``--format csv``'s per-step delta, and both critical paths of the
step are pinned lanes on screen. The arrows once were flow events bound by time, so an op never on top of
its thread's stack (a child starting with it) or of no duration got none (h100_runs: 20 of 21 pairs); now
each is a v2 flow id on the two slices themselves and every pair has its arrow. Checked on the raw JSON of
the output and in the UI's own engine."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import perfetto_ui
import pytest
from click.testing import CliRunner
from conftest import shared_trace

from traceaug.cli import main

perfetto_ui.require(__file__)

DELTA = ("delta_ns", 1)  # diff --format csv's per-step delta column and its ns per unit
TOP = 4
PAIRS = {"h100_runs": ("a/trace.json.gz", "b/trace.json.gz"), "a100_vs_v100": ("control", "test")}
LOSS_SQL = """
SELECT name, SUM(value) AS value FROM stats
WHERE value > 0 AND severity IN ('error', 'data_loss') GROUP BY name
"""
ARROWS_SQL = """
WITH op AS (SELECT s.id, s.ts, s.name, p.name AS process FROM slice s JOIN thread_track k ON s.track_id = k.id
            JOIN thread t USING (utid) JOIN process p USING (upid))
SELECT o.process AS out_process, o.name AS out_name, o.ts AS out_ts, i.process AS in_process,
       i.name AS in_name, i.ts AS in_ts
FROM flow f JOIN op o ON o.id = f.slice_out JOIN op i ON i.id = f.slice_in
WHERE substr(o.process, 1, 3) != substr(i.process, 1, 3)
"""
DELTA_SQL = """
SELECT t.name, MIN(c.value) AS lo, MAX(c.value) AS hi FROM counter c
JOIN counter_track t ON c.track_id = t.id WHERE t.name GLOB 'Δ ns/step *' GROUP BY t.name
"""
PATH_SQL = DELTA_SQL.replace("Δ ns/step", "Δ path ns/step")
STEPS_SQL = """
SELECT substr(p.name, 1, 1) AS side, s.ts, s.dur FROM slice s JOIN thread_track k ON s.track_id = k.id
JOIN thread t USING (utid) JOIN process p USING (upid) WHERE s.name GLOB 'ProfilerStep#*' AND s.depth = 0
ORDER BY s.ts
"""
LANES_SQL = """
SELECT p.name, COUNT(*) AS n FROM slice s
JOIN process_track t ON t.id = s.track_id JOIN process p USING (upid)
WHERE p.name GLOB '?: Critical path' GROUP BY p.name
"""
WINDOW_JS = """() => { const w = window.app.trace.timeline.visibleWindow.toTimeSpan();
  return [Number(w.start), Number(w.end)]; }"""


def top_changes(rows: list[dict]) -> list[dict]:
    """The rows ``diff`` shows as top regressions then improvements (largest |delta| first, not unchanged)."""
    changed = [r for r in rows if r["status"] != "unchanged"]
    return ([r for r in changed if float(r[DELTA[0]]) > 0][:TOP]
            + [r for r in changed if float(r[DELTA[0]]) < 0][:TOP])


def second_step(path: Path) -> tuple[list[dict], dict]:
    """A raw trace's events (or the one trace's of a directory) and its second ProfilerStep."""
    with gzip.open(path if path.is_file() else next(path.iterdir())) as f:
        events = json.load(f)["traceEvents"]
    return events, sorted((e for e in events if str(e.get("name")).startswith("ProfilerStep#")),
                          key=lambda e: e["ts"])[1]


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_diff_view(browser, tmp_path: Path, pair: str) -> None:
    folder = shared_trace(f"kineto/diff/{pair}")
    a, b = (folder / p for p in PAIRS[pair])
    merged = tmp_path / "merged.json.gz"
    r = CliRunner().invoke(main, ["diff", str(a), str(b), "--trace", str(merged), "--step-index", "1",
                                  "--top", str(TOP), "--format", "csv"])
    assert r.exit_code == 0, r.output
    top = top_changes(list(csv.DictReader(io.StringIO(r.stdout.split("\n\n")[-1].strip()))))
    with gzip.open(merged) as f:
        events = json.load(f)["traceEvents"]
    # the raw JSON: each arrow is one op of a top change in A and the same op in B, carrying one flow id
    # (v2: on the slice itself, so it binds there whatever the op's thread has open), min(count_a, count_b)
    # per change (the compared step's counts)
    ends: dict = {}
    for e in events:
        if "bind_id" in e:
            ends.setdefault(e["bind_id"], []).append(e)
    linked = Counter()
    pairs = []  # (name, ts of the op the arrow leaves, of the one it enters) in µs
    for ops in ends.values():
        assert len(ops) == 2 and ops[0]["name"] == ops[1]["name"] and ops[0]["ph"] == ops[1]["ph"] == "X"
        assert sorted(o["pid"] >= 10**9 for o in ops) == [False, True]  # one in A, one in B
        assert sorted(o.get("flow_out", False) for o in ops) == [False, True]
        assert sorted(o.get("flow_in", False) for o in ops) == [False, True]
        linked[ops[0]["name"]] += 1
        pairs.append((ops[0]["name"], *(o["ts"] for o in sorted(ops, key=lambda o: not o.get("flow_out")))))
    want = Counter({row["key"]: int(min(float(row["count_a"]), float(row["count_b"]))) for row in top})
    assert sum(want.values()) > 0 and linked == +want
    with perfetto_ui.TraceServer(merged) as server, perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        assert state["ready"] and not ui.errors(), ui.errors()
        ui.wait_idle()
        assert ui.query(LOSS_SQL) == []
        names = {p["name"] for p in ui.query("SELECT name FROM process WHERE name IS NOT NULL")}
        assert {n[:3] for n in names} == {"A: ", "B: ", "Δ p"}  # every process labelled
        arrows = ui.query(ARROWS_SQL)  # every matched pair has its arrow, between the matched ops
        assert [x for x in arrows if x["out_name"] != x["in_name"]] == []
        assert Counter(x["out_name"] for x in arrows) == +want
        for x in arrows:  # each between the two ops of one pair (the UI's ns: doubles of the µs text)
            pairs.remove(next(p for p in pairs if p[0] == x["out_name"] and abs(p[1] * 1000 - x["out_ts"])
                              < 1000 and abs(p[2] * 1000 - x["in_ts"]) < 1000))
        deltas = {row["name"]: (row["lo"], row["hi"]) for row in ui.query(DELTA_SQL)}
        assert len(deltas) == len(top)
        for name, (lo, hi) in deltas.items():
            row = top[int(re.match(r"Δ ns/step (\d+) ", name)[1]) - 1]
            assert name.split()[3] == row["device"]
            assert lo == hi == pytest.approx(float(row[DELTA[0]]) * DELTA[1], rel=1e-9, abs=1e-3)
        assert sorted(n for n in ui.pinned() if n.startswith("Δ ns/step ")) == sorted(deltas)
        if pair == "h100_runs":  # the critical paths' split per category: diff --explain's of the step
            numbers = [second_step(side)[1]["name"].removeprefix("ProfilerStep#") for side in (a, b)]
            r = CliRunner().invoke(main, ["diff", str(a), str(b), "--explain", "--step-a", numbers[0],
                                          "--step-b", numbers[1], "--format", "csv"])
            split = {row["category"]: float(row["delta_ns"]) for row in csv.DictReader(io.StringIO(r.stdout))
                     if row["section"] == "category" and (float(row["a_ns"]) or float(row["b_ns"]))}
            shown = {row["name"].removeprefix("Δ path ns/step "): row["lo"] for row in ui.query(PATH_SQL)}
            assert shown == pytest.approx(split) and split
            assert {f"Δ path ns/step {c}" for c in split} <= set(ui.pinned())
        lanes = {row["name"]: row["n"] for row in ui.query(LANES_SQL)}  # both critical paths, whole
        assert lanes == {f"{side}: Critical path": sum(
            1 for e in events if e.get("ph") in ("b", "n") and e.get("cat") == "critical_path"
            and e["pid"] == next(m["pid"] for m in events if m.get("ph") == "M"
                                 and m.get("args", {}).get("name") == f"{side}: Critical path"))
            for side in "AB"}
        assert min(lanes.values()) > 0
        assert set(lanes) <= set(ui.pinned_on_screen()), ui.pinned_on_screen()
        steps = ui.query(STEPS_SQL)
        step = {side: [s for s in steps if s["side"] == side][1] for side in "AB"}  # --step-index 1
        assert step["A"]["ts"] == pytest.approx(step["B"]["ts"], abs=1000)  # one origin (the UI's doubles)
        start, end = ui.page.evaluate(WINDOW_JS)
        longest = max(s["dur"] for s in step.values())
        assert start == pytest.approx(step["A"]["ts"], abs=longest / 50)
        assert end == pytest.approx(step["A"]["ts"] + longest, abs=longest / 50)


class PairServer(perfetto_ui.TraceServer):
    """``traceaug diff A B --side-by-side --no-browser`` (or ``args``) as a subprocess: the URLs it prints
    for the traces ``names``."""

    def __init__(self, a: Path, b: Path, args: tuple = ("diff", "--side-by-side"),
                 names: tuple = ("A.json.gz", "B.json.gz")) -> None:
        super().__init__(Path(names[0]))
        self.args = [args[0], str(a), str(b), *args[1:], "--no-browser"]
        self.names, self.urls = names, []

    def __enter__(self) -> PairServer:
        self.proc = subprocess.Popen([sys.executable, "-m", "traceaug", *self.args], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        try:
            for name in self.names:
                self.announced = name
                self.urls.append(self._wait_for_url())
        except BaseException:
            self.stop()
            raise
        return self


MOVE_JS = """([s, e]) => window.app.trace.timeline.setViewportTime(BigInt(s), BigInt(e))"""


def test_side_by_side_syncs_the_viewport(browser) -> None:
    """Two windows, one trace each (A, B), each on the compared step; moving one moves the other."""
    folder = shared_trace("kineto/diff/h100_runs")
    with PairServer(folder / "a" / "trace.json.gz", folder / "b" / "trace.json.gz") as server, \
            perfetto_ui.PerfettoPage(browser, server.urls[0]) as ua, \
            perfetto_ui.PerfettoPage(browser, server.urls[1], ua.context) as ub:
        for ui in (ua, ub):
            state = ui.open()
            assert state["ready"] and not ui.errors(), ui.errors()
            ui.wait_idle()
            assert ui.query(LOSS_SQL) == []
        names = [{p["name"][:3] for p in ui.query("SELECT name FROM process WHERE name IS NOT NULL")}
                 for ui in (ua, ub)]
        assert names == [{"A: "}, {"B: "}]
        start, end = ua.page.evaluate(WINDOW_JS)
        assert ub.page.evaluate(WINDOW_JS) == pytest.approx([start, end], abs=(end - start) / 100)
        for mover, follower, shift in ((ua, ub, (end - start) // 3), (ub, ua, -(end - start) // 5)):
            was = mover.page.evaluate(WINDOW_JS)
            want = [int(was[0]) + shift, int(was[1]) + shift]
            mover.page.evaluate(MOVE_JS, want)
            follower.page.wait_for_function(
                f"() => Math.abs(Number(window.app.trace.timeline.visibleWindow.toTimeSpan().start)"
                f" - {want[0]}) < {(end - start) / 100}", timeout=20_000)
            assert follower.page.evaluate(WINDOW_JS) == pytest.approx(want, abs=(end - start) / 100)


def test_open_pair_serves_a_temporary_merged_trace() -> None:
    """``traceaug open A B`` (``diff A B --open``): the merged trace written to a temporary directory,
    served, and removed on Ctrl-C."""
    folder = shared_trace("kineto/diff/h100_runs")
    before = set(Path(tempfile.gettempdir()).glob("traceaug-diff-*"))
    with PairServer(folder / "a" / "trace.json.gz", folder / "b" / "trace.json.gz", ("open",),
                    ("diff.json.gz",)) as server:
        url = urllib.parse.unquote(re.search(r"url=([^&]+)", server.urls[0])[1])
        with urllib.request.urlopen(url, timeout=30) as r:
            events = json.loads(gzip.decompress(r.read()))["traceEvents"]
        assert any("bind_id" in e for e in events)
        made = set(Path(tempfile.gettempdir()).glob("traceaug-diff-*")) - before
        assert any((p / "diff.json.gz").exists() for p in made)
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(timeout=30) == 130
    assert not any(p.exists() for p in made)
