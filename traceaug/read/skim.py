"""Cut the events a load drops from chunk text unparsed, where Kineto's indented layout shows each whole
(up to the first line indented as its ``{``); the rest is parsed. Imports numpy only (pass-1 workers)."""

from __future__ import annotations

import re
import sys
from functools import lru_cache

import numpy as np

from .columns import PROFILER_STEP
from .kinds import RUNTIME_CATEGORIES, LoadKind

# The head of the first complete event: its indentation and the white space between keys.
_HEAD = re.compile(rb'\n( *)\{(\s*)"ph": "X",(\s*)"cat": "[^"\\\n]*",(\s*)"name": "')
_PH = int.from_bytes(b'"ph"', "little")
_POSSESSIVE = b"+" if sys.version_info >= (3, 11) else b""


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
    """Events ``kind`` drops in this layout, each with its newline before and comma after: complete events of
    other categories (not ProfilerSteps), runtime calls it skips, and flow events unless it keeps them."""
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
    # Possessive (``*+``): a line given back never lets the event's end match, so ``re`` keeps no
    # backtrack points. Python 3.10's ``re`` has none: the same match, slower.
    own = _POSSESSIVE
    return re.compile(rb'\n' + i + rb'\{' + g + rb'"ph": "(?:' + b"|".join(phases) + rb')'
                      rb'[^\n]*' + own + rb'(?:\n' + i + rb' [^\n]*' + own + rb')*' + own
                      + rb'\n' + i + rb'\},')


def _count_ph(text: bytes) -> int:
    """How many times ``"ph"`` occurs in ``text``: 4-byte words at each of the 4 offsets compared by numpy
    (twice ``bytes.count``'s speed on JSON, whose quotes defeat its skips)."""
    n = 0
    for offset in range(4):
        words = (len(text) - offset) // 4
        if words > 0:
            n += int(np.count_nonzero(np.frombuffer(text, "<u4", words, offset) == _PH))
    return n


class Skim:
    """Removes what ``kind`` drops from chunk texts of one trace (the layout is learnt from
    the first chunk holding a complete event written on several lines)."""

    def __init__(self, kind: LoadKind) -> None:
        self.kind = kind
        self.pattern: re.Pattern | None = None

    def __call__(self, text: bytes) -> tuple[bytes, int]:
        """``text`` without the events the load drops, and how many were removed (0: the text
        as it is)."""
        if self.pattern is None:
            head = _HEAD.search(text)
            if head is None:
                return text, 0
            self.pattern = _pattern(self.kind, *head.groups())
        short, removed = self.pattern.subn(b"", text)
        if not removed or _count_ph(text) - _count_ph(short) != removed:
            return text, 0
        return short, removed
