"""Serialize events to add to a trace: exact timestamps, one compact line each."""

from __future__ import annotations

import numpy as np
import orjson
import pandas as pd


def us(ns: int) -> str:
    """ns to the µs text Chrome JSON uses, exact (``123.456``, or ``123``)."""
    q, r = divmod(ns, 1000)
    return f"{q}" if r == 0 else f"{q}.{r:03d}"


def us_text(abs_ns: np.ndarray) -> list[str]:
    """``us`` over an array of ns."""
    return [us(n) for n in abs_ns.astype(np.int64).tolist()]


def counter_events(series: pd.DataFrame, base_ns: int, name: str, arg, hta: bool,
                   id_column: bool = False) -> list[bytes]:
    """One ``"ph":"C"`` event per row of a series (``pid, key, ts, value``).

    ``name`` and ``arg`` may be callables of the row's key (the track's name parts).
    """
    if series.empty:
        return []
    ts = us_text(series["ts"].to_numpy(np.int64) + base_ns)
    out = []
    for (pid, key, value), t in zip(series[["pid", "key", "value"]].itertuples(index=False, name=None),
                                    ts, strict=True):
        n = name(key) if callable(name) else name
        a = arg(key) if callable(arg) else arg
        v = orjson.dumps(value.item() if hasattr(value, "item") else value).decode()
        p = orjson.dumps(pid.item() if hasattr(pid, "item") else pid).decode()
        if hta:  # HTA's key order: pid, ts, args, ph, name[, id]
            ident = f',"id":{orjson.dumps(key.item() if hasattr(key, "item") else key).decode()}' \
                if id_column else ""
            out.append(f'{{"pid":{p},"ts":{t},"args":{{{orjson.dumps(a).decode()}:{v}}},"ph":"C",'
                       f'"name":{orjson.dumps(n).decode()}{ident}}}'.encode())
        else:
            out.append(f'{{"ph":"C","name":{orjson.dumps(n).decode()},"pid":{p},"ts":{t},'
                       f'"args":{{{orjson.dumps(a).decode()}:{v}}}}}'.encode())
    return out
