"""Outputs the Perfetto UI shows in full (``rewrite.visible``, ``read.ui_import``).

What: the v52 engine the UI runs, fed a file's bytes as they are (no traceaug normalizer,
as the UI does), drops exactly the events ``ui_import.as_is`` predicts; a ``counters`` output
loads in that engine with no error or data-loss stat and every kernel, memcpy, memset and
runtime call of the raw JSON; only the moved events' bytes (and negative tids) differ from
the input; ``--keep-bytes`` gives today's bytes exactly (gzip stream included); a second run
changes nothing. A generated trace checks the moves against answers known by construction.

Why: the UI reads the file as written; these checks run the UI's own importer without a
browser (tests/test_browser_visible.py opens the same outputs in the real UI).
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from conftest import shared_trace
from rawjson import _KIND_OF, events_by_kind

import traceaug
from traceaug.cli import main
from traceaug.engine.backend import TraceProcessor
from traceaug.read import chunks, normalize, source, ui_import
from traceaug.read.rebase import fix_negative_tids
from traceaug.rewrite import pgzip, splice, visible

A100 = "kineto/a100_rank0_of16_6streams.json.gz"
B200 = "kineto/b200_rank0_of8_allgather.json.gz"
V100_NS = "kineto/v100_ns_resolution.json.gz"
SIMPLE_ADD = "kineto/a100_simple_add_cuda_sync.json.gz"  # 7 overlaps and negative tids, small
LOSS_SQL = ("SELECT name, SUM(value) AS value FROM stats WHERE value > 0 "
            "AND severity IN ('error', 'data_loss') GROUP BY name")
CATEGORY_SQL = "SELECT category, COUNT(*) AS n FROM slice GROUP BY category"


def ui_engine(path: Path) -> TraceProcessor:
    """The v52 engine fed the file's bytes as they are, as the Perfetto UI feeds its own."""
    tp = TraceProcessor()
    for block in source.iter_blocks(path):
        tp.backend.parse([block])
    tp.backend.notify_eof()
    return tp


def losses(tp: TraceProcessor) -> dict[str, int]:
    return {r.name: int(r.value) for r in tp.query(LOSS_SQL)}


def kind_counts(tp: TraceProcessor) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in tp.query(CATEGORY_SQL):
        kind = _KIND_OF.get(r.category)
        if kind is not None and kind != "cpu_op":
            out[kind] = out.get(kind, 0) + int(r.n)
    return out


def counters(src: Path, dst: Path, *extra: str) -> None:
    result = CliRunner().invoke(main, ["counters", str(src), str(dst), *extra])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("rel, dropped, negative", [
    (A100, 25, 177), (B200, 42, 0), (V100_NS, 774, 58), (SIMPLE_ADD, 7, 5)])
def test_predicted_drops_are_the_ui_engines(rel: str, dropped: int, negative: int) -> None:
    path = shared_trace(rel)
    plan = normalize.plan(path, kind="gpu", workers=0)
    predicted = ui_import.as_is(plan.ui, plan.base_ns)
    tp = ui_engine(path)
    try:
        assert losses(tp) == {"slice_drop_overlapping_complete_event": dropped}
    finally:
        tp.close()
    assert predicted["dropped"] == dropped
    assert predicted["negative_tid_slices"] == negative


@pytest.mark.parametrize("rel, suffix", [(B200, ".json"), (V100_NS, ".json.gz")])  # A100: browser
def test_counters_output_loses_nothing_in_the_ui_engine(rel: str, suffix: str, tmp_path: Path) -> None:
    src = shared_trace(rel)
    out = tmp_path / f"out{suffix}"
    counters(src, out)
    want = {kind: len(v) for kind, v in events_by_kind(src).items() if kind != "cpu_op"}
    assert want["kernel"] > 700
    tp = ui_engine(out)
    try:
        assert losses(tp) == {}
        assert kind_counts(tp) == want
    finally:
        tp.close()


def _events_text(path: Path) -> tuple[bytes, list[bytes], dict]:
    """The file's text, its events' texts and its header (marker included)."""
    text = source.read_all(path)
    layout, head, rest = chunks.split_header([text])
    obj = orjson.loads(text)
    body = b"".join(rest)
    spans = visible.event_spans(body, len(obj["traceEvents"]), len(obj["traceEvents"]))
    return text, [body[s:e] for s, e in spans], {k: v for k, v in obj.items() if k != "traceEvents"}


def test_only_moved_events_change(tmp_path: Path) -> None:
    src = shared_trace(SIMPLE_ADD)
    out = tmp_path / "out.json"
    counters(src, out)
    _, before, _ = _events_text(src)
    _, after, header = _events_text(out)
    entries = {e["name"]: e for e in header["traceaug"]["rewriters"]}
    ui = entries[visible.NAME]
    added = ui["events"] + entries["counters"]["events"]
    assert ui["events"] == 1  # one lane thread's name
    assert ui["negative_tid_threads"] and all(t < 0 for _p, t in ui["negative_tid_threads"])
    moved = dict(map(tuple, ui["moved_to_lanes"]["events"]))
    assert (ui["moved_to_lanes"]["slices"], ui["moved_to_lanes"]["flows"]) == (7, 7)
    assert len(moved) == 14
    assert len(after) == len(before) + added
    lanes = {(e["pid"], e["tid"]) for e in map(orjson.loads, after[:ui["events"]])}
    for i, (old, new) in enumerate(zip(before, after[added:])):
        if i not in moved:
            assert new == fix_negative_tids(old), i  # byte for byte, tids aside
            continue
        o, n = orjson.loads(old), orjson.loads(new)
        assert n["tid"].endswith(f" [overlap lane {moved[i]}]") and (o["pid"], n["tid"]) in lanes
        if o["ph"] == "X":
            assert n["args"] == {"traceaug_lane": moved[i], "traceaug_tid": o["tid"] & 0xFFFFFFFF,
                                 **o.get("args", {})}
            o["args"] = n["args"]
        o["tid"] = n["tid"]
        assert n == o  # nothing else changed
        assert old.count(b'"ts"') == 1 and old[old.index(b'"ts"'):].split(b",")[0] in new  # ts text kept


def test_keep_bytes_is_todays_output_byte_for_byte(tmp_path: Path) -> None:
    """Today's writer: the header, marker and added events deflated in parallel pieces, then
    the input's text after the ``[`` as one deflate stream, in one gzip member."""
    src = shared_trace(SIMPLE_ADD)
    out = tmp_path / "out.json.gz"
    counters(src, out, "--keep-bytes")
    raw = source.read_all(src)
    layout, _head, _rest = chunks.split_header([raw])
    text = gzip.decompress(out.read_bytes())
    body = raw[layout.events_start:]
    assert text.endswith(body)
    start = text[: len(text) - len(body)]
    assert b'"name":"ui-visible"' not in start
    pieces: list[bytes] = []
    head = pgzip.ParallelDeflate(pieces.append, splice.GZIP_LEVEL)
    head.write(start)
    crc, size = head.close()
    stream = zlib.compressobj(splice.GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    today = (pgzip.HEADER + b"".join(pieces) + stream.compress(body) + stream.flush()
             + pgzip.trailer(zlib.crc32(body, crc), size + len(body)))
    assert out.read_bytes() == today
    tp = ui_engine(out)
    try:
        assert losses(tp) == {"slice_drop_overlapping_complete_event": 7}  # today's loss
    finally:
        tp.close()


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    src = shared_trace(SIMPLE_ADD)
    once, twice = tmp_path / "once.json.gz", tmp_path / "twice.json.gz"
    counters(src, once)
    counters(once, twice)
    assert gzip.decompress(twice.read_bytes()) == gzip.decompress(once.read_bytes())


def _generated(path: Path) -> None:
    """Stream 7 of GPU 0: A [0, 10), B [5, 15) and C [6, 20) µs partly overlap (the UI keeps
    A, drops B and C; on lane 1 B stays and C clashes again: lane 2), a flow end at B's start;
    thread -5 of pid 10 (the UI folds it into thread 10, where it clashes with D)."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
        {"ph": "X", "cat": "kernel", "name": "A", "pid": 0, "tid": 7, "ts": 0, "dur": 10},
        {"ph": "X", "cat": "kernel", "name": "B", "pid": 0, "tid": 7, "ts": 5, "dur": 10,
         "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "C", "pid": 0, "tid": 7, "ts": 6, "dur": 14},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 5, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "s", "id": 1, "pid": 10, "tid": -5, "ts": 4, "cat": "ac2g", "name": "ac2g"},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": -5,
         "ts": 4, "dur": 3},
        {"ph": "X", "cat": "cpu_op", "name": "D", "pid": 10, "tid": 10, "ts": 2, "dur": 4},
    ]
    path.write_text("{\n \"traceEvents\": [\n  " + ",\n  ".join(json.dumps(e) for e in events)
                    + "\n ]\n}\n")


def test_generated_trace_moves_what_is_known(tmp_path: Path) -> None:
    src, out = tmp_path / "t.json", tmp_path / "out.json"
    _generated(src)
    plan = normalize.plan(src, kind="gpu", workers=0)
    assert ui_import.as_is(plan.ui, plan.base_ns) == {
        "dropped": 3, "negative_tid_slices": 1, "negative_tid_threads": 1}  # B, C and the call
    counters(src, out)
    got = orjson.loads(out.read_bytes())
    by_name = {e["name"]: e for e in got["traceEvents"] if e["ph"] == "X"}
    assert by_name["A"]["tid"] == 7
    lane1, lane2 = "stream 7 [overlap lane 1]", "stream 7 [overlap lane 2]"
    assert by_name["B"]["tid"] == lane1
    assert by_name["B"]["args"] == {"traceaug_lane": 1, "traceaug_tid": 7, "stream": 7}
    assert by_name["C"]["tid"] == lane2
    assert by_name["cudaLaunchKernel"]["tid"] == 2**32 - 5
    flow_end = next(e for e in got["traceEvents"] if e["ph"] == "f")
    assert flow_end["tid"] == lane1
    lanes = {e["tid"]: e["args"]["name"] for e in got["traceEvents"]
             if e["ph"] == "M" and isinstance(e["tid"], str)}
    assert lanes == {lane1: lane1, lane2: lane2}
    for path, lost in ((src, 3), (out, 0)):
        tp = ui_engine(path)
        try:
            assert sum(losses(tp).values()) == lost
            assert int(next(iter(tp.query("SELECT COUNT(*) AS n FROM slice"))).n) == 5 - lost
            assert int(next(iter(tp.query("SELECT COUNT(*) AS n FROM flow"))).n) == 1
        finally:
            tp.close()
    with traceaug.load(out, kind="full", progress=False) as t:  # traceaug folds the lanes back
        t.include("traceaug.base")
        ops = t.columns("SELECT name, stream FROM traceaug_gpu_op ORDER BY name")
        threads = t.columns("SELECT DISTINCT name FROM thread WHERE name GLOB '*overlap lane*' "
                            "ORDER BY name")
    assert ops["name"].tolist() == ["A", "B", "C"] and ops["stream"].tolist() == [7, 7, 7]
    assert threads["name"].tolist() == [lane1, lane2]  # and the UI shows those names
    for path in (out,):
        tp = ui_engine(path)
        try:
            names = [r.name for r in tp.query("SELECT name FROM thread WHERE name GLOB '*lane*' "
                                              "ORDER BY name")]
            assert names == [lane1, lane2]
        finally:
            tp.close()


def test_info_says_what_the_ui_drops(tmp_path: Path) -> None:
    src = shared_trace(A100)
    runner = CliRunner()
    result = runner.invoke(main, ["info", str(src), "--format", "json"])
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.output) if result.output.lstrip().startswith("[") else [
        json.loads(result.output)]
    assert record["warnings"] == []  # traceaug's own load keeps every event
    assert record["perfetto_ui"] == [
        "data_loss: slice_drop_overlapping_complete_event = 25 (complete events partly "
        "overlapping on their thread)",
        "177 complete events on 2 negative thread ids folded into their process's main thread"]
    table = runner.invoke(main, ["info", str(src)]).output
    assert "in the Perfetto UI: data_loss: slice_drop_overlapping_complete_event = 25" in table
    out = tmp_path / "out.json.gz"
    counters(src, out)
    result = runner.invoke(main, ["info", str(out)])
    assert result.exit_code == 0 and "perfetto_ui     none" in result.output


def test_gzip_output_has_the_plain_outputs_text(tmp_path: Path) -> None:
    """The gzip copy deflates segments as the text streams and redoes those holding moves
    (inflated again, tids shifted); the plain copy edits the input as it reads it."""
    src = shared_trace(A100)
    gz, plain = tmp_path / "out.json.gz", tmp_path / "out.json"
    counters(src, gz)
    counters(src, plain)
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    text = d.decompress(gz.read_bytes())  # one gzip member, CRC and length checked
    assert d.eof and d.unused_data == b""
    assert text == plain.read_bytes()
    assert text.count(b"stream 27  [overlap lane 1]") == 2 + 2  # metadata (tid, name), slice, flow end
