"""Cut from a chunk's text the events a load drops, before they are parsed.

An analysis that writes no trace needs none of the events its kind drops: CPU ops, flow
events and runtime calls that launch nothing are 87% of the A100 trace's events and most
of the time pass 1 spends parsing and gathering. Kineto writes one event as
``{\\n    "ph": "X", "cat": "cpu_op", "name": ...`` with every inner line indented deeper
than its braces (a writer with ``indent=`` writes each key on a line, the same way); JSON
strings hold no raw newline, so the event ends at the first line indented as its ``{``.
Such events are found on their bytes and removed when their ``ph``, ``cat`` and ``name``
say the load drops them; anything else (compact one-line JSON, escaped text, keys in
another order) is parsed as before. A chunk whose removed pieces are not one event each
(as many ``"ph":`` as pieces) is parsed whole. The removed events are never parsed, so a
fault inside one (a ts that is no number, broken JSON in its args) goes unseen: only
loads for analyses that write no trace skim (``kinds.LoadKind.skim``).

A kind that keeps CPU ops or annotations but none of their args (``collectives``: each
one's "External id", "Input Dims", ...) gets those args cut too, where the event is written
``{"ph": "X", "cat": ..., "name": ..., <pid, tid, ts, dur>, "args": {...}}`` and its args
hold no brace and no escape (``_args_cut``): every ``"key":`` in them is then a key of the
args, so when none is one the kind keeps (``_keys_kept``), ``columns.keep_args`` would
delete them all. Parsing and freeing them was a third of that kind's pass 1.
This module imports nothing heavy: pass-1 worker processes import it.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from .columns import PROFILER_STEP
from .kinds import GPU_ONLY_CATEGORIES, RUNTIME_CATEGORIES, LoadKind

# The head of the first complete event: its indentation and the white space between keys.
_HEAD = re.compile(rb'\n( *)\{(\s*)"ph": "X",(\s*)"cat": "[^"\\\n]*",(\s*)"name": "')
_PH = b'"ph":'
_WS = rb'[ \t\n\r]*+'
_NEXT = _WS + rb',' + _WS
_SCALAR = rb'(?:"[^"\\\n]*+"|[-+.\w]++)'  # a string with no escape, a number or a literal
_SPACE = np.frombuffer(b" \t\n\r", np.uint8)

def _any_of(names: frozenset[str]) -> bytes:
    """A regex matching exactly ``names``, factored by their common prefixes: ``re`` tries
    alternatives one by one, and the 60 skipped calls share "cuda" and "hip"."""
    tree: dict = {}
    for name in names:
        node = tree
        for byte in name.encode():
            node = node.setdefault(byte, {})
        node[None] = None  # a name ends here

    def branch(node: dict) -> bytes:
        alternatives = [re.escape(bytes([b])) + branch(node[b]) for b in sorted(k for k in node
                                                                             if k is not None)]
        if not alternatives:
            return b""
        body = alternatives[0] if len(alternatives) == 1 else b"(?:" + b"|".join(alternatives) + b")"
        return b"(?:" + body + b")?" if None in node else body

    return branch(tree)


@lru_cache(maxsize=64)
def _pattern(kind: LoadKind, indent: bytes, gap: bytes, sep_cat: bytes, sep_name: bytes
             ) -> re.Pattern:
    """Events ``kind`` drops, written with this layout, each with the newline before it and
    the comma after: complete events of a category it does not keep (unless a
    ProfilerStep), runtime calls it skips, and flow events unless it keeps them."""
    i, g, s1, s2 = (re.escape(x) for x in (indent, gap, sep_cat, sep_name))
    name = b'",' + s2 + b'"name": "'
    step = re.escape(PROFILER_STEP.encode())
    cats = [rb'(?!' + _any_of(kind.categories) + rb'")[^"\\\n]*' + name + rb'(?!' + step
            + rb')[^"\\\n]*"']
    calls = kind.categories & RUNTIME_CATEGORIES
    if kind.skip_calls and calls:
        cats.append(_any_of(calls) + name + _any_of(kind.skip_calls) + b'"')
    phases = [rb'X",' + s1 + rb'"cat": "(?:' + b"|".join(cats) + b")"]
    if not kind.flows:
        phases.append(rb'[stf]"')
    # Possessive (``*+``): a line given back never lets the event's end match (the next line
    # starts with the indent and a space, not ``}``), so ``re`` need keep no backtrack points
    # (a quarter of the cut's time).
    start = rb'\n' + i + rb'\{' + g + rb'"ph": "'
    events = (rb'(?:' + b"|".join(phases) + rb')[^\n]*+(?:\n' + i + rb' [^\n]*+)*+\n' + i
              + rb'\},')
    strip = _args_cut(kind, sep_cat, sep_name)
    if strip is None:
        return re.compile(start + events)
    # A kept event whose args go: the start again (a lookbehind's group: ``split`` returns
    # it), the event up to its args, the args (left out), then the event's end.
    return re.compile(start + rb'(?:' + events + rb'|(?<=(' + start + rb'))' + strip + rb')')


def _args_cut(kind: LoadKind, sep_cat: bytes, sep_name: bytes) -> bytes | None:
    """The text after ``"ph": "`` of a complete event ``kind`` keeps and whose args it trims
    (``columns.keep_args``), as two groups: the event up to its args, and the args with no
    brace or backslash in them (None: the kind cuts no args). Its categories: kept ones of
    no GPU op or launch, none whose args are kept whole; names not among
    ``whole_args_names``; keys: ph, cat, name, then only pid, tid, ts and dur (a second
    ``args`` or ``cat`` would change what is parsed), then args, last."""
    cats = kind.categories - GPU_ONLY_CATEGORIES - kind.whole_args if kind.subset else frozenset()
    if kind.args is None or not cats:
        return None
    s1, s2 = re.escape(sep_cat), re.escape(sep_name)
    names = b"|".join(re.escape(p.encode()) for p in kind.whole_args_names)
    return (rb'(X",' + s1 + rb'"cat": "' + _any_of(cats) + rb'",' + s2 + rb'"name": "'
            + (rb'(?!' + names + rb')' if names else b"") + rb'[^"\\\n]*+"(?:' + _NEXT
            + rb'"(?:pid|tid|ts|dur)"' + _WS + b":" + _WS + _SCALAR + rb')*+)'
            rb'(' + _NEXT + rb'"args"' + _WS + rb':' + _WS + rb'\{[^{}\\]*+\})(?=' + _WS + rb'\})')


@lru_cache(maxsize=16)
def _key_ends(keys: frozenset[str]) -> tuple[int, dict[int, list[bytes]], np.ndarray]:
    """``keys`` and "ph" as ``_keys_kept`` looks for them: how many bytes end each (``"ph``
    has three); by the code of those last bytes of ``"key``, its ``"key`` texts; the codes."""
    quoted = [b'"' + key.encode() for key in keys | {"ph"}]
    n = min(4, *map(len, quoted))
    ends: dict[int, list[bytes]] = {}
    for q in quoted:
        ends.setdefault(int.from_bytes(q[-n:], "little"), []).append(q)
    return n, ends, np.array(sorted(ends), dtype=np.uint32)


def _keys_kept(cut: list[bytes], keys: frozenset[str]) -> set[int]:
    """Which of the ``cut`` args (texts with no brace or backslash) may hold a key in
    ``keys`` (or "ph", which the cut's check counts). In them a key is a string followed by
    ``:`` and nothing else is: each ``":`` ends one, found by numpy, its last bytes compared
    as an int, the few alike compared in full. A ``:`` after white space counts as a key."""
    blob = b"".join(cut)
    text = np.frombuffer(blob, np.uint8)
    colon = np.flatnonzero(text == 58)
    colon = colon[colon > 4]  # an args text starts with its comma and ``"args"``
    before = text[colon - 1]
    n, ends, codes = _key_ends(keys)
    at = colon[before == 34]  # '"'
    code = np.zeros(len(at), np.uint32)
    for i in range(n):  # the key's last n bytes, little-endian
        code |= text[at - 1 - n + i].astype(np.uint32) << (8 * i)
    alike = np.isin(code, codes)
    hits = [a for a, c in zip(at[alike].tolist(), code[alike].tolist())
            if any(blob.endswith(q, 0, a - 1) for q in ends[c])]
    hits += colon[np.isin(before, _SPACE)].tolist()
    if not hits:
        return set()
    ends_at = np.cumsum([len(c) for c in cut])
    return set(np.searchsorted(ends_at, hits, side="right").tolist())


class Skim:
    """Removes what ``kind`` drops from chunk texts of one trace (the layout is learnt from
    the first chunk holding a complete event written on several lines)."""

    def __init__(self, kind: LoadKind) -> None:
        self.kind = kind
        self.pattern: re.Pattern | None = None

    def __call__(self, text: bytes) -> tuple[bytes, int]:
        """``text`` without the events the load drops (and the args it deletes), and how
        many pieces were removed (0: the text as it is)."""
        if self.pattern is None:
            head = _HEAD.search(text)
            if head is None:
                return text, 0
            self.pattern = _pattern(self.kind, *head.groups())
        if self.pattern.groups:  # events and args: per match, start / event / args or 3 None
            parts = self.pattern.split(text)
            args = parts[3::4]  # None: a dropped event
            dropped = args.count(None)
            cut = list(filter(None, args))
            kept = _keys_kept(cut, self.kind.args) if cut else set()
            if kept:  # rare: put those args back
                back = iter([a if i in kept else None for i, a in enumerate(cut)])
                parts[3::4] = [a if a is None else next(back) for a in args]
            else:
                parts[3::4] = [None] * len(args)
            short = b"".join(filter(None, parts))
            removed = dropped + len(cut) - len(kept)
        else:
            short, removed = self.pattern.subn(b"", text)
            dropped = removed
        if not removed or text.count(_PH) - short.count(_PH) != dropped:
            return text, 0
        return short, removed
