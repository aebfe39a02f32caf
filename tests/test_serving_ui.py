"""``traceaug serving IN OUT``: the phase lane and the graph-op lanes for the Perfetto UI, checked against the
raw JSON of the shared vLLM trace and its capture: a slice per step with its phase and batch in args, a slice
per replayed kernel at its exact time named after the op that captured it, nothing of IN dropped."""

from __future__ import annotations

from click.testing import CliRunner
from conftest import shared_trace
from rawjson import load_raw, ns
from test_serving_replay import CASES, raw_capture

import traceaug
from traceaug.cli import main

CATEGORY = "traceaug_serving"


def test_phase_and_graph_op_lanes(tmp_path):
    rel, capture, count = CASES[0]
    src, directory = shared_trace(rel), shared_trace(capture)
    out = tmp_path / "lanes.json"
    r = CliRunner().invoke(main, ["serving", str(src), str(out), "--capture", str(directory)])
    assert r.exit_code == 0, r.output
    assert f"{count} of {count} graph-replayed kernels attributed to their ops" in r.output
    before = load_raw(src)["traceEvents"]
    after = load_raw(out)["traceEvents"]
    added = [e for e in after if e.get("cat") == CATEGORY]
    assert len(after) - len(added) == len(before)  # nothing of IN dropped
    step = next(e for e in before if e.get("name", "").startswith("execute_"))
    lane = [e for e in added if e["tid"] == "Serving phases"]
    assert [(e["name"], ns(e["ts"]), ns(e["dur"]), e["pid"]) for e in lane] == \
        [("decode bs=32", ns(step["ts"]), ns(step["dur"]), step["pid"])]
    assert (lane[0]["args"]["phase"], lane[0]["args"]["batch"], lane[0]["args"]["context"]) == \
        ("decode", 32, 55086)
    launch = next(e for e in before if e.get("name") == "hipGraphLaunch")["args"]["correlation"]
    replayed = sorted((e for e in before if e.get("cat") == "kernel"
                       and e["args"]["correlation"] == launch), key=lambda e: ns(e["ts"]))
    ops = sorted((e for e in added if e["tid"] != "Serving phases"), key=lambda e: ns(e["ts"]))
    assert [(ns(e["ts"]), ns(e["dur"]), e["args"]["kernel"], e["pid"]) for e in ops] == \
        [(ns(k["ts"]), ns(k["dur"]), k["name"], k["pid"]) for k in replayed]
    assert [e["name"] for e in ops] == [op for _, op in raw_capture(directory)]
    assert {e["tid"] for e in ops} == {"stream 0 graph ops"}
    with traceaug.load(out, kind="full") as t:  # the engine (the UI's) keeps every added slice
        n = t.columns(f"SELECT COUNT(*) AS n FROM slice WHERE category = '{CATEGORY}'")["n"][0]
    assert n == len(added) == count + 1
