"""Serialize events to add to a trace: exact timestamps, one compact line each.

Builders take columns (sequences or numpy arrays of equal length; a scalar repeats) with
timestamps in engine ns plus the trace's ``base_ns``, written as exact µs text (``us``).
Added events never use Kineto's categories (``RESERVED_CATEGORIES``), so a reloaded output
never counts an overlay as real work.
"""

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


def us(ns: int) -> str:
    """ns to the µs text Chrome JSON uses, exact (``123.456``, or ``123``)."""
    q, r = divmod(ns, 1000)
    return f"{q}" if r == 0 else f"{q}.{r:03d}"


def us_bytes(abs_ns: np.ndarray) -> list[bytes]:
    """``us`` over an array of ns, as bytes: whole µs by one ``orjson.dumps``, ``us``
    itself only where there is a fraction."""
    ns = abs_ns.astype(np.int64)
    out = orjson.dumps((ns // 1000).tolist())[1:-1].split(b",") if len(ns) else []
    for i in np.flatnonzero(ns % 1000).tolist():
        out[i] = us(int(ns[i])).encode()
    return out


def _json(value) -> bytes:
    return orjson.dumps(value.item() if hasattr(value, "item") else value)


def counter_events(series: dict[str, np.ndarray], base_ns: int, name: str, arg, hta: bool,
                   id_column: bool = False) -> list[bytes]:
    """One ``"ph":"C"`` event per row of a series (columns ``pid, key, ts, value``).

    ``name`` and ``arg`` may be callables of the row's key (the track's name parts). The
    text around the time and value is built once per track, the values in one dumps.
    """
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
    """Each value as compact JSON (numpy scalars as numbers), once per distinct value.
    ``orjson.dumps`` returns bytes that keep its ~4 KB working buffer: one per row took
    570 MB per column of 145k rows."""
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


def _events(ph: bytes, fields: dict[str, list[bytes]], args: list | None) -> list[bytes]:
    """``{"ph":ph, field: value, ..., "args": {...}}`` per row of the serialized columns: one
    ``%`` of a bytes template per row (a join per field cost 3 s on 400k events)."""
    columns = list(fields.values())
    n = len(columns[0]) if columns else 0
    tails = [b"}"] * n if args is None else [
        b"}" if a is None else b',"args":' + orjson.dumps(a, option=_NUMPY) + b"}" for a in args]
    template = (b'{"ph":"' + ph.replace(b"%", b"%%") + b'"'
                + b"".join(b',"' + k.encode().replace(b"%", b"%%") + b'":%b' for k in fields) + b"%b")
    return [template % row for row in zip(*columns, tails)]


def _length(*columns) -> int:
    for c in columns:
        if c is not None and not isinstance(c, (str, bytes, int, float, np.generic)):
            return len(c)
    return 1


def slice_events(pid, tid, ts, dur, name, cat, args=None, base_ns: int = 0) -> list[bytes]:
    """One complete event (``"ph":"X"``) per row: ``ts`` / ``dur`` engine ns (``ts`` plus
    ``base_ns`` is written), the other columns values or scalars, ``args`` dicts or None."""
    n = _length(pid, tid, ts, dur, name)
    durs = np.asarray(_column(dur, n), dtype=np.int64)
    if (durs < 0).any():
        raise ValueError("a complete event needs dur >= 0")
    return _events(b"X", {"cat": _dumps(_categories(cat, n)), "name": _dumps(_column(name, n)),
                          "pid": _dumps(_column(pid, n)), "tid": _dumps(_column(tid, n)),
                          "ts": _times(ts, n, base_ns), "dur": us_bytes(durs)},
                   None if args is None else _column(args, n))


def instant_events(pid, tid, ts, name, cat, args=None, base_ns: int = 0, scope: str = "t"
                   ) -> list[bytes]:
    """One instant event (``"ph":"i"``) per row; ``scope`` "t" (thread), "p" or "g"."""
    n = _length(pid, tid, ts, name)
    return _events(b"i", {"cat": _dumps(_categories(cat, n)), "name": _dumps(_column(name, n)),
                          "pid": _dumps(_column(pid, n)), "tid": _dumps(_column(tid, n)),
                          "ts": _times(ts, n, base_ns), "s": _dumps(_column(scope, n))},
                   None if args is None else _column(args, n))


def flow_events(src_pid, src_tid, src_ts, dst_pid, dst_tid, dst_ts, ids, cat, name, args=None,
                base_ns: int = 0) -> list[bytes]:
    """One arrow per row: a ``"ph":"s"`` bound to the slice open at (src thread, src_ts) and
    a ``"ph":"f","bp":"e"`` bound to the slice enclosing (dst thread, dst_ts). Give a ts
    inside each intended slice, and ``ids`` from ``flow_ids`` (flows v1: Perfetto joins an
    arrow's ends on (id, cat, name))."""
    n = len(ids)
    cats, names, ident = _dumps(_categories(cat, n)), _dumps(_column(name, n)), _dumps(_column(ids, n))
    a = None if args is None else _column(args, n)
    start = _events(b"s", {"id": ident, "cat": cats, "name": names,
                           "pid": _dumps(_column(src_pid, n)), "tid": _dumps(_column(src_tid, n)),
                           "ts": _times(src_ts, n, base_ns)}, a)
    end = _events(b"f", {"bp": [b'"e"'] * n, "id": ident, "cat": cats, "name": names,
                         "pid": _dumps(_column(dst_pid, n)), "tid": _dumps(_column(dst_tid, n)),
                         "ts": _times(dst_ts, n, base_ns)}, a)
    return [e for pair in zip(start, end) for e in pair]


def used_flow_ids(path) -> np.ndarray:
    """Every flow id in the file, in both forms (``"id"`` of v1 flow events, ``"bind_id"``
    of v2), as Perfetto reads them (string ids as hex), sorted and unique. Any other key
    named ``id`` counts too: an id more is only one not chosen."""
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


def flow_ids(trace, n: int) -> np.ndarray:
    """``n`` flow ids (int64, from 1 up) that no flow of the trace's file uses, in either
    form: every event of the file counts, not only the ones its load kept (pass 1 gathered
    them; a trace it did not plan is scanned here)."""
    plan = getattr(trace, "plan", None)
    used = plan.flow_ids if plan is not None and plan.flow_ids is not None else used_flow_ids(trace.file)
    candidates = np.arange(1, n + len(used) + 1, dtype=np.int64)
    free = candidates[~_among(candidates, used)]
    return free[:n]


def _among(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    if not len(sorted_keys):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return sorted_keys[at] == values


def _metadata(what: bytes, pid, tid, name, sort_index) -> list[bytes]:
    n = _length(pid, tid, name, sort_index)
    pids = _dumps(_column(pid, n))
    fields = {"name": [b'"' + what + b'_name"'] * n, "pid": pids}
    if tid is not None:
        fields["tid"] = _dumps(_column(tid, n))
    out = _events(b"M", fields, [{"name": v} for v in _column(name, n)])
    if sort_index is not None:
        fields = {**fields, "name": [b'"' + what + b'_sort_index"'] * n}
        out += _events(b"M", fields, [{"sort_index": v} for v in _column(sort_index, n)])
    return out


def process_name_events(pid, name, sort_index=None) -> list[bytes]:
    """``process_name`` (and ``process_sort_index``) metadata per row."""
    return _metadata(b"process", pid, None, name, sort_index)


def thread_name_events(pid, tid, name, sort_index=None) -> list[bytes]:
    """``thread_name`` (and ``thread_sort_index``) metadata per row."""
    return _metadata(b"thread", pid, tid, name, sort_index)
