"""Files traceaug writes, opened in the Perfetto UI it serves (v52), in headless Chromium.

What: for each rewriter case, write OUT with traceaug into tmp_path, serve it with
``python -m traceaug open OUT --no-browser``, open the printed URL in Debian's Chromium
(Playwright; only 127.0.0.1 is reachable) and check, in the UI itself:

* the trace loaded, with no alert and no error modal;
* every track the rewriter added (names from traceaug's own engine) is in the UI's track list;
* SQL in the UI's engine gives traceaug's numbers: counter rows (and their sum) per added
  track, slices and flows.

A truncated trace must show the UI's error instead, and the A100 counters output is
photographed (the counter tracks expanded, one pinned) into tmp_path; the README's image,
docs/counters_in_perfetto.png, is replaced by it only on purpose: TRACEAUG_UPDATE_DOCS=1.

Why: the JSON we write is read by two importers, traceaug's embedded trace_processor and the UI's;
only this suite shows that users see in the UI what ``traceaug query`` reports.

New rewriters join as one more ``Case`` in CASES. Without /usr/bin/chromium or the playwright
package the module is skipped (with the reason as a warning too), except under CI (CI=true),
where that is a failure.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import perfetto_ui
import pytest
from conftest import ROOT, run_cli, shared_trace

import traceaug

SCREENSHOT = ROOT / "docs" / "counters_in_perfetto.png"  # the README's; see photograph()

perfetto_ui.require(__file__)

# Per counter track name: rows and the sum of values (the same SQL in both engines).
COUNTERS_SQL = """
SELECT ct.name AS name, COUNT(c.id) AS n, TOTAL(c.value) AS total
FROM counter_track ct LEFT JOIN counter c ON c.track_id = ct.id
GROUP BY ct.name ORDER BY ct.name
"""
TOTALS_SQL = "SELECT (SELECT COUNT(*) FROM slice) AS slices, (SELECT COUNT(*) FROM flow) AS flows"
# The UI's importer errors; traceaug's loader keeps events that the UI drops (see test_case).
UI_ERRORS_SQL = """
SELECT name, SUM(value) AS value FROM stats
WHERE value > 0 AND severity IN ('error', 'data_loss') GROUP BY name
"""
OVERLAP_DROPS = "slice_drop_overlapping_complete_event"


# Per process of B in a `diff --trace` file: slices and their total duration, named as the UI
# names process groups ("<name> <pid>"); only B's numeric pids, which traceaug itself moved.
B_PROCESSES_SQL = """
SELECT p.name || ' ' || p.pid AS name, COUNT(s.id) AS n, TOTAL(s.dur) AS total
FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread USING (utid)
JOIN process p USING (upid)
WHERE p.name GLOB 'B: *' AND p.pid >= 1000000000
GROUP BY p.upid ORDER BY name
"""


def counters_command(src: Path, dst: Path) -> list[str]:
    return ["counters", str(src), str(dst)]


def diff_trace_command(src: Path, dst: Path) -> list[str]:
    """`traceaug diff A B --trace OUT` on the tiny pair (src = A; neither side has overlaps the
    UI would drop, so B's processes compare slice for slice)."""
    return ["diff", str(src), str(src.parents[1] / "tiny_test" / "test.json.gz"), "--trace", str(dst)]


def is_b_process(name: str) -> bool:
    return name.startswith("B: ")


def is_counters_track(name: str) -> bool:
    """The traceaug-style tracks `traceaug counters` adds (SQL: GLOB 'Queue length*' OR ...)."""
    return name.startswith(("Queue length", "Bandwidth (GB/s)"))


@dataclass(frozen=True)
class Case:
    """One rewriter run: traceaug ARGS (from IN, OUT) on a real trace, and which tracks it adds."""

    id: str
    trace: str  # relative to ../shared/traces
    command: Callable[[Path, Path], list[str]]
    is_added: Callable[[str], bool]  # a counter_track name the rewriter added
    screenshot: Path | None = None  # the README image this case's photograph may replace
    pin: str | None = None  # the track pinned for the screenshot
    added_sql: str = ""  # name, n, total of what was added (default: COUNTERS_SQL)

    def output_name(self) -> str:
        return Path(self.trace).name.removesuffix(".json.gz") + f".{self.id}.json.gz"


CASES = [
    Case("counters-a100", "kineto/a100_rank0_of16_6streams.json.gz", counters_command, is_counters_track,
         screenshot=SCREENSHOT, pin="Queue length stream   7"),
    Case("counters-b200", "kineto/b200_rank0_of8_allgather.json.gz", counters_command, is_counters_track),
    Case("counters-v100", "kineto/diff/v100_resnet50_2021/a/worker0.1623143089861.pt.trace.json.gz",
         counters_command, is_counters_track),
    Case("diff-trace-tiny", "kineto/diff/tiny_base/base.json.gz", diff_trace_command, is_b_process,
         added_sql=B_PROCESSES_SQL),
]


def run_traceaug(args: list[str]) -> None:
    result = run_cli(*args)
    assert result.returncode == 0, f"traceaug {' '.join(args)} failed:\n{result.stderr}"


def traceaug_numbers(path: Path, case: Case) -> tuple[dict, dict]:
    """From traceaug's own engine: {added track: (rows, sum)} and {slices, flows}."""
    t = traceaug.load(path, progress=False, full=True)
    try:
        per_track = {r.name: (int(r.n), float(r.total))
                     for r in t.query(case.added_sql or COUNTERS_SQL).itertuples() if case.is_added(r.name)}
        totals = {k: int(v) for k, v in t.query(TOTALS_SQL).iloc[0].items()}
    finally:
        t.close()
    return per_track, totals


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, browser, tmp_path: Path) -> None:
    src = shared_trace(case.trace)
    out = tmp_path / case.output_name()
    run_traceaug(case.command(src, out))
    assert out.is_file(), f"traceaug {case.command(src, out)} wrote no {out}"
    want_tracks, want_totals = traceaug_numbers(out, case)
    assert want_tracks, f"traceaug's engine sees no added track in {out.name}"

    with perfetto_ui.TraceServer(out) as server, perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        assert not ui.errors(), f"the UI showed an error on {out.name}: {ui.errors()}"
        assert state["ready"], f"the UI did not load {out.name}: {state}"

        # Every added track is in the UI's track list, with a renderer behind it.
        tracks = {t["name"]: t for t in ui.tracks()}
        absent = sorted(set(want_tracks) - set(tracks))
        assert not absent, f"added tracks missing from the UI's track list: {absent}; UI has {sorted(tracks)}"
        unrendered = sorted(n for n in want_tracks if not tracks[n]["registered"])
        assert not unrendered, f"tracks listed but with no renderer in the UI: {unrendered}"

        # The UI's engine reads the added counters exactly as traceaug's does.
        got_tracks = {r["name"]: (r["n"], r["total"]) for r in ui.query(case.added_sql or COUNTERS_SQL)
                      if case.is_added(r["name"])}
        assert set(got_tracks) == set(want_tracks), "the engines see different added counter tracks"
        for name, (n, total) in want_tracks.items():
            got_n, got_total = got_tracks[name]
            assert got_n == n, f"{name}: UI has {got_n} counter rows, traceaug {n}"
            assert got_total == pytest.approx(total, rel=1e-9, abs=1e-9), f"{name}: sum of values"

        # Slices and flows. The UI's JSON importer drops complete events that overlap on a
        # thread (stat slice_drop_overlapping_complete_event: 25 on the A100, 42 on the B200
        # trace); traceaug's loader keeps them, so every slice is in the UI or in that stat.
        (got_totals,) = ui.query(TOTALS_SQL)
        ui_errors = {r["name"]: r["value"] for r in ui.query(UI_ERRORS_SQL)}
        drops = ui_errors.pop(OVERLAP_DROPS, 0)
        assert not ui_errors, f"the UI's importer reported errors on {out.name}: {ui_errors}"
        assert got_totals["slices"] > 0, f"the UI's engine has no slice in {out.name} (empty or 404?)"
        assert got_totals["slices"] + drops == want_totals["slices"], (
            f"slices: UI {got_totals['slices']} + {drops} dropped overlapping != traceaug "
            f"{want_totals['slices']}")
        assert got_totals["flows"] == want_totals["flows"], (
            f"flows: UI {got_totals['flows']}, traceaug {want_totals['flows']}")

        if case.screenshot is not None:
            names = sorted(want_tracks, key=lambda n: (not n.startswith("Queue"), len(n), n))
            shown = ui.show_tracks(names, pin=case.pin)
            assert case.pin is None or case.pin in shown["pinned"], f"could not pin {case.pin}: {shown}"
            hidden = [name for name in names[:3] if not ui.shows_text(name)]
            assert not hidden, f"track titles not on screen after show_tracks: {hidden}"
            photograph(ui, tmp_path / case.screenshot.name, case.screenshot)


def photograph(ui, shot: Path, readme_image: Path) -> None:
    """Screenshot into ``shot`` (tmp_path); copy it over the README's image only when
    TRACEAUG_UPDATE_DOCS=1: a test run never writes into the source tree by itself."""
    before = readme_image.stat().st_mtime_ns if readme_image.exists() else None
    ui.screenshot(shot)
    assert shot.stat().st_size > 50_000, f"{shot} looks blank"
    if os.environ.get("TRACEAUG_UPDATE_DOCS") == "1":
        readme_image.write_bytes(shot.read_bytes())
    else:
        after = readme_image.stat().st_mtime_ns if readme_image.exists() else None
        assert after == before, f"{readme_image} was rewritten without TRACEAUG_UPDATE_DOCS=1"


def test_truncated_trace_shows_the_ui_error(browser, tmp_path: Path) -> None:
    src = shared_trace(CASES[0].trace)
    with gzip.open(src, "rb") as f:
        data = f.read()
    bad = tmp_path / "truncated.json"
    bad.write_bytes(data[: len(data) // 2])

    with perfetto_ui.TraceServer(bad) as server, perfetto_ui.PerfettoPage(browser, server.url) as ui:
        state = ui.open()
        errors = ui.errors()
        assert errors, f"the UI showed no error for a truncated trace; state {state}"
        assert not state["ready"], f"the UI claims to have loaded a truncated trace: {state}"
        assert any("incomplete" in e for e in errors), f"unexpected error text: {errors}"
