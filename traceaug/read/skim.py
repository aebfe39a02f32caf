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
This module imports nothing heavy: pass-1 worker processes import it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .columns import PROFILER_STEP
from .kinds import RUNTIME_CATEGORIES, LoadKind

# The head of the first complete event: its indentation and the white space between keys.
_HEAD = re.compile(rb'\n( *)\{(\s*)"ph": "X",(\s*)"cat": "[^"\\\n]*",(\s*)"name": "')
_PH = b'"ph":'


def _alternatives(names: frozenset[str]) -> bytes:
    return b"|".join(re.escape(n.encode()) for n in sorted(names, key=len, reverse=True))


@lru_cache(maxsize=64)
def _pattern(kind: LoadKind, indent: bytes, gap: bytes, sep_cat: bytes, sep_name: bytes
             ) -> re.Pattern:
    """Events ``kind`` drops, written with this layout, each with the newline before it and
    the comma after: complete events of a category it does not keep (unless a
    ProfilerStep), runtime calls it skips, and flow events unless it keeps them."""
    i, g, s1, s2 = (re.escape(x) for x in (indent, gap, sep_cat, sep_name))
    name = b'",' + s2 + b'"name": "'
    dropped = [rb'X",' + s1 + rb'"cat": "(?!(?:' + _alternatives(kind.categories) + rb')")'
               rb'[^"\\\n]*' + name + rb'(?!' + re.escape(PROFILER_STEP.encode()) + rb')[^"\\\n]*"']
    calls = kind.categories & RUNTIME_CATEGORIES
    if kind.skip_calls and calls:
        dropped.append(rb'X",' + s1 + rb'"cat": "(?:' + _alternatives(calls) + rb')' + name
                       + rb'(?:' + _alternatives(kind.skip_calls) + rb')"')
    if not kind.flows:
        dropped.append(rb'[stf]"')
    return re.compile(rb'\n' + i + rb'\{' + g + rb'"ph": "(?:' + b"|".join(dropped) + rb')'
                      rb'[^\n]*(?:\n' + i + rb' [^\n]*)*\n' + i + rb'\},')


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
        if not removed or text.count(_PH) - short.count(_PH) != removed:
            return text, 0
        return short, removed
