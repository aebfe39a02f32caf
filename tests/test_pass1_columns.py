"""Pass 1's plan, field by field, against values computed here from the raw JSON.

Pass 1 reads its columns with loops in C (``read.columns``); these answers come from one
plain Python loop per event over the file as ``json`` parses it (timestamps as Decimal,
so nanoseconds are exact), following the load kinds as ``read.kinds`` declares them: what
each kind keeps, the args it keeps, the rebased and unsigned values the engine gets, the
rows the Perfetto UI prediction reads (``plan.ui``), the span and the flow ids.
"""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from conftest import shared_trace
from rawjson import load_raw

from traceaug.read import normalize
from traceaug.read.kinds import KINDS, RUNTIME_CATEGORIES

B = 1712198313370123  # µs since the epoch


def _odd_trace() -> dict:
    """A trace with what pass 1 must judge event by event: fractional and integer epoch
    ts, string and negative tids, a missing dur, instant events, ProfilerSteps in odd
    categories, host-only and enqueueing runtime calls, hex-string and bind ids, an event
    with no ph, sync events (whose args a "sync" load keeps whole), args that are no object."""
    ev = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": -7, "args": {"name": "neg"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": "stream 7", "args": {"name": "s7"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": -7,
         "ts": B, "dur": 900, "args": {"External id": 1}},
        {"ph": "X", "cat": None, "name": "ProfilerStep#2", "pid": 1, "tid": 5, "ts": B + 1, "dur": 3},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": -7, "ts": B + 10,
         "dur": 50, "args": {"External id": 2, "Input Dims": [[1]]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": -7,
         "ts": B + 12, "dur": 4, "args": {"External id": 2, "cbid": 211, "correlation": 9}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventQuery", "pid": 1, "tid": -7,
         "ts": B + 20, "dur": 1, "args": {"correlation": 10}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 1, "tid": -7, "ts": B + 12},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": "0x1f", "bp": "e", "pid": 2,
         "tid": "stream 7", "ts": B + 30},
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 2, "tid": "stream 7", "ts": B + 30,
         "dur": 20, "args": {"queued": 0, "device": 0, "stream": 7, "correlation": 9, "grid": [1]}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 2, "tid": "stream 7", "ts": B + 40,
         "dur": 20, "bind_id": 4, "args": "not an object"},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 2, "tid": 8,
         "ts": Decimal(B + 50) + Decimal("0.125"), "args": {"bytes": 64}},  # no dur
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 2, "tid": 8,
         "ts": Decimal(B + 70) + Decimal("0.5"), "dur": Decimal("2.25"),
         "args": {"cuda_sync_kind": "Stream Synchronize", "stream": 8, "extra": 1}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "mark", "pid": 1, "tid": 5,
         "ts": B + 2000, "s": "t", "args": {"a": 1}},
        {"name": "no phase", "cat": "kernel", "pid": 1, "tid": 5, "ts": B + 3, "dur": 1},
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 3, "name": "gpu"}], "traceEvents": ev}


def _write(tmp_path: Path, trace: dict) -> Path:
    """The trace as JSON, Decimal values written with their exact digits."""
    text = json.dumps(trace, default=lambda d: f"<{d}>")
    text = re.sub(r'"<([0-9.]+)>"', r"\1", text)
    path = tmp_path / "odd.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    return path


def _kept(e: dict, kind) -> bool:
    """Whether a load of ``kind`` gives the engine event ``e`` (``kinds.LoadKind``'s rules)."""
    ph = e.get("ph")
    if ph in ("s", "t", "f") and not kind.flows:
        return False
    if not kind.subset:
        return True
    if ph is None:
        return False
    cat, name = e.get("cat"), e.get("name")
    return (ph == "M"
            or (isinstance(cat, str) and cat in kind.categories
                and not (cat in RUNTIME_CATEGORIES and isinstance(name, str) and name in kind.skip_calls))
            or (isinstance(name, str) and name.startswith("ProfilerStep#")))


def _as_engine_gets(e: dict, kind, base_us: int) -> dict:
    """Event ``e`` as the engine gets it from a held (re-serialized) load."""
    e = dict(e)
    if isinstance(e.get("ts"), (int, Decimal)) and not isinstance(e.get("ts"), bool):
        e["ts"] = e["ts"] - base_us
    if isinstance(e.get("tid"), int) and e["tid"] < 0:
        e["tid"] &= 0xFFFFFFFF
    args = e.get("args")
    if e.get("ph") == "X" and isinstance(args, dict) and e.get("cat") not in kind.whole_args:
        kept = {k: v for k, v in args.items() if k in kind.args}
        if kept:
            e["args"] = kept
        else:
            del e["args"]
    return e


def _ns(us) -> int:
    return int(Decimal(us) * 1000)


def _ui_rows(events: list, base_ns: int) -> tuple[list, list, list]:
    """(pid, tid) keys in order of first appearance among complete events then flow events;
    rows (key, ts ns, dur ns, index) of complete events with a dur and (key, ts ns, index)
    of flow events, ts relative to ``base_ns``."""
    keys: dict = {}
    for phases in (("X",), ("s", "t", "f")):
        for e in events:
            if e.get("ph") in phases:
                keys.setdefault((e.get("pid"), e.get("tid")), len(keys))
    x = [[keys[(e["pid"], e["tid"])], _ns(e["ts"]) - base_ns, _ns(e["dur"]), i]
         for i, e in enumerate(events) if e.get("ph") == "X" and "dur" in e]
    flows = [[keys[(e["pid"], e["tid"])], _ns(e["ts"]) - base_ns, i]
             for i, e in enumerate(events) if e.get("ph") in ("s", "t", "f")]
    return list(keys), x, flows


def _flow_ids(raw: dict) -> list[int]:
    ids = set()
    todo = [raw]
    while todo:  # events and header alike: every "id" / "bind_id" Perfetto could read
        v = todo.pop()
        if isinstance(v, dict):
            for k in ("id", "bind_id"):
                if isinstance(v.get(k), int) and v[k] >= 0:
                    ids.add(v[k])
                elif isinstance(v.get(k), str):
                    ids.add(int(v[k], 16))
            todo += [x for k, x in v.items() if k != "args"]
        elif isinstance(v, list):
            todo += v
    return sorted(ids)


def _span(events: list, base_ns: int) -> tuple[int, int]:
    timed = [e for e in events if e.get("ph") in ("X", "i")]
    return (min(_ns(e["ts"]) for e in timed) - base_ns,
            max(_ns(e["ts"]) + _ns(e.get("dur", 0)) for e in timed) - base_ns)


def _check(path: Path, raw: dict, kind_name: str) -> None:
    kind = KINDS[kind_name]
    events = raw["traceEvents"]
    plan = normalize.plan(path, kind=kind_name, workers=0)
    base_us = plan.base_ns // 1000
    kept = [e for e in events if _kept(e, kind)]
    assert plan.events == len(kept)
    if kind.full:
        assert plan.held is None
    else:
        held = [e for pieces in plan.held for p in pieces for e in orjson.loads(b"[" + p + b"]")]
        want = [_as_engine_gets(e, kind, base_us) for e in kept]
        assert held == json.loads(json.dumps(want, default=float))  # Decimal ts as parsed
    if kind.skim:  # pass 1 did not see every event: no UI columns, flow ids or span
        assert (plan.ui, plan.flow_ids, plan.span_ns) == (None, None, None)
        return
    keys, x, flows = _ui_rows(events, plan.base_ns)
    assert list(plan.ui.keys) == keys
    assert plan.ui.x.tolist() == x
    assert plan.ui.flows.tolist() == flows
    assert plan.ui.events == len(events)
    assert plan.flow_ids.tolist() == _flow_ids({k: v for k, v in raw.items()})
    assert plan.span_ns == (_span(events, plan.base_ns) if kind.subset else None)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    if not kind.full:  # the engine's (held) events name the unsigned tid
        names = {(pid, tid & 0xFFFFFFFF if isinstance(tid, int) else tid): name
                 for (pid, tid), name in names.items()}
    assert plan.thread_names == names


@pytest.mark.parametrize("kind", list(KINDS))
def test_plan_of_an_odd_trace_matches_the_raw_json(tmp_path: Path, kind: str) -> None:
    trace = _odd_trace()
    path = _write(tmp_path, trace)
    _check(path, load_raw(path), kind)


@pytest.mark.parametrize("kind", ["gpu", "analysis", "sync", "gpu_steps"])
def test_plan_of_the_a100_trace_matches_the_raw_json(kind: str) -> None:
    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")  # negative tids, int ts
    _check(path, load_raw(path), kind)


def test_cuts_between_names_with_escaped_quotes_and_backslashes(tmp_path: Path, monkeypatch) -> None:
    """Compact JSON (no newline to cut at) whose names hold ``"},{"`` behind backslashes, and
    backslash runs before a closing quote: the worker cuts (by quote parity) fall outside
    strings, so every event comes back whole, as in this process."""
    from traceaug.read import chunks, pass1, source
    from traceaug.read.rebase import Rebase

    names = ['k\\"},{\\"' * 30, "path\\\\", 'q\\\\\\"},{', "plain"]
    events = [{"ph": "X", "name": names[i % 4] + str(i), "pid": 1, "tid": 2, "ts": 10 * i,
               "dur": 5, "cat": "kernel", "args": {"correlation": i}} for i in range(4000)]
    path = tmp_path / "escaped.json"
    path.write_text(json.dumps({"traceEvents": events}, separators=(",", ":")))
    assert b"\n" not in path.read_bytes()
    monkeypatch.setattr(chunks, "CHUNK", 32 << 10)
    monkeypatch.setattr(source, "BLOCK", 32 << 10)
    results = list(pass1.parallel(source.iter_blocks(path), Rebase(), "analysis", 2))
    assert sum(r.events for r in results[:-1]) == 4000  # every cut parsed (no Unconfirmed)
    for workers in (0, 2):
        plan = normalize.plan(path, kind="analysis", workers=workers)
        assert len(plan.chunk_first_seq) > 20
        held = [e for pieces in plan.held for p in pieces for e in orjson.loads(b"[" + p + b"]")]
        assert [e["name"] for e in held] == [e["name"] for e in json.loads(path.read_text())["traceEvents"]]
