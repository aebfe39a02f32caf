"""Serving steps: the scheduler iterations vLLM (``execute_B_context_N(…)_generation_M(…)``), SGLang
(``step[DECODE bs=32]``) or a user pattern (``--step-pattern``) name in user annotations, with their phase
(prefill, decode, mixed), batch size and token / context counts; a serving trace has no ProfilerStep."""

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
# vLLM: requests, prefill ("context") requests with their query / key token sums, decode ("generation") ones
_SUMS = r"(?:\(sq(?P<{0}_sq>\d+)sk(?P<{0}_sk>\d+)[^)]*\))?"
VLLM = re.compile(r"^execute_(?P<batch>\d+)_context_(?P<context>\d+)" + _SUMS.format("c")
                  + r"_generation_(?P<generation>\d+)" + _SUMS.format("g"))
SGLANG = re.compile(r"^step\[(?P<phase>[A-Za-z]+)\s+bs=(?P<batch>\d+)(?P<rest>[^\]]*)\]")
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
        g = m.groupdict()
        prefill, decode = int(g["context"]), int(g["generation"])
        phase = "mixed" if prefill and decode else "prefill" if prefill else "decode" if decode else None
        tokens = [_int(g[k]) for k in ("c_sq", "g_sq")]
        context = [_int(g[k]) for k in ("c_sk", "g_sk")]
        return {"phase": phase, "batch": int(g["batch"]),
                "tokens": None if None in tokens else sum(tokens),
                "context": None if None in context else sum(context)}
    m = SGLANG.match(name)
    if m is None:
        return None
    rest = dict(re.findall(r"(\w+)=(\d+)", m.group("rest")))
    return {"phase": _WORDS.get(m.group("phase").lower()), "batch": int(m.group("batch")),
            "tokens": _int(rest.get("tokens", rest.get("tok"))), "context": _int(rest.get("context"))}


def _int(v) -> int | None:
    return None if v is None or v == "" else int(v)


def steps(trace: Trace) -> Columns:
    """The serving steps, in start order: ``step`` (0, 1, …), ``ts``, ``dur`` (engine ns), ``name``,
    ``phase``, ``batch``, ``tokens``, ``context`` (-1: not said). Annotations nested in a step (SGLang's
    ``step[…]`` inside vLLM's ``execute_…``) are that step, their fields filling the ones it lacks."""
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
    where = "" if user else " AND (s.name GLOB 'execute_*_context_*' OR s.name GLOB 'step[[]*')"
    c = trace.columns("SELECT s.ts, s.dur, s.name, t.pid || ':' || t.tid AS track FROM slice s "
                      "JOIN _traceaug_track t USING (track_id) WHERE s.category = 'user_annotation'"
                      f"{where} ORDER BY s.ts, s.dur DESC")
    parsed: dict[str, dict | None] = {}
    rows: list[dict] = []
    open_end: dict[str, tuple[int, dict]] = {}  # per thread (lanes folded): the step open there, its end
    for ts, dur, name, track in zip(c["ts"].tolist(), c["dur"].tolist(), c["name"].tolist(),
                                    c["track"].tolist()):
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
        row = {"ts": ts, "dur": dur, "name": name, **fields}
        rows.append(row)
        open_end[track] = (ts + dur, row)
    return {"step": np.arange(len(rows), dtype=np.int64),
            "ts": np.array([r["ts"] for r in rows], np.int64),
            "dur": np.array([r["dur"] for r in rows], np.int64),
            "name": np.array([r["name"] for r in rows] + [None], object)[:-1],
            "phase": np.array([r["phase"] or "unknown" for r in rows] + [None], object)[:-1],
            **{k: np.array([-1 if r[k] is None else r[k] for r in rows], np.int64)
               for k in INT_FIELDS}}


def batch_at(trace: Trace):
    """A function: the batch size of the serving step holding a time (engine ns), None outside one."""
    st = steps(trace)

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
                   f"{st['dur'][i] / 1e6:.3f} ms (CPU side)".replace(", ,", ","))
    if len(st["step"]) > most:
        out.append(f"... and {len(st['step']) - most} more steps")
    return out
