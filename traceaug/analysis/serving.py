"""Serving steps: the scheduler iterations vLLM (``execute_T_context_N(…)_generation_M(…)``), SGLang
(``step[DECODE bs=32]``), ATOM (``decode[bs=32 …]``) or a user pattern (``--step-pattern``) name in user
annotations, with their phase (prefill, decode, mixed), batch size (requests) and token / context counts; a
serving trace has no ProfilerStep."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

import traceaug.runtime as runtime

from ..errors import TraceaugError
from .tables import Columns

if TYPE_CHECKING:
    from ..trace import Trace

PHASES = ("prefill", "decode", "mixed")
WARM_UP = "warm-up"  # the steps before the steady state (``steady``)
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch", "hipGraphLaunch")
# vLLM: its tokens (detailed form), then prefill ("context") and decode ("generation") requests, each with
# its tokens: "(sq<query>sk<key>sqsq..sqsk..)" (detailed) or "(<tokens>)" (native)
VLLM = re.compile(r"^execute_(?:\d+_)?context_(?P<context>\d+)\((?P<c>[^)]*)\)"
                  r"_generation_(?P<generation>\d+)\((?P<g>[^)]*)\)")
_SQ_SK = re.compile(r"^sq(\d+)sk(\d+)")
# SGLang: step[EXTEND|DECODE|MIXED bs=N toks=.. c_sq=.. c_sk=.. g_sq=.. g_sk=..]; ATOM: prefill[bs=2 tok=..],
# decode[bs=117/128 tok=.. sk=..] (a graph's padding after the slash)
SGLANG = re.compile(r"^step\[(?P<phase>[A-Za-z]+)\s+bs=(?P<batch>\d+)(?P<rest>[^\]]*)\]")
ATOM = re.compile(r"^(?P<phase>prefill|decode)\[bs=(?P<batch>\d+)(?P<rest>.*)\]$")
_WORDS = {"prefill": "prefill", "extend": "prefill", "context": "prefill", "prompt": "prefill",
          "decode": "decode", "generation": "decode", "generate": "decode", "mixed": "mixed"}
# what a user pattern's named groups may say (any other group is ignored)
GROUPS = ("phase", "batch", "tokens", "context")
INT_FIELDS = ("batch", "tokens", "context")


def pattern(text: str) -> re.Pattern:
    """``--step-pattern``'s regex, compiled; the user's error when it does not compile."""
    try:
        return re.compile(text)
    except re.error as e:
        raise TraceaugError(f"--step-pattern {text!r}: not a regular expression ({e})") from None


def parse(name: str, user: re.Pattern | None = None) -> dict | None:
    """A step annotation's fields (``phase``, ``batch``, ``tokens``: the tokens it computes, ``context``:
    the key / context tokens its attention reads; None where it does not say), else None."""
    if user is not None:
        m = user.search(name)
        if m is None:
            return None
        got = {k: v for k, v in m.groupdict().items() if k in GROUPS and v is not None}
        out = {k: _int(got.get(k)) for k in INT_FIELDS}
        return {"phase": _WORDS.get(got.get("phase", "").lower()), **out}
    m = VLLM.match(name)
    if m is not None:
        return _vllm(m)
    m = SGLANG.match(name) or ATOM.match(name)
    if m is None:
        return None
    f = dict(re.findall(r"(\w+)=(\d+)", m.group("rest")))
    tokens = f.get("toks", f.get("tok"))
    if tokens is None and ("c_sq" in f or "g_sq" in f):
        tokens = int(f.get("c_sq", 0)) + int(f.get("g_sq", 0))
    context = f.get("sk")
    if context is None and ("c_sk" in f or "g_sk" in f):
        context = int(f.get("c_sk", 0)) + int(f.get("g_sk", 0))
    return {"phase": _WORDS.get(m.group("phase").lower()), "batch": int(m.group("batch")),
            "tokens": _int(tokens), "context": _int(context)}


def _vllm(m: re.Match) -> dict:
    """A vLLM step's fields: its requests (prefill + decode), tokens (query) and context (key) tokens."""
    prefill, decode = int(m.group("context")), int(m.group("generation"))
    phase = "mixed" if prefill and decode else "prefill" if prefill else "decode" if decode else None
    out = {"phase": phase, "batch": prefill + decode, "tokens": 0, "context": 0}
    for inner in (m.group("c"), m.group("g")):
        sums = _SQ_SK.match(inner)
        if sums:
            out["tokens"] += int(sums.group(1))
            out["context"] += int(sums.group(2)) if out["context"] is not None else 0
        elif inner.isdigit():  # the native form: tokens alone
            out["tokens"], out["context"] = out["tokens"] + int(inner), None
        else:
            return {**out, "tokens": None, "context": None}
    return out


def _int(v) -> int | None:
    return None if v is None or v == "" else int(v)


def steps(trace: Trace) -> Columns:
    """The serving steps, in start order: ``step`` (0, 1, …), ``ts``, ``dur`` (engine ns), ``steady`` (in
    the steady state), ``pid`` (of the annotation), ``name``, ``phase``, ``batch``, ``tokens``, ``context``
    (-1: not said). Annotations nested in a step (SGLang's ``step[…]`` inside vLLM's ``execute_…``) are that
    step, their fields filling the ones it lacks."""
    text = runtime.current().step_pattern
    cache = trace.__dict__.setdefault("_serving_steps", {})  # per pattern: several analyses ask
    if text not in cache:
        cache[text] = _steps(trace, pattern(text) if text else None)
    return cache[text]


def found(trace: Trace) -> bool:
    """Whether the trace is a serving trace: one with serving steps."""
    return len(steps(trace)["step"]) > 0


def _steps(trace: Trace, user: re.Pattern | None) -> Columns:
    trace.include("traceaug.base")
    where = "" if user else (" AND (s.name GLOB 'execute_*context_*' OR s.name GLOB 'step[[]*' OR "
                             "s.name GLOB 'prefill[[]*' OR s.name GLOB 'decode[[]*')")
    c = trace.columns("SELECT s.ts, s.dur, s.name, t.pid, t.pid || ':' || t.tid AS track FROM slice s "
                      "JOIN _traceaug_track t USING (track_id) WHERE s.category = 'user_annotation'"
                      f"{where} ORDER BY s.ts, s.dur DESC")
    parsed: dict[str, dict | None] = {}
    rows: list[dict] = []
    open_end: dict[str, tuple[int, dict]] = {}  # per thread (lanes folded): the step open there, its end
    for ts, dur, name, pid, track in zip(c["ts"].tolist(), c["dur"].tolist(), c["name"].tolist(),
                                         c["pid"].tolist(), c["track"].tolist()):
        if name not in parsed:
            parsed[name] = parse(name, user)
        fields = parsed[name]
        if fields is None or dur is None or dur < 0:
            continue
        outer = open_end.get(track)
        if outer is not None and ts + dur <= outer[0]:  # nested: the same step
            for k, v in fields.items():
                if outer[1][k] is None:
                    outer[1][k] = v
            continue
        row = {"ts": ts, "dur": dur, "name": name, "pid": pid, **fields}
        rows.append(row)
        open_end[track] = (ts + dur, row)
    ts = np.array([r["ts"] for r in rows], np.int64)
    return {"step": np.arange(len(rows), dtype=np.int64), "ts": ts, "steady": steady(trace, ts),
            "dur": np.array([r["dur"] for r in rows], np.int64),
            "pid": np.array([r["pid"] for r in rows], np.int64),
            "name": np.array([r["name"] for r in rows] + [None], object)[:-1],
            "phase": np.array([r["phase"] or "unknown" for r in rows] + [None], object)[:-1],
            **{k: np.array([-1 if r[k] is None else r[k] for r in rows], np.int64)
               for k in INT_FIELDS}}


def steady(trace: Trace, ts: np.ndarray) -> np.ndarray:
    """Which steps (by start ``ts``) are in the steady state: those after the graph capture (the last
    ``capture_*`` annotation or ``*StreamEndCapture`` call) and, in a trace that replays graphs, from the
    first step that launches one on (the eager steps before are warm-up)."""
    if not len(ts):  # no step: nothing to ask (the query scans every slice: 12 ms on an A100 rank)
        return np.zeros(0, bool)
    c = trace.columns(
        "SELECT (SELECT MAX(ts + dur) FROM slice WHERE (category = 'user_annotation' AND name GLOB "
        "'capture_*') OR name GLOB '*StreamEndCapture*') AS captured, (SELECT GROUP_CONCAT(ts) FROM slice "
        f"WHERE name IN ({', '.join(repr(n) for n in GRAPH_LAUNCHES)})) AS launches")
    captured, launches = c["captured"][0], c["launches"][0]
    out = ts > (captured if captured is not None and captured == captured else np.iinfo(np.int64).min)
    if isinstance(launches, str) and out.any():
        first = int(np.searchsorted(ts, min(int(x) for x in launches.split(",")), side="right")) - 1
        out &= np.arange(len(ts)) >= first
    return out


def batch_at(st: Columns):
    """A function: the batch size of the serving step (of ``st``) holding a time (engine ns), else None."""

    def at(ts: int) -> int | None:
        i = int(np.searchsorted(st["ts"], ts, side="right")) - 1
        ok = i >= 0 and ts < st["ts"][i] + st["dur"][i] and st["batch"][i] >= 0
        return int(st["batch"][i]) if ok else None
    return at


def lines(trace: Trace, most: int = 20) -> list[str]:
    """The serving steps as ``info`` lists them: number, phase, batch size, tokens, context, duration."""
    st = steps(trace)
    out = []
    for i in range(min(len(st["step"]), most)):
        said = [f"batch {st['batch'][i]}" if st["batch"][i] >= 0 else "",
                f"{st['tokens'][i]} tokens" if st["tokens"][i] >= 0 else "",
                f"{st['context'][i]} context tokens" if st["context"][i] >= 0 else ""]
        out.append(f"step {i}: {st['phase'][i]}, {', '.join(x for x in said if x)}, "
                   f"{st['dur'][i] / 1e6:.3f} ms (CPU side)".replace(", ,", ",")
                   + ("" if st["steady"][i] else f", {WARM_UP}"))
    if len(st["step"]) > most:
        out.append(f"... and {len(st['step']) - most} more steps")
    return out
