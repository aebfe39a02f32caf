"""Serialize events to add to a trace, one compact line each, from equal-length columns (a scalar repeats);
ts in engine ns + ``base_ns``, written as exact µs. Kineto's categories are refused: a reload counts them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import orjson

from ..read import source
from ..read.kinds import (
    ANNOTATION_CATEGORIES,
    CPU_OP_CATEGORIES,
    GPU_ONLY_CATEGORIES,
    SYNC_CATEGORIES,
)
from ..sorted_ints import among


def us(ns: int) -> str:
    """ns to the µs text Chrome JSON uses, exact (``123.456``, or ``123``)."""
    q, r = divmod(ns, 1000)
    return f"{q}" if r == 0 else f"{q}.{r:03d}"


def us_bytes(abs_ns: np.ndarray) -> list[bytes]:
    """``us`` over an array of ns, as bytes: the whole µs and the fractions (``1xyz`` with
    its ``1`` dropped: three digits) each by one ``orjson.dumps``."""
    ns = abs_ns.astype(np.int64)
    if not len(ns):
        return []
    q, r = np.divmod(ns, 1000)
    out = orjson.dumps(q.tolist())[1:-1].split(b",")
    frac = np.flatnonzero(r)
    if len(frac):
        for i, d in zip(frac.tolist(), orjson.dumps((r[frac] + 1000).tolist())[1:-1].split(b",")):
            out[i] += b"." + d[1:]
    return out


def _json(value) -> bytes:
    return orjson.dumps(value.item() if hasattr(value, "item") else value)


def counter_events(series: dict[str, np.ndarray], base_ns: int, name: str, arg, hta: bool,
                   id_column: bool = False) -> list[bytes]:
    """One ``"ph":"C"`` event per row of a series (columns ``pid, key, ts, value``); ``name`` and ``arg``
    may be callables of the row's key (the track's name parts)."""
    if not len(series["ts"]):
        return []
    ts = us_bytes(series["ts"].astype(np.int64) + base_ns)
    values = orjson.dumps(series["value"].tolist())[1:-1].split(b",")
    tracks: dict = {}  # (pid, key) -> its number, in order of first appearance
    codes = [tracks.setdefault(k, len(tracks))
             for k in zip(series["pid"].tolist(), series["key"].tolist())]
    head, mid, tail = [], [], []
    for pid, key in tracks:
        n = _json(name(key) if callable(name) else name)
        a = _json(arg(key) if callable(arg) else arg)
        if hta:  # HTA's key order: pid, ts, args, ph, name[, id]
            ident = b',"id":' + _json(key) if id_column else b""
            head.append(b'{"pid":' + _json(pid) + b',"ts":')
            tail.append(b'},"ph":"C","name":' + n + ident + b"}")
        else:
            head.append(b'{"ph":"C","name":' + n + b',"pid":' + _json(pid) + b',"ts":')
            tail.append(b"}}")
        mid.append(b',"args":{' + a + b":")
    return [head[c] + t + mid[c] + v + tail[c] for c, t, v in zip(codes, ts, values, strict=True)]


# Categories an added event never uses: a reloaded output would count it as real work
# (kernels, copies, sets, runtime calls, CPU ops, annotations of either Kineto schema).
RESERVED_CATEGORIES = (GPU_ONLY_CATEGORIES | CPU_OP_CATEGORIES | ANNOTATION_CATEGORIES
                       | SYNC_CATEGORIES | {"python_function", "ac2g", "fwdbwd", "async"})
_ID_FORMS = re.compile(rb'"(?:id|bind_id)"\s*:\s*(?:(-?\d+)|"(?:0[xX])?([0-9a-fA-F]{1,16})")')


def _column(values, n: int) -> list:
    """A column as a list of n Python values; a scalar (str, number, None) repeats."""
    if values is None or isinstance(values, (str, bytes, int, float, np.generic)):
        return [values.item() if isinstance(values, np.generic) else values] * n
    out = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if len(out) != n:
        raise ValueError(f"columns differ in length: {len(out)} values for {n} events")
    return out


def _categories(cat, n: int) -> list:
    cats = _column(cat, n)
    bad = RESERVED_CATEGORIES.intersection(c for c in set(cats) if isinstance(c, str))
    if bad:
        raise ValueError(f"added events never use Kineto's categories: {', '.join(sorted(bad))}")
    return cats


_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def _dumps(values: list) -> list[bytes]:
    """Each value as compact JSON (numpy scalars as numbers), dumped once per distinct value and copied:
    ``orjson.dumps``'s bytes keep its ~4 KB working buffer."""
    done: dict = {}
    out = []
    for v in values:
        try:
            out.append(done[v])
        except KeyError:
            out.append(done.setdefault(v, bytes(orjson.dumps(v, option=_NUMPY))))
        except TypeError:  # unhashable: its own copy
            out.append(bytes(orjson.dumps(v, option=_NUMPY)))
    return out


def _times(ts, n: int, base_ns: int) -> list[bytes]:
    return us_bytes(np.asarray(_column(ts, n), dtype=np.int64) + base_ns)


def _field(values, n: int) -> list[bytes] | bytes:
    """A column serialized: one bytes value for a scalar (the same in every row), else a
    list (integer arrays by one ``orjson.dumps``)."""
    if values is None or isinstance(values, (str, bytes, int, float, np.generic)):
        return _dumps(_column(values, 1))[0]
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu" and len(values) == n:
        return orjson.dumps(values.tolist())[1:-1].split(b",") if n else []
    return _dumps(_column(values, n))


def _args(args, n: int) -> list[bytes | None]:
    """Each row's args as JSON (None: no args): dicts serialized, bytes taken as they are."""
    rows = _column(args, n)
    if all(a.__class__ is bytes for a in rows):
        return rows
    return [a if a is None or isinstance(a, bytes) else orjson.dumps(a, option=_NUMPY) for a in rows]


def _events(ph: bytes, n: int, fields: dict[str, list[bytes] | bytes],
            args: list[bytes | None] | None) -> list[bytes]:
    """``{"ph":ph, field: value, ..., "args": {...}}`` per row, by one ``%`` of a bytes template per row;
    a field given as one bytes value is the same in every row and goes into the template."""
    def escaped(b: bytes) -> bytes:
        return b.replace(b"%", b"%%")

    columns = [v for v in fields.values() if not isinstance(v, bytes)]
    template = b'{"ph":"' + escaped(ph) + b'"' + b"".join(
        b',"' + escaped(k.encode()) + b'":' + (escaped(v) if isinstance(v, bytes) else b"%b")
        for k, v in fields.items())
    if args is None:
        template += b"}"
    elif None not in args:
        template += b',"args":%b}'
        columns.append(args)
    else:
        template += b"%b"
        columns.append([b"}" if a is None else b',"args":' + a + b"}" for a in args])
    if not columns:
        return [template % ()] * n
    return [template % row for row in zip(*columns)]


def _length(*columns) -> int:
    for c in columns:
        if c is not None and not isinstance(c, (str, bytes, int, float, np.generic)):
            return len(c)
    return 1


def slice_events(pid, tid, ts, dur, name, cat, args=None, base_ns: int = 0) -> list[bytes]:
    """One complete event (``"ph":"X"``) per row: ``ts`` / ``dur`` in engine ns (``ts + base_ns`` is written),
    other columns values or scalars, ``args`` dicts, their JSON as bytes, or None."""
    n = _length(pid, tid, ts, dur, name)
    durs = np.asarray(_column(dur, n), dtype=np.int64)
    if (durs < 0).any():
        raise ValueError("a complete event needs dur >= 0")
    _categories(cat, n)
    return _events(b"X", n, {"cat": _field(cat, n), "name": _field(name, n),
                             "pid": _field(pid, n), "tid": _field(tid, n),
                             "ts": _times(ts, n, base_ns), "dur": us_bytes(durs)},
                   None if args is None else _args(args, n))


def instant_events(pid, tid, ts, name, cat, args=None, base_ns: int = 0, scope: str = "t"
                   ) -> list[bytes]:
    """One instant event (``"ph":"i"``) per row; ``scope`` "t" (thread), "p" or "g"."""
    n = _length(pid, tid, ts, name)
    _categories(cat, n)
    return _events(b"i", n, {"cat": _field(cat, n), "name": _field(name, n),
                             "pid": _field(pid, n), "tid": _field(tid, n),
                             "ts": _times(ts, n, base_ns), "s": _field(scope, n)},
                   None if args is None else _args(args, n))


def async_slice_events(pid, tid, ts, dur, name, cat, ident: str, args=None, base_ns: int = 0,
                       track_name: str | None = None) -> list[bytes]:
    """A process-scoped async slice (``b`` + ``e``) per row, all of async id ``ident``: one Perfetto track
    named ``track_name`` if given. Rows in time order, none overlapping (``e`` precedes ``b`` at one ts)."""
    n = _length(pid, tid, ts, dur, name)
    durs = np.asarray(_column(dur, n), dtype=np.int64)
    if (durs < 0).any():
        raise ValueError("a slice needs dur >= 0")
    _categories(cat, n)
    starts = np.asarray(_column(ts, n), dtype=np.int64)
    common = {"cat": _field(cat, n), "id2": b'{"local":' + _dumps([ident])[0] + b"}",
              "pid": _field(pid, n), "tid": _field(tid, n)}
    begin = _events(b"b", n, {**common, "name": _field(name, n),
                              "ts": _times(starts, n, base_ns)},
                    None if args is None else _args(args, n))
    end = _events(b"e", n, {**common, "ts": _times(starts + durs, n, base_ns)}, None)
    head = [] if track_name is None or not n else _events(
        b"n", 1, {**{k: v if isinstance(v, bytes) else v[:1] for k, v in common.items()},
                  "name": _field(track_name, 1), "ts": _times(starts[:1], 1, base_ns)}, None)
    return head + [e for pair in zip(begin, end) for e in pair]


def flow_events(src_pid, src_tid, src_ts, dst_pid, dst_tid, dst_ts, ids, cat, name, args=None,
                base_ns: int = 0) -> list[bytes]:
    """An arrow per row: ``s`` bound to the slice open at (src thread, src_ts), ``f`` (``bp: e``) to the one
    enclosing (dst thread, dst_ts); ``ids`` from ``flow_ids`` (Perfetto joins ends on (id, cat, name))."""
    n = len(ids)
    _categories(cat, n)
    cats, names, ident = _field(cat, n), _field(name, n), _field(ids, n)
    a = None if args is None else _args(args, n)  # serialized once for both ends
    start = _events(b"s", n, {"id": ident, "cat": cats, "name": names,
                              "pid": _field(src_pid, n), "tid": _field(src_tid, n),
                              "ts": _times(src_ts, n, base_ns)}, a)
    end = _events(b"f", n, {"bp": b'"e"', "id": ident, "cat": cats, "name": names,
                            "pid": _field(dst_pid, n), "tid": _field(dst_tid, n),
                            "ts": _times(dst_ts, n, base_ns)}, a)
    return [e for pair in zip(start, end) for e in pair]


def used_flow_ids(path) -> np.ndarray:
    """Every flow id in the file (v1 ``"id"``, v2 ``"bind_id"``) as Perfetto reads them (strings as hex),
    sorted and unique; any other key named ``id`` counts too (costing only an id not chosen)."""
    found: list[tuple[bytes, bytes]] = []
    tail = b""
    for block in source.iter_blocks(Path(path)):
        text = tail + block
        cut = text.rfind(b",") + 1  # no id crosses a comma: the rest goes with the next block
        found += _ID_FORMS.findall(text, 0, cut)
        tail = text[cut:]
    found += _ID_FORMS.findall(tail)
    ids = [int(number) if number else int(hexa, 16) for number, hexa in found]
    return np.unique(np.array([i for i in ids if 0 <= i < 1 << 63], dtype=np.int64))


def flow_ids(trace, n: int, start: int = 1, other=None) -> np.ndarray:
    """``n`` flow ids (int64, from ``start`` up) no flow of the trace's file (nor ``other``'s) uses, counting
    every event of the file, not only the loaded ones (pass 1's set, else the file is scanned here)."""
    used = np.union1d(*(_used(t) for t in (trace, other if other is not None else trace)))
    candidates = np.arange(start, start + n + len(used), dtype=np.int64)
    free = candidates[~among(candidates, used)]
    return free[:n]


def _used(trace) -> np.ndarray:
    plan = getattr(trace, "plan", None)
    return plan.flow_ids if plan is not None and plan.flow_ids is not None else used_flow_ids(trace.file)


def _metadata(what: bytes, pid, tid, name, sort_index) -> list[bytes]:
    n = _length(pid, tid, name, sort_index)
    pids = _dumps(_column(pid, n))
    fields = {"name": b'"' + what + b'_name"', "pid": pids}
    if tid is not None:
        fields["tid"] = _dumps(_column(tid, n))
    out = _events(b"M", n, fields, _args([{"name": v} for v in _column(name, n)], n))
    if sort_index is not None:
        fields = {**fields, "name": b'"' + what + b'_sort_index"'}
        out += _events(b"M", n, fields, _args([{"sort_index": v} for v in _column(sort_index, n)], n))
    return out


def process_name_events(pid, name, sort_index=None) -> list[bytes]:
    """``process_name`` (and ``process_sort_index``) metadata per row."""
    return _metadata(b"process", pid, None, name, sort_index)


def thread_name_events(pid, tid, name, sort_index=None) -> list[bytes]:
    """``thread_name`` (and ``thread_sort_index``) metadata per row."""
    return _metadata(b"thread", pid, tid, name, sort_index)
