"""``traceaug patterns IN OUT``: the command, its table, and OUT reloaded in the engine."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from conftest import TESTDATA, shared_trace

import traceaug
from traceaug.cli import main

PLANTED = TESTDATA / "patterns_planted.json"
ADDED_SQL = """
SELECT t.name AS thread, p.pid AS pid, s.name AS name, s.ts AS ts, s.dur AS dur,
       s.arg_set_id AS arg_set_id
FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid)
JOIN process p USING (upid) WHERE s.category = 'traceaug_patterns'
"""
ERRORS_SQL = ("SELECT name, idx, value FROM stats WHERE severity IN ('error', 'data_loss') "
              "AND value > 0 ORDER BY name, idx")
INPUT_SLICES_SQL = ("SELECT name, ts, dur, COUNT(*) AS n FROM slice "
                    "WHERE category IS NOT 'traceaug_patterns' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def reload(path: Path) -> dict:
    """What the engine sees in a file: added slices (per thread), flows between them, stats
    errors, and every other slice (name, ts, dur, count)."""
    with traceaug.load(path, full=True, progress=False) as t:
        added = t.query(ADDED_SQL)
        dictionary = {
            r.name: dict(t.query(
                f"SELECT key, display_value FROM args WHERE arg_set_id = {int(r.arg_set_id)}"
            ).itertuples(index=False, name=None))
            for r in added[added["thread"] == "Kernel-name dictionary"].itertuples()}
        flows = int(t.query(
            "SELECT COUNT(*) AS n FROM flow f JOIN slice a ON f.slice_out = a.id "
            "JOIN slice b ON f.slice_in = b.id WHERE a.category = 'traceaug_patterns' "
            "AND b.category = 'traceaug_patterns' AND a.name = b.name")["n"][0])
        return {"added": added, "dictionary": dictionary, "flows": flows,
                "errors": t.query(ERRORS_SQL).values.tolist(),
                "slices": t.query(INPUT_SLICES_SQL).values.tolist()}


def _ns(text: bytes) -> int:
    """Exact ns of a µs number's text (``123.456``)."""
    whole, _, frac = text.decode().partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def flows_inside_slices(path: Path) -> int:
    """In the file's own text (exact ns, no engine): every added flow's ``s`` lies inside an
    added slice on its (pid, tid), and its ``f`` too; returns the number of arrows."""
    import re

    raw = gzip.open(path).read() if path.name.endswith(".gz") else path.read_bytes()
    events = orjson.loads(raw)["traceEvents"]
    stamps = [_ns(m) for m in re.findall(rb'"ts"\s*:\s*(-?[0-9.]+)', raw)]
    ts_of = iter(stamps)
    spans: dict[tuple, list[tuple[int, int]]] = {}
    ends = []
    for e in events:
        ts = next(ts_of) if "ts" in e else None
        if e.get("cat") != "traceaug_patterns":
            continue
        key = (e["pid"], e["tid"])
        if e["ph"] == "X":
            spans.setdefault(key, []).append((ts, ts + round(e["dur"] * 1000)))
        else:
            ends.append((key, ts))
    for key, ts in ends:
        assert any(a <= ts < b for a, b in spans.get(key, [])), (key, ts)
    return len(ends) // 2


def test_planted_overlay(tmp_path: Path) -> None:
    """Top 5 of each scope overlaid: one GPU-lane slice and one CPU slice per occurrence, a
    flow between the two, the dictionary, the input's slices unchanged, no new errors."""
    out = tmp_path / "planted.patterns.json"
    result = cli("patterns", str(PLANTED), str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = data["patterns"]
    answers = json.loads((TESTDATA / "patterns_planted.answers.json").read_text())
    assert len(rows) == sum(len(v) for v in answers.values())  # 6 whole, 3 operator, 4 stream
    top = [r for sc in ("whole", "operator", "stream") for r in [x for x in rows if x["scope"] == sc][:5]]
    assert len(top) == 12  # the sixth whole pattern (count 1) is not overlaid
    occurrences = sum(r["count"] for r in top)
    got, before = reload(out), reload(PLANTED)
    added = got["added"]
    gpu = added[added["thread"].str.startswith("Kernel patterns stream")]
    cpu = added[added["thread"].str.match(r"^Kernel patterns( \(\d+\))?$")]
    assert len(gpu) == occurrences and len(cpu) == occurrences
    assert set(gpu["thread"].str.replace(r" \(\d+\)$", "", regex=True)) == {
        "Kernel patterns stream 7", "Kernel patterns stream 20"}
    assert set(cpu["pid"]) == {4000} and set(gpu["pid"]) == {0}
    assert got["flows"] == occurrences == flows_inside_slices(out)
    p1 = next(r for r in rows if r["pattern"] == "P1")
    assert (gpu["name"] == "Pattern P1").sum() == p1["count"]
    # The dictionary: every kernel id used -> its full name, every pattern -> its kernel ids.
    kernels = got["dictionary"]["Kernel names"]
    seqs = got["dictionary"]["Pattern kernels"]
    assert {k.removeprefix("args.") for k in seqs} == {r["pattern"] for r in top}
    for r in top:
        assert seqs[f"args.{r['pattern']}"] == r["kernel_ids"]
        names = [kernels[f"args.{k}"] for k in r["kernel_ids"].split()]
        assert " | ".join(names) == r["kernels"]  # short names of these are the names; every one
    assert got["errors"] == before["errors"] == []
    assert got["slices"] == before["slices"]  # input events keep their names and times


def _short(name: str) -> str:
    """A kernel name without its template and argument lists, innermost first."""
    name = name.replace("->", "")
    while (less := re.sub(r"<[^<>()]*>|\([^<>()]*\)", "", name)) != name:
        name = less
    return " ".join(name.split())


def test_kernels_text_never_cut(tmp_path: Path) -> None:
    """A pattern of 13 kernels (the H100 BERT trace) named every one in CSV, JSON and the API: the
    ``kernels`` text was cut to 12 names and "… (+1)"; only the terminal cuts (to 80 characters).
    Expected: the 13 GPU ops on the stream from the raw trace's op at each occurrence's GPU start
    (engine ns: the file's own less ``time_base_ns``, the digits every timestamp shares)."""
    src = shared_trace("kineto/h100_bert_small_inference.json.gz")
    out = tmp_path / "p.json"
    (row,) = json.loads(cli("patterns", str(src), str(out), "--format", "json").stdout)["patterns"]
    raw = orjson.loads(gzip.decompress(src.read_bytes()))["traceEvents"]
    gpu = sorted((round(e["ts"] * 1000), e["args"]["stream"], e["name"]) for e in raw
                 if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    with traceaug.load(src, progress=False) as t:
        base = int(t.query("SELECT time_base_ns FROM traceaug_meta")["time_base_ns"][0])
    for start in row["occurrence_gpu_ts_ns"]:
        (at,) = [i for i, g in enumerate(gpu) if g[0] == start + base]
        run = [g[2] for g in gpu[at:] if g[1] == gpu[at][1]][:row["length"]]
        assert row["length"] == 13 and row["kernels"] == " | ".join(map(_short, run))
    csv_row = cli("patterns", str(src), str(out), "--format", "csv").stdout.splitlines()[1]
    assert row["kernels"] in csv_row
    assert traceaug.patterns(src, out, progress=False).patterns["kernels"].tolist() == [row["kernels"]]
    table = cli("patterns", str(src), str(out)).stdout
    cells = re.split(r"\s{2,}", table.splitlines()[-1].strip())
    assert row["kernels"] not in table and max(map(len, table.splitlines())) <= 160
    assert any(c.endswith("…") and row["kernels"].startswith(c[:-1]) for c in cells)


def test_a100_conv2d_overlay(tmp_path: Path) -> None:
    """The real A100 ResNet trace, gzip output: the top-5 whole patterns and top-5 stream
    patterns on the added threads, exactly their occurrences, and no new stats error."""
    src = shared_trace("kineto/a100_nccl_rank0_of2.json.gz")
    out = tmp_path / "resnet.patterns.json.gz"
    result = cli("patterns", str(src), str(out), "--operator", "aten::conv2d", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["patterns"]
    assert [r["count"] for r in rows if r["scope"] == "whole"] == [18, 18, 15, 9, 9, 3]
    top = [r for s in ("whole", "operator", "stream") for r in [x for x in rows if x["scope"] == s][:5]]
    with gzip.open(out) as f:
        head = f.read(200)
    assert head.startswith(b'{"traceaug":') or b'"traceaug"' in head
    got, before = reload(out), reload(src)
    added = got["added"]
    gpu = added[added["thread"].str.startswith("Kernel patterns stream")]
    for r in top:
        assert (gpu["name"] == f"Pattern {r['pattern']}").sum() == r["count"], r["pattern"]
    assert len(gpu) == sum(r["count"] for r in top)
    cpu_slices = len(added[added["thread"].str.match(r"^Kernel patterns( \(\d+\))?$")])
    assert got["flows"] == cpu_slices == flows_inside_slices(out)
    assert got["errors"] == before["errors"]
    assert got["slices"] == before["slices"]


def test_table_and_csv() -> None:
    result = cli("patterns", str(PLANTED), "--summary-only")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "6 whole, 3 operator, 4 stream" in lines[1]  # the heading's second line
    assert lines[2].split()[:3] == ["pattern", "scope", "operators"]
    assert len(lines) == 3 + 5 + 3 + 4  # top 5 whole, all 3 operator, all 4 stream
    csv = cli("patterns", str(PLANTED), "--summary-only", "--format", "csv", "--min-len", "4")
    rows = csv.stdout.splitlines()
    assert rows[0].startswith("pattern,scope,operators,kernel_ids,kernels,length,count")
    # min-len 4: x y x (3) gone from operator and stream, whole "mix: x y x" too
    assert not any(",x | y | x," in r for r in rows)


def test_python_api_dataframes() -> None:
    from traceaug.analysis.patterns import patterns

    with traceaug.load(PLANTED, progress=False) as t:
        table, occ = patterns(t, "block")
    ops = table[table["scope"] != "stream"]
    # one whole pattern; A sits in every B, so it is B (nothing mined in the operator scope)
    assert ops["count"].tolist() == [3] and ops["scope"].tolist() == ["whole"]
    first = occ[occ["pattern"] == ops["pattern"].iloc[0]]
    assert first["instance"].nunique() == 3 and first["start"].tolist() == [0, 0, 0]
    assert table[table["scope"] == "stream"]["count"].tolist() == [10, 6, 3, 3]

def test_top_level_function(tmp_path: Path) -> None:
    """traceaug.patterns: DataFrames with a rank column, and the files it wrote."""
    from traceaug.analysis.patterns import patterns

    with traceaug.load(PLANTED, progress=False) as t:
        table, _ = patterns(t, "block")
    got = traceaug.patterns(PLANTED, tmp_path / "o.json", operator="block", top_k=1)
    assert got.patterns["kernel_ids"].tolist() == table["kernel_ids"].tolist()
    assert got.patterns.columns[0] == "rank" and got.occurrences.columns[0] == "rank"
    assert got.written == [tmp_path / "o.json"] and got.written[0].is_file()
    assert traceaug.patterns(PLANTED).written == []


def test_moves_the_same_from_the_childs_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The events the Perfetto UI would drop are moved to lanes whether the plan came from
    the command line's forked pass-1 child (moves found while the engine loads) or from an
    in-process pass 1 (the API): the same bytes, the 7 overlaps of the trace moved."""
    from traceaug.read import prefetch

    src = shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")
    monkeypatch.setattr(prefetch, "FROM", 0)  # planned in a child, as a trace over 1 MB is
    child, api = tmp_path / "child.json", tmp_path / "api.json"
    took = []
    real_take = prefetch.take

    def take(path, kind):
        plan = real_take(path, kind)
        took.append(plan is not None)
        return plan

    prefetch.take = take
    try:
        assert cli("patterns", str(src), str(child)).exit_code == 0
    finally:
        prefetch.take = real_take
    assert took == [True]  # the child's plan was used
    traceaug.patterns(src, api)
    assert child.read_bytes() == api.read_bytes()
    marker = {r["name"]: r for r in orjson.loads(child.read_bytes())["traceaug"]["rewriters"]}
    assert marker["ui-visible"]["moved_to_lanes"]["slices"] == 7


@pytest.mark.parametrize("args", [("missing.json", "out.json"), ("IN", "IN")])
def test_bad_input_one_line_error(tmp_path: Path, args) -> None:
    src = tmp_path / "in.json"
    src.write_bytes(PLANTED.read_bytes())
    paths = [str(src) if a == "IN" else str(tmp_path / a) for a in args]
    result = CliRunner().invoke(main, ["patterns", *paths])
    assert result.exit_code == 1
    assert result.output.startswith("traceaug: error: ") and result.output.count("\n") == 1
    assert src.read_bytes() == PLANTED.read_bytes()
    assert not (tmp_path / "out.json").exists()


def test_events_are_compact_json(tmp_path: Path) -> None:
    """Added events are valid JSON objects with exact µs text and no Kineto category."""
    out = tmp_path / "o.json"
    assert cli("patterns", str(PLANTED), str(out), "--top-k", "1").exit_code == 0
    events = orjson.loads(out.read_bytes())["traceEvents"]
    ours = [e for e in events if e.get("cat") == "traceaug_patterns"]
    assert {e["ph"] for e in ours} == {"X", "s", "f"}
    assert all(isinstance(e["ts"], int | float) for e in ours)
    assert len(events) == len(orjson.loads(PLANTED.read_bytes())["traceEvents"]) + len(ours) + sum(
        1 for e in events if e.get("ph") == "M" and str(e.get("args", {}).get("name", "")).startswith(
            ("Kernel patterns", "Kernel-name dictionary")))


def test_chained_and_rerun(tmp_path: Path) -> None:
    """patterns after counters keeps the counters; patterns again replaces its own
    additions only (same overlay, once), and the marker lists both rewriters."""
    a, b, c = (tmp_path / n for n in ("a.json", "b.json", "c.json"))
    assert cli("counters", str(PLANTED), str(a)).exit_code == 0
    assert cli("patterns", str(a), str(b), "--top-k", "2").exit_code == 0
    assert cli("patterns", str(b), str(c), "--top-k", "2").exit_code == 0
    first, again = reload(b), reload(c)
    assert len(again["added"]) == len(first["added"]) > 0
    assert again["flows"] == first["flows"] > 0
    assert again["slices"] == first["slices"]
    marker = orjson.loads(c.read_bytes())["traceaug"]
    assert [r["name"] for r in marker["rewriters"]] == ["counters", "patterns"]
    assert marker["rewriters"][1]["options"]["top_k"] == 2
    with traceaug.load(c, full=True, progress=False) as t:
        tracks = t.query("SELECT COUNT(*) AS n FROM counter_track WHERE name GLOB 'Queue length*'")
    assert int(tracks["n"][0]) > 0


def test_rank_directory(tmp_path: Path) -> None:
    """A directory of ranks: one output per rank, the JSON summary a list by rank, the CSV
    with a rank column; --rank picks one."""
    src = shared_trace("kineto/multi_rank_sampled")
    out = tmp_path / "out"
    result = cli("patterns", str(src), str(out) + "/", "--format", "json", "--top-k", "1")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)["rows"]
    assert sorted(d["rank"] for d in data) == [0, 1]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in src.iterdir())
    for d in data:
        assert d["patterns"] and d["out"].startswith(str(out))
    one = cli("patterns", str(src), "--summary-only", "--rank", "1", "--format", "json")
    assert json.loads(one.stdout)["patterns"] == next(d for d in data if d["rank"] == 1)["patterns"]
    csv = cli("patterns", str(src), "--summary-only", "--format", "csv").stdout.splitlines()
    assert csv[0].startswith("rank,pattern,scope")
    assert {r.split(",")[0] for r in csv[1:]} == {"0", "1"}


def test_ns_resolution_exact(tmp_path: Path) -> None:
    """V100 trace with fractional epoch-µs timestamps: each GPU-lane slice of P1 starts at
    its occurrence's first GPU op and ends at its last one's end, to the nanosecond, after
    the round trip through the output file."""
    src = shared_trace("kineto/v100_ns_resolution.json.gz")
    with traceaug.load(src, kind="ops", progress=False) as t:
        from traceaug.analysis.patterns import compute

        found = compute(t, None, 3)
        base = t.base_ns
    o = found.occurrences
    want = sorted((int(a) + base, int(b) + base) for a, b, p in
                  zip(o["gpu_ts"], o["gpu_end"], o["pattern"], strict=True) if p == 1)
    assert any((a // 1000) * 1000 != a for a, _ in want)  # not whole µs: ns matter here
    out = tmp_path / "v100.json"
    assert cli("patterns", str(src), str(out), "--top-k", "1").exit_code == 0
    with traceaug.load(out, progress=False) as t:
        got = t.query("SELECT s.ts, s.dur FROM slice s JOIN thread_track tt ON s.track_id = tt.id "
                      "JOIN thread USING (utid) WHERE s.name = 'Pattern P1' "
                      "AND thread.name GLOB 'Kernel patterns stream*'")
        got_abs = sorted((int(a) + t.base_ns, int(a) + int(d) + t.base_ns)
                         for a, d in zip(got["ts"], got["dur"], strict=True))
    assert got_abs == want

