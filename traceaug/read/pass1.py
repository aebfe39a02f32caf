"""Pass 1 over one chunk: parse, gather columns, keep what the engine needs (keys and seqs chunk-local).
Chunks are independent, so large traces use worker processes: no pandas or engine imports (worker start)."""

from __future__ import annotations

import gc
import math
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import numpy as np
import orjson

from ..sorted_ints import sorted_unique
from . import chunks, columns
from .kinds import (  # the kinds' constants stay importable from here too
    CPU_OP_CATEGORIES,
    GPU_ONLY_CATEGORIES,  # noqa: F401
    HOST_ONLY_CALLS,  # noqa: F401
    KINETO_ARGS,  # noqa: F401
    RUNTIME_CATEGORIES,
    LoadKind,
    kind_of,
)
from .rebase import (
    BelowBase,
    Rebase,
    clamp_wide_ints,
    numbers,
    top_level_ts,
    unsigned_tid,
    us_to_ns_array,
    write_ts,
)
from .skim import Skim

MEMORY_NAMES = frozenset({"[memory]"})  # Kineto's memory events (``analysis.memory``)

FLOW_PHASES = ("s", "t", "f")
SEGMENT = 512  # events per held piece: moving one event re-serializes only its piece


@dataclass
class ChunkResult:
    """What pass 1 learned from one chunk."""

    events: int = 0  # events kept for the engine (flow events are not, in an analysis load)
    keys: list = field(default_factory=list)  # local thread key -> (pid, tid)
    x: bytes = b""  # int64 rows (key, ts ns, dur ns, seq) of complete events
    flows: bytes = b""  # int64 rows (key, ts ns, seq) of flow events
    names: dict = field(default_factory=dict)  # (pid, tid) -> thread name
    held: list[bytes] | None = None  # an analysis load: kept events, re-serialized by SEGMENT
    trailer: dict | None = None  # the tail chunk: keys after the event array
    exact: bool = False  # rebased by ``Rebase.exact`` (pass 2 of a full load does the same)
    span: tuple[int, int] | None = None  # a subset load: the span of every timed event
    flow_ids: bytes = b""  # sorted unique int64 ids of the chunk (``used_flow_ids``)
    error: str | None = None  # the chunk did not parse
    below_base: bool = False  # a timestamp lies below the rebase's base (``BelowBase``)
    parsed: int = 0  # every event of the chunk parsed, kept or not (none ``read.skim`` cut)
    memory: int = 0  # Kineto's ``[memory]`` instants, kept or not (``analysis.memory.recorded``)
    # What the Perfetto UI imports from the file as is (read.ui_import): raw (pid, tid) keys, int64 rows
    # (key, ts ns, dur ns, index in chunk) of every complete event, (key, ts ns, index) of every flow event.
    ui_keys: list = field(default_factory=list)
    ui_x: bytes = b""
    ui_flows: bytes = b""
    # A ``holding_ops`` load: int64 rows (key, ts ns, dur ns, seq) of the CPU ops it may leave out, (key, ts
    # ns) of the calls and [memory] events that keep the ops around them, each held event's end in its piece
    ops: bytes = b""
    anchors: bytes | None = b""  # None: the chunk cannot tell (every op kept)
    ends: bytes = b""


class Unconfirmed(Exception):
    """A chunk cut without parsing did not parse: scan again, confirming each cut."""


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic GC: parsed events are acyclic, and its passes over millions of
    fresh dicts cost a third of pass 1."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _engine_keys(ui_keys: dict, keys: dict, full: bool) -> np.ndarray:
    """Raw (pid, tid) key -> the engine's key in ``keys`` (negative tids unsigned unless
    ``full``: a full load's text fix comes in pass 2); -1 stays -1."""
    pairs = [(pid, unsigned_tid(tid) if not full and tid.__class__ is int else tid)
             for pid, tid in ui_keys]
    return np.array([keys.setdefault(k, len(keys)) for k in pairs] + [-1], dtype=np.int64)


def _kept_rows(rows: np.ndarray, to_engine: np.ndarray, drop: np.ndarray, seq_of: np.ndarray
               ) -> np.ndarray:
    """The rows (key, ..., index in chunk) of the events the load keeps, as the engine sees
    them: its keys and sequence numbers."""
    at = rows[:, -1]
    kept = rows[~drop[at]]
    kept[:, 0] = to_engine[kept[:, 0]]
    kept[:, -1] = seq_of[kept[:, -1]]
    return kept


class BadValue(ValueError):
    """An event's value traceaug cannot represent exactly (the loader names the file)."""


NS_LIMIT = 2.0**63  # timestamps and durations are int64 ns


def check_range(name: str, us: np.ndarray) -> None:
    """Refuse µs values that are infinite or whose ns do not fit int64 (1e308, 2^64)."""
    bad = np.abs(us) >= NS_LIMIT / 1000  # NaN compares False: missing values judged elsewhere
    if bad.any():
        value = us[bad][0]
        raise BadValue(f"an event's {name} is {value:.6g} µs, out of range (the limit is "
                       f"±{NS_LIMIT / 1000:.6g} µs)")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _check_ts(events: list, at: np.ndarray, ns: np.ndarray) -> None:
    """BadValue unless each timed event's ``ts`` (events ``at``, ns ``ns``) is a number or numeric string as
    Perfetto reads it; booleans (numpy reads 0 or 1 µs) are looked for only among events at those values."""
    missing = np.flatnonzero(np.isnan(ns))
    if len(missing):
        ev = events[at[missing[0]]]
        raise BadValue(f"an event's ts is {_short(ev.get('ts'))}, not a number" if "ts" in ev
                       else "an event has no ts")
    if any(events[i].get("ts").__class__ is bool for i in at[(ns == 0) | (ns == 1000)].tolist()):
        raise BadValue("an event's ts is a boolean, not a number")


def _timed_rows(events: list, ts: np.ndarray, key: np.ndarray, is_x: np.ndarray,
                is_flow: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """int64 rows (key, ts ns, dur ns, index) of complete events with a numeric dur, (key, ts ns, index) of
    flow events (``ts``: ``top_level_ts``), and the complete events' raw durs; BadValue for bad values."""
    x_at, flow_at = np.flatnonzero(is_x), np.flatnonzero(is_flow)
    check_range("ts", ts[x_at])
    durs = columns.column(columns.select(events, is_x), "dur")
    dur_us = numbers(durs)
    check_range("dur", dur_us)
    x_ns, dur_ns = us_to_ns_array(ts[x_at]), us_to_ns_array(dur_us)
    _check_ts(events, x_at, x_ns)
    check_range("ts", ts[flow_at])
    flow_ns = us_to_ns_array(ts[flow_at])
    _check_ts(events, flow_at, flow_ns)
    with np.errstate(invalid="ignore"):  # NaN durs (no number): their rows are dropped
        x = np.column_stack([key[x_at], x_ns.astype(np.int64), dur_ns.astype(np.int64), x_at])
    flows = np.column_stack([key[flow_at], flow_ns.astype(np.int64), flow_at])
    return x[~np.isnan(dur_ns)], flows, durs


def _span(events: list, codes: np.ndarray, ts: np.ndarray, durs: list) -> tuple[int, int] | None:
    """(first start, last end) ns of the chunk's complete and instant events (a missing dur is 0); ``durs``,
    the complete events' raw durs, are reused when none is missing and there is no instant event."""
    timed = (codes == columns.X) | (codes == columns.INSTANT)
    if (codes == columns.INSTANT).any() or None in durs:
        durs = [e.get("dur", 0) for e in columns.select(events, timed)]
    start = us_to_ns_array(ts[timed])
    dur = us_to_ns_array(numbers(durs))
    ok = np.isfinite(start) & np.isfinite(dur) & (dur >= 0)
    if not ok.any():
        return None
    return int(start[ok].min()), int((start[ok] + dur[ok]).max())


def _subset_keeps(events: list, codes: np.ndarray, kind: LoadKind, dropped: np.ndarray
                  ) -> np.ndarray:
    """Which events a subset load keeps: metadata, the kind's categories (less the runtime calls it skips) and
    ProfilerSteps; never one without ``ph``. Names are read only where they decide (not for ``dropped``)."""
    skips = kind.skip_calls
    calls = kind.categories & RUNTIME_CATEGORIES if skips else frozenset()
    category = columns.codes(events, "cat", {c: 2 if c in calls else 1 for c in kind.categories})
    keep = (codes == columns.META) | (category == 1)
    if calls:
        call = category == 2
        keep[np.flatnonzero(call)[~columns.among(columns.select(events, call), "name", skips)]] = True
    rest = ~keep & ~dropped & (codes != columns.NO_PHASE)
    keep[np.flatnonzero(rest)[columns.starts_with(columns.select(events, rest), "name",
                                                  columns.PROFILER_STEP)]] = True
    return keep & (codes != columns.NO_PHASE)


_HEX_ID = re.compile(r"(?:0[xX])?([0-9a-fA-F]{1,16})")


def _id_value(v) -> int | None:
    """A flow id as Perfetto reads it: an integer, or a string of hex digits."""
    if v.__class__ is int:
        return v
    if v.__class__ is str:
        m = _HEX_ID.fullmatch(v)
        return int(m.group(1), 16) if m else None
    if v.__class__ is float and math.isfinite(v):
        return int(v)
    return None


def used_flow_ids(events: list) -> np.ndarray:
    """Sorted unique int64 flow ids (0 up) of the events' ``id`` (flows v1) and ``bind_id`` (v2), read as
    Perfetto does; gathered here so a rewriter picking new flow ids need not scan the file again."""
    raw = columns.present(events, "id") + columns.present(events, "bind_id")
    if set(map(type, raw)) <= {int}:  # the usual case: one conversion in C
        try:
            ids = np.array(raw, dtype=np.int64)
            return sorted_unique(ids[ids >= 0])
        except OverflowError:
            pass  # beyond int64: not an id Perfetto reads
    ids = [i for v in raw if (i := _id_value(v)) is not None]
    return sorted_unique([i for i in ids if 0 <= i < 1 << 63])


def nested_flow_ids(value) -> list[int]:
    """``used_flow_ids`` of a value at any depth (the header and trailer keys around the
    event array: ``deviceProperties`` entries have ids too)."""
    out, todo = [], [value]
    while todo:
        v = todo.pop()
        if v.__class__ is dict:
            out += [i for k in ("id", "bind_id") if k in v
                    and (i := _id_value(v[k])) is not None and 0 <= i < 1 << 63]
            todo += v.values()
        elif v.__class__ is list:
            todo += v
    return out


def _memory_events(events: list, codes: np.ndarray) -> int:
    """How many of the events are Kineto's ``[memory]`` instants (names read of instants alone: few)."""
    instants = codes == columns.INSTANT
    if not instants.any():
        return 0
    return int(columns.among(columns.select(events, instants), "name", MEMORY_NAMES).sum())


ROLES = {**{c: 1 for c in CPU_OP_CATEGORIES}, **{c: 2 for c in RUNTIME_CATEGORIES}}


def _holding(events: list, ui_x: np.ndarray, x: np.ndarray, drop: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Rows (key, ts, dur, seq) of the kept CPU ops a ``holding_ops`` load may leave out (not ProfilerSteps),
    and rows (key, ts) of its kept runtime calls, which keep the ops around them."""
    at = ui_x[:, -1][~drop[ui_x[:, -1]]]  # each row of ``x``'s event
    role = columns.codes(events, "cat", ROLES)[at]
    ops = np.flatnonzero(role == 1)
    ops = ops[~columns.starts_with([events[i] for i in at[ops].tolist()], "name", columns.PROFILER_STEP)]
    return x[ops], x[role == 2, :2]


def _memory_at(events: list, codes: np.ndarray, ts: np.ndarray, drop: np.ndarray, keys: dict) -> np.ndarray:
    """Rows (key, ts) of the kept [memory] events, which keep the ops around them too (their threads join
    ``keys``). ``TypeError`` for an unhashable pid or tid."""
    instants = (codes == columns.INSTANT) & ~drop
    memory = np.flatnonzero(instants)[columns.among(columns.select(events, instants), "name", MEMORY_NAMES)]
    memory = memory[np.isfinite(ts[memory])]
    pairs = [(events[i].get("pid"), unsigned_tid(t) if (t := events[i].get("tid")).__class__ is int else t)
             for i in memory.tolist()]
    if not pairs:
        return np.empty((0, 2), np.int64)
    return np.column_stack([np.array([keys.setdefault(k, len(keys)) for k in pairs], dtype=np.int64),
                            us_to_ns_array(ts[memory]).astype(np.int64)])


def _pieces(kept: list, ends: bool) -> tuple[list[bytes], bytes]:
    """The kept events serialized by ``SEGMENT``; with ``ends``, each event's end in its piece too (one dump
    per event: the same text, so events can be left out of a piece by slicing it)."""
    if not ends:
        return [orjson.dumps(kept[i : i + SEGMENT])[1:-1] for i in range(0, len(kept), SEGMENT)], b""
    held, at = [], []
    for i in range(0, len(kept), SEGMENT):
        parts = list(map(orjson.dumps, kept[i : i + SEGMENT]))
        held.append(b",".join(parts))
        at.append(np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)) + 1) - 1)
    return held, np.concatenate(at).tobytes() if at else b""


def gather(events: list, kind: LoadKind | str, ts: np.ndarray | None = None,
           write: bool = False) -> ChunkResult:
    """Columns of one chunk's events, keeping what load ``kind`` keeps (``ts``: ``top_level_ts`` if made;
    ``write``: put ``Rebase.integers`` values in kept events). Skimming kinds make no span or flow ids."""
    kind = kind_of(kind)
    full = kind.full
    try:
        codes = columns.phase_codes(events)
    except TypeError:
        # An item that is no object: Perfetto refuses the trace (a subset load would drop it
        # unseen), so every command refuses it.
        for e in events:
            if e.__class__ is not dict:
                raise BadValue(f"an item of traceEvents is {_short(e)}, not an event object") from None
        raise
    is_x, is_flow = codes == columns.X, codes == columns.FLOW
    flow_ids = used_flow_ids(events) if not kind.skim else np.empty(0, np.int64)
    drop = np.zeros(len(events), dtype=bool) if kind.flows else is_flow.copy()
    if kind.subset:
        drop |= ~_subset_keeps(events, codes, kind, drop)
    if ts is None:
        ts = top_level_ts(events)
    # Keys of the (pid, tid) as written, before negative tids change below: what the UI sees.
    threads = columns.threads(events, is_x, is_flow)
    ui_x, ui_flows, durs = _timed_rows(events, ts, threads.key, is_x, is_flow)
    kept = columns.select(events, ~drop) if drop.any() else events
    seq_of = np.cumsum(~drop, dtype=np.int64) - 1
    if write:
        write_ts(kept, ts[~drop])
    if not full:  # the engine reads these re-serialized: give negative tids their unsigned value
        for i in threads.negative[~drop[threads.negative]].tolist():
            events[i]["tid"] = unsigned_tid(events[i]["tid"])
    keys: dict = {}
    to_engine = _engine_keys(threads.keys, keys, full)
    x = _kept_rows(ui_x, to_engine, drop, seq_of)
    flows = _kept_rows(ui_flows, to_engine, drop, seq_of) if kind.flows else ui_flows[:0]
    if kind.args is not None:
        trimmed = is_x & ~drop
        if kind.whole_args:
            trimmed[trimmed] = ~columns.among(columns.select(events, trimmed), "cat", kind.whole_args)
        if kind.whole_args_names:
            trimmed[trimmed] = ~columns.starts_with(columns.select(events, trimmed), "name",
                                                    kind.whole_args_names)
        columns.keep_args(columns.select(events, trimmed), kind.args)
    names: dict = {}
    for ev in columns.select(events, codes == columns.META):
        args = ev.get("args")
        if ev.get("name") == "thread_name" and isinstance(args, dict) and isinstance(args.get("name"), str):
            with suppress(TypeError):  # an unhashable pid or tid
                names[(ev.get("pid"), ev.get("tid"))] = args["name"]
    ops = anchors = x[:0]
    if kind.holding_ops:
        try:
            ops, calls = _holding(events, ui_x, x, drop)
            anchors = np.concatenate([calls, _memory_at(events, codes, ts, drop, keys)])
        except TypeError:  # an unhashable pid or tid: every op kept
            ops, anchors = x[:0], None
    held, ends = (None, b"") if full else _pieces(kept, kind.holding_ops)
    return ChunkResult(events=len(kept), keys=list(keys), x=x.tobytes(), flows=flows.tobytes(),
                       names=names, held=held, flow_ids=flow_ids.tobytes(),
                       span=_span(events, codes, ts, durs) if kind.subset and not kind.skim
                       else None,
                       parsed=len(events), memory=_memory_events(events, codes),
                       ui_keys=list(threads.keys), ui_x=ui_x.tobytes(),
                       ui_flows=ui_flows.tobytes(), ops=ops.tobytes(), ends=ends,
                       anchors=None if anchors is None else anchors.tobytes())


def _preparer(rebase: Rebase, kind: LoadKind):
    """``chunks.scan``'s ``prepare``: ``rebase.rewrite``, cutting the events ``kind`` drops
    from the text first when it skims (``read.skim``) and the caller lets it."""
    skim = Skim(kind) if kind.skim else None

    def prepare(text: bytes, cut: bool = True) -> tuple[bytes, int]:
        return rebase.rewrite(text, skim if cut else None)

    return prepare


def _rebased_events(events: list, text: bytes, tail: bool, layout: chunks.Layout, rebase: Rebase,
                    skimmed: int = 0) -> tuple[list, bool, np.ndarray | None, bool]:
    """(events, exact path needed, rebased ``top_level_ts`` or None, ts still to write) for ``events`` from
    ``rebase``'s last ``rewrite`` of ``text``; the exact path reparses all events, none skimmed.
    ``BelowBase`` below the base."""
    if rebase.numeric:
        ts = rebase.integers(events)
        if ts is not None:
            return events, False, ts, rebase.prefix is not None
        original = top_level_ts(chunks.parse(text, tail, layout) if skimmed else events)
    else:
        ts = top_level_ts(events) if rebase.prefix is not None else None
        if rebase.verified(ts, rebase.replaced):
            return events, False, ts, False
        original = top_level_ts(chunks.parse(text, tail, layout))  # the exact path is rare
    events = chunks.parse(clamp_wide_ints(rebase.exact(text)), tail, layout)
    return events, True, rebase.check(original, top_level_ts(events)), False


def read_chunk(text: bytes, tail: bool, array_form: bool, kind: str,
               prefix: bytes | None, sep: bytes | None, numeric: bool) -> ChunkResult:
    """Rebase, parse and gather one chunk cut without confirmation (in a worker process)."""
    layout = chunks.Layout(array_form=array_form)
    rebase = Rebase(prefix, sep, numeric, fixed=True)  # the main process chose the prefix
    try:
        with no_gc():
            _, parsed, skimmed = chunks.parse_prepared(text, tail, layout,
                                                       _preparer(rebase, kind_of(kind)))
            events, exact, ts, write = _rebased_events(parsed, text, tail, layout, rebase, skimmed)
    except (orjson.JSONDecodeError, chunks.NotChromeJson, chunks.MalformedJson) as e:
        return ChunkResult(error=str(e))
    except BelowBase:
        return ChunkResult(below_base=True)
    with no_gc():
        result = gather(events, kind, ts, write)
        del events
    result.exact = exact
    if tail:
        result.trailer = layout.trailer
    return result


def rebased_chunks(blocks: Iterable[bytes], rebase: Rebase, written: bool = True,
                   kind: LoadKind | str = "full") -> Iterator[chunks.Chunk | chunks.Layout]:
    """Confirmed chunks (``chunks.scan``) with exactly rebased timestamps, then the layout. ``written`` False:
    ``chunk.ts`` is left for the caller to write into kept events (``chunk.write``)."""
    for item in chunks.scan(blocks, _preparer(rebase, kind_of(kind))):
        if isinstance(item, chunks.Layout):
            rebase.last_text = b""  # the plan keeps the rebase, not its last chunk
        else:
            item.events, item.exact, item.ts, item.write = _rebased_events(
                item.events, rebase.last_text, item.last, chunks.Layout(array_form=item.array_form),
                rebase, item.skimmed)
            if written and item.write:
                write_ts(item.events, item.ts)
                item.write = False
        yield item


def sequential(blocks: Iterable[bytes], rebase: Rebase, kind: LoadKind | str
               ) -> Iterator[ChunkResult | chunks.Layout]:
    """Results chunk by chunk in this process, each cut confirmed; then the layout."""
    kind = kind_of(kind)
    with no_gc():
        for item in rebased_chunks(blocks, rebase, written=False, kind=kind):
            if isinstance(item, chunks.Layout):
                yield item
                return
            events, item.events = item.events, None
            result = gather(events, kind, item.ts, item.write)
            result.exact = item.exact
            del events
            yield result


def parallel(blocks: Iterable[bytes], rebase: Rebase, kind: LoadKind | str, workers: int = 2
             ) -> Iterator[ChunkResult | chunks.Layout]:
    """Results in chunk order from workers, then the layout (trailer set). ``Unconfirmed`` if a chunk does not
    parse or a worker fails: the caller rescans with ``sequential``, which reports bad JSON precisely."""
    from ..processes import Pool, WorkerFailed

    kind = kind_of(kind)
    trailer: dict = {}
    pending: list = []  # the chunks' results, in chunk order

    def done() -> ChunkResult:
        try:
            result = pending.pop(0).result()
        except WorkerFailed as e:
            raise Unconfirmed(str(e)) from None
        if result.below_base:
            raise BelowBase("a timestamp lies below the base")
        if result.error is not None:
            raise Unconfirmed(result.error)
        if result.trailer is not None:
            trailer.update(result.trailer)
        return result

    try:
        pool = Pool(workers, spawn=True, reuse_heap=True)
    except WorkerFailed as e:
        raise Unconfirmed(str(e)) from None
    with pool:
        for item in chunks.scan(blocks, confirm=False):
            if isinstance(item, chunks.Layout):
                while pending:
                    yield done()
                item.trailer = trailer
                yield item
                return
            rebase.choose(item.text)
            pending.append(pool.submit(read_chunk, item.text, item.last, item.array_form,
                                       kind.name, rebase.prefix, rebase.sep, rebase.numeric))
            item.text = b""
            while len(pending) > 2 * workers:
                yield done()
