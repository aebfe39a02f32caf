"""Serialize events to add to a trace: exact timestamps, one compact line each."""

from __future__ import annotations

import numpy as np
import orjson


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
