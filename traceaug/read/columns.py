"""Columns of a chunk's parsed events (dicts) by ``map`` over C methods and numpy, no bytecode per event;
each falls back to a comprehension when C refuses a value. Pass-1 workers import it: import nothing heavy."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from itertools import compress, repeat
from operator import is_not

import numpy as np

# Phase codes: complete, flow (v1), metadata, instant, no "ph" at all, anything else.
OTHER, X, FLOW, META, INSTANT, NO_PHASE = 0, 1, 2, 3, 4, 5
_PHASES = {"X": X, "s": FLOW, "t": FLOW, "f": FLOW, "M": META, "i": INSTANT, None: NO_PHASE}
PROFILER_STEP = "ProfilerStep#"


def values(events: list, key: str) -> Iterator:
    """Every event's value of ``key`` (None where it has none), one at a time."""
    return map(dict.get, events, repeat(key))


def column(events: list, key: str) -> list:
    """Every event's value of ``key`` (None where it has none)."""
    return list(values(events, key))


def select(values: list, mask: np.ndarray) -> list:
    """The ``values`` where ``mask`` is set, in order."""
    return list(compress(values, mask.tolist()))


def present(events: list, key: str) -> list:
    """The events' values of ``key`` that are not None, in order."""
    return list(filter(partial(is_not, None), values(events, key)))


def phase_codes(events: list) -> np.ndarray:
    """int8 code of each event's ``ph`` (``X``, ``FLOW``, ...; a list or object is ``OTHER``).
    ``TypeError`` when an event is no dict."""
    return codes(events, "ph", _PHASES, OTHER)


def codes(events: list, key: str, table: dict, default: int = 0) -> np.ndarray:
    """int8 ``table[value]`` of each event's value of ``key`` (``default`` when it has none
    of the table's, whose keys are strings or None). ``TypeError`` when an event is no dict."""
    try:
        return np.fromiter(map(table.get, values(events, key), repeat(default)), np.int8,
                           len(events))
    except TypeError:  # an unhashable value (or an event that is no dict: raised again here)
        return np.array([table.get(v, default) if v is None or v.__class__ is str else default
                         for v in column(events, key)], dtype=np.int8)


def among(events: list, key: str, names: frozenset) -> np.ndarray:
    """Which events' values of ``key`` are strings in ``names``."""
    try:
        return np.fromiter(map(names.__contains__, values(events, key)), bool, len(events))
    except TypeError:  # an unhashable value
        return np.array([v.__class__ is str and v in names for v in column(events, key)],
                        dtype=bool)


def starts_with(events: list, key: str, prefix: str | tuple[str, ...]) -> np.ndarray:
    """Which events' values of ``key`` are strings starting with ``prefix`` (or one of them)."""
    try:
        return np.fromiter(map(str.startswith, values(events, key), repeat(prefix)), bool,
                           len(events))
    except TypeError:  # a value that is no string
        return np.array([v.__class__ is str and v.startswith(prefix) for v in column(events, key)],
                        dtype=bool)


@dataclass
class Threads:
    """The (pid, tid) of a chunk's events."""

    keys: dict  # (pid, tid) -> key, numbered by first appearance among complete then flow events
    key: np.ndarray  # each event's key; -1 for other events and unhashable pid / tid (Perfetto judges those)
    negative: np.ndarray  # positions of events whose tid is a negative int


def threads(events: list, first: np.ndarray, then: np.ndarray) -> Threads:
    """``Threads`` of the events, ``first`` and ``then`` being the complete and flow events.
    Three passes in C (pairs, distinct pairs, each event's pair); the order is numpy's."""
    pairs = list(zip(values(events, "pid"), values(events, "tid")))
    try:
        every = dict.fromkeys(pairs)
    except TypeError:
        return _threads_one_by_one(pairs, first, then)
    for i, k in enumerate(every):
        every[k] = i
    code = np.fromiter(map(every.__getitem__, pairs), np.int64, len(pairs))
    seen = np.zeros(len(every), dtype=bool)
    order, at = [], []
    for mask in (first, then):
        where = np.flatnonzero(mask)
        codes, firsts = np.unique(code[where], return_index=True)
        new = ~seen[codes]
        ranked = np.argsort(firsts[new], kind="stable")
        order.append(codes[new][ranked])
        at.append(where[firsts[new][ranked]])
        seen[codes] = True
    order_, at_ = np.concatenate(order), np.concatenate(at)
    number = np.full(len(every) + 1, -1, dtype=np.int64)
    number[order_] = np.arange(len(order_))
    key = number[np.where(first | then, code, len(every))]
    # A pair equal to one with a negative tid (-5.0 == -5): each event's own tid decides.
    near = np.zeros(len(every), dtype=bool)
    near[[i for (_pid, tid), i in every.items() if tid.__class__ in (int, float) and tid < 0]] = True
    negative = np.flatnonzero(near[code]) if near.any() else np.empty(0, dtype=np.int64)
    return Threads({pairs[i]: k for k, i in enumerate(at_.tolist())}, key,
                   _negative_ints(pairs, negative))


def _negative_ints(pairs: list, at: np.ndarray) -> np.ndarray:
    return np.array([i for i in at.tolist() if pairs[i][1].__class__ is int and pairs[i][1] < 0],
                    dtype=np.int64)


def _threads_one_by_one(pairs: list, first: np.ndarray, then: np.ndarray) -> Threads:
    """``threads`` when a pid or tid is unhashable: a dict lookup per event."""
    keys: dict = {}
    key = np.full(len(pairs), -1, dtype=np.int64)
    for mask in (first, then):
        at = np.flatnonzero(mask)
        key[at] = [_hashable_key(keys, pairs[i]) for i in at.tolist()]
    return Threads(keys, key, _negative_ints(pairs, np.arange(len(pairs))))


def _hashable_key(keys: dict, k: tuple) -> int:
    try:
        return keys.setdefault(k, len(keys))
    except TypeError:
        return -1


def keep_args(events: list, keep: frozenset) -> None:
    """Leave each event's args (an object) only the keys in ``keep``, in order; no ``args`` when none is (a
    CPU op's). Grouping events by their args' keys, to choose once per group, cost more than it saved."""
    for ev in events:
        args = ev.get("args")
        if args.__class__ is dict:
            if keep.isdisjoint(args):
                del ev["args"]
            else:
                ev["args"] = {k: v for k, v in args.items() if k in keep}
