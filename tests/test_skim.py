"""Skimming (``read.skim``): the events a load drops, cut from the text unparsed.

The analyses' load ("gpu_steps") must hand the engine exactly what the "gpu" load does,
which parses every event: on real traces in each layout their writers use (Kineto's own,
``json`` with ``indent=2`` and ``indent=4``, the 2021 schema), and on traces built here in
Kineto's layout with what the cut must leave alone. How many events the cut removes is
counted here independently, from the raw JSON.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest
from conftest import shared_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceaug.read import chunks, normalize, skim
from traceaug.read.kinds import KINDS, RUNTIME_CATEGORIES
from traceaug.read.skim import Skim

KIND = KINDS["gpu_steps"]
B = 1712198313370123  # µs since the epoch

LAYOUTS = [
    "kineto/a100_rank0_of16_6streams.json.gz",  # Kineto's own writer
    "kineto/h100_qwen05b_inference.json.gz",  # json, indent=2: a key per line
    "kineto/b200_rank0_of8_allgather.json.gz",  # json, indent=4
    "kineto/diff/v100_resnet50_2021/a/worker0.1623143089861.pt.trace.json.gz",  # 2021 schema
    "kineto/mi250_rocm62.json.gz",  # ROCm; a "Trace" span with its keys in another order
]


def _plain(text) -> bool:
    """A string JSON writes without an escape."""
    return isinstance(text, str) and json.dumps(text, ensure_ascii=False)[1:-1] == text


def _cuttable(e: dict) -> bool:
    """Whether the cut removes ``e`` (written in its layout, not last): a flow event, or a
    complete event whose first keys are ph, cat, name, unescaped, that the kind drops."""
    if e.get("ph") in ("s", "t", "f"):
        return True
    if e.get("ph") != "X" or list(e)[:3] != ["ph", "cat", "name"]:
        return False
    cat, name = e["cat"], e["name"]
    if not (_plain(cat) and _plain(name)):
        return False
    if cat in KIND.categories & RUNTIME_CATEGORIES:
        return name in KIND.skip_calls
    return cat not in KIND.categories and not name.startswith("ProfilerStep#")


def _same_plan(path: Path) -> normalize.Plan:
    """The skimmed plan, after checking it gives the engine what the parsed one does."""
    parsed = normalize.plan(path, kind="gpu", workers=0)
    skimmed = normalize.plan(path, kind="gpu_steps", workers=0)
    assert skimmed.held == parsed.held
    assert (skimmed.events, skimmed.moved, skimmed.thread_names, skimmed.base_ns) == \
        (parsed.events, parsed.moved, parsed.thread_names, parsed.base_ns)
    assert (skimmed.layout.cuts, skimmed.layout.header, skimmed.layout.trailer) == \
        (parsed.layout.cuts, parsed.layout.header, parsed.layout.trailer)
    return skimmed


@pytest.mark.parametrize("rel", LAYOUTS)
def test_a_skimmed_plan_is_the_parsed_one_on_real_traces(rel: str) -> None:
    path = shared_trace(rel)
    plan = _same_plan(path)
    assert (plan.ui, plan.flow_ids, plan.span_ns) == (None, None, None)
    text = gzip.decompress(path.read_bytes())
    events = json.loads(text)["traceEvents"]
    short, cut = Skim(KIND)(text)  # the whole text as one chunk
    assert cut == sum(map(_cuttable, events[:-1])) > 0.3 * len(events)
    assert len(json.loads(short)["traceEvents"]) == len(events) - cut


def test_workers_skim_as_this_process_does() -> None:
    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    here = normalize.plan(path, kind="gpu_steps", workers=0)
    workers = normalize.plan(path, kind="gpu_steps", workers=2)
    assert workers.held == here.held and workers.events == here.events == 14828  # with 355 user annotations


def _kineto_text(events: list[dict]) -> bytes:
    """A trace in Kineto's layout: an event's first three keys on its first line, one key a
    line after, args one a line, inner lines indented deeper than the event's braces."""
    def event(e: dict) -> str:
        keys = list(e)
        lines = [", ".join(f'"{k}": {json.dumps(e[k])}' for k in keys[:3] if k != "args")]
        for k in keys[3:]:
            if k == "args" and isinstance(e[k], dict):
                inner = ",\n".join(f'      "{a}": {json.dumps(v)}' for a, v in e[k].items())
                lines.append('"args": {\n' + inner + "\n    }")
            else:
                lines.append(f'"{k}": {json.dumps(e[k])}')
        return "  {\n    " + ",\n    ".join(lines) + "\n  }"
    return ('{\n  "schemaVersion": 1,\n  "traceEvents": [\n'
            + ",\n".join(map(event, events)) + '\n  ],\n  "traceName": "t"\n}\n').encode()


def _op(name: str, cat: str = "cpu_op", ts: int = 0, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": B + ts, "dur": 1,
            "args": args or {"External id": 1}}


def _kernel(ts: int) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": B + ts,
            "dur": 2, "args": {"device": 0, "stream": 7, "correlation": ts}}


def _write(tmp_path: Path, text: bytes) -> Path:
    path = tmp_path / "t.json"
    path.write_bytes(text)
    return path


def _held_names(plan: normalize.Plan) -> list[str]:
    return [e["name"] for pieces in plan.held for p in pieces for e in orjson.loads(b"[" + p + b"]")]


def test_what_the_cut_leaves_alone(tmp_path: Path) -> None:
    """A CPU op named as a ProfilerStep, a launch, a call named like a skipped one, escaped
    text and another key order are parsed; a dropped op, a skipped call and a flow are cut."""
    events = [
        _op("first"),  # cut
        _op("aten::mm", ts=1),  # cut
        _op("ProfilerStep#3", ts=2),  # kept
        _op("cudaEventQuery", "cuda_runtime", 3, correlation=1),  # cut
        _op("cudaEventQueryAll", "cuda_runtime", 4, correlation=2),  # kept: not a skipped call
        _op("cudaLaunchKernel", "cuda_runtime", 5, correlation=3),  # kept
        _op('aten::to("cuda")', ts=6),  # escaped: parsed, then dropped
        _op("aten::add", ts=7),  # its category escaped below: parsed, then dropped
        {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": B + 5, "cat": "ac2g", "name": "ac2g"},  # cut
        {"cat": "cpu_op", "ph": "X", "name": "aten::sub", "pid": 1, "tid": 1, "ts": B + 8,
         "dur": 1},  # keys in another order: parsed, then dropped
        _kernel(9),
        _op("last", ts=10),  # no comma after it: never cut
    ]
    text = _kineto_text(events).replace(b'"cat": "cpu_op", "name": "aten::add"',
                                        b'"cat": "cpu\\u005fop", "name": "aten::add"')
    assert text.count(b"cpu\\u005fop") == 1
    short, cut = Skim(KIND)(text)
    assert cut == 4
    assert [e["name"] for e in json.loads(short)["traceEvents"]] == [
        "ProfilerStep#3", "cudaEventQueryAll", "cudaLaunchKernel", 'aten::to("cuda")',
        "aten::add", "aten::sub", "k", "last"]
    plan = _same_plan(_write(tmp_path, text))
    assert _held_names(plan) == ["ProfilerStep#3", "cudaEventQueryAll", "cudaLaunchKernel", "k"]


def test_a_piece_that_is_not_one_event_is_parsed(tmp_path: Path) -> None:
    """A kernel written on a CPU op's inner line would go with it, and a "ph" key in args
    could be one: a chunk whose cut pieces hold more "ph" keys than pieces is parsed whole."""
    two = _kineto_text([_op("first"), _op("aten::mm", ts=1), _kernel(2), _op("last", ts=3)])
    two = two.replace(b'1\n    }\n  },\n  {\n    "ph": "X", "cat": "kernel"',
                      b'1\n    }}, {"ph": "X", "cat": "kernel"', 1)
    assert two.count(b'}}, {"ph": "X", "cat": "kernel"') == 1
    assert Skim(KIND)(two) == (two, 0)
    assert _held_names(_same_plan(_write(tmp_path, two))) == ["k"]
    ph_arg = _kineto_text([_op("first"), _op("aten::mm", ts=1, ph="X"), _op("aten::mm", ts=2),
                           _kernel(3), _op("last", ts=4)])
    assert Skim(KIND)(ph_arg) == (ph_arg, 0)
    assert _held_names(_same_plan(_write(tmp_path, ph_arg))) == ["k"]


def test_a_ph_string_anywhere_in_a_piece_has_it_parsed(tmp_path: Path) -> None:
    """The check counts ``"ph"`` strings, values too: a dropped op whose args hold the string
    "ph" leaves its chunk parsed whole, and the engine gets what it gets from the parsed load."""
    events = [_op("first"), _op("aten::mm", ts=1, **{"Input type": ["ph"]}), _kernel(2),
              _op("last", ts=3)]
    text = _kineto_text(events)
    assert text.count(b'["ph"]') == 1
    assert Skim(KIND)(text) == (text, 0)
    assert _held_names(_same_plan(_write(tmp_path, text))) == ["k"]
    plain = [_op("first"), _op("aten::mm", ts=1), _kernel(2), _op("last", ts=3)]
    assert Skim(KIND)(_kineto_text(plain))[1] == sum(map(_cuttable, plain[:-1])) == 2  # cut


@pytest.mark.parametrize("text", [b"", b'"ph', b'"ph"', b'x"ph"', b'"ph"ph"', b'ab"ph"cd"ph"',
                                  b'"ph": 1, "ph" , "p h", "PH", "ph"'])
def test_ph_strings_are_counted_at_every_offset(text: bytes) -> None:
    for pad in range(5):  # each start modulo 4, and a tail shorter than a word
        padded = b" " * pad + text + b" " * (4 - pad)
        assert skim._count_ph(padded) == sum(padded.startswith(b'"ph"', i)
                                             for i in range(len(padded)))


def test_a_fault_inside_a_cut_event_goes_unseen(tmp_path: Path) -> None:
    """What skimming trades: broken JSON inside a dropped CPU op stops the parsed load, not
    the skimmed one, whose events are those of the same trace with the op left out."""
    good = [_op("first"), _op("aten::mm", ts=1), _kernel(2), _op("last", ts=3)]
    before_kernel = b'\n    }\n  },\n  {\n    "ph": "X", "cat": "kernel"'
    text = _kineto_text(good).replace(b'"External id": 1' + before_kernel,
                                      b'"External id": [1}' + before_kernel, 1)
    assert b"[1}" in text
    broken = _write(tmp_path, text)
    with pytest.raises(chunks.MalformedJson):
        normalize.plan(broken, kind="gpu", workers=0)
    assert _held_names(normalize.plan(broken, kind="gpu_steps", workers=0)) == ["k"]


def test_a_skimmed_load_claims_nothing_about_what_the_ui_drops() -> None:
    """A skimmed plan never saw the cut events: ``info``'s UI warnings are the parsed load's
    only (the A100 trace's CPU threads with negative tids), none from a skimmed one."""
    import traceaug
    from traceaug.analysis.info import ui_warnings

    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    with traceaug.load(path, kind="gpu", progress=False) as parsed:
        assert any("negative thread ids" in w for w in ui_warnings(parsed))
    with traceaug.load(path, kind="gpu_steps", progress=False) as skimmed:
        assert skimmed.kind == "gpu_steps" and ui_warnings(skimmed) == []


_CATS = ["cpu_op", "kernel", "cuda_runtime", "gpu_memcpy", "user_annotation", "python_function",
         "gpu_user_annotation", "ac2g", "", 'cpu"op', "κ"]
_NAMES = ["aten::mm", "ProfilerStep#1", "ProfilerStep#", "cudaEventQuery", "cudaLaunchKernel",
          "cudaEventQueryAll", 'a"b', "a\\b", "{lambda()#1}", "},{", "é"]
_ARG_VALUES = st.recursive(st.integers(0, 9) | st.sampled_from(_NAMES),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(["a", "ph", "x"]), inner, max_size=2),
                           max_leaves=5)


@st.composite
def _events(draw) -> list[dict]:
    events = []
    for i in range(draw(st.integers(2, 14))):
        e = {"ph": draw(st.sampled_from(["X", "X", "X", "s", "f", "i"])),
             "cat": draw(st.sampled_from(_CATS)), "name": draw(st.sampled_from(_NAMES)),
             "pid": draw(st.sampled_from([0, 1])), "tid": draw(st.sampled_from([1, 7])),
             "ts": B + 10 * i, "dur": draw(st.integers(1, 30))}
        if e["ph"] in ("s", "f"):
            e["id"] = i
        args = draw(st.dictionaries(st.sampled_from(["correlation", "device", "stream", "ph",
                                                    "Input Dims"]), _ARG_VALUES, max_size=3))
        if args:
            e["args"] = args
        if draw(st.booleans()) and draw(st.booleans()):  # keys in another order, now and then
            e = dict(sorted(e.items()))
        events.append(e)
    return events


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=_events())
def test_skimming_never_changes_what_the_engine_gets(tmp_path: Path, events: list[dict]) -> None:
    """Random events in Kineto's layout (odd categories and names, escapes, "ph" keys and
    braces in args, keys out of order): the skimmed load's engine input is the parsed one's."""
    _same_plan(_write(tmp_path, _kineto_text(events)))
