"""Which of many keys occur inside a text, in one pass over the text (Aho–Corasick): the class map's checks
and lookups in time linear in the keys' and names' lengths (testing key against key is quadratic)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator


class Substrings:
    """An automaton over ``keys``: ``found(text)`` yields the index of each key occurring in
    ``text`` (at each position it ends at)."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        goto: list[dict[str, int]] = [{}]
        own: list[int] = [-1]  # the key spelled by the node, if any
        for i, key in enumerate(keys):
            node = 0
            for ch in key:
                nxt = goto[node].get(ch)
                if nxt is None:
                    nxt = len(goto)
                    goto[node][ch] = nxt
                    goto.append({})
                    own.append(-1)
                node = nxt
            if own[node] < 0:
                own[node] = i
        fail = [0] * len(goto)
        # the nearest node on the fail chain (itself excluded) that spells a key, or -1
        link = [-1] * len(goto)
        queue = deque(goto[0].values())
        while queue:
            node = queue.popleft()
            for ch, child in goto[node].items():
                f = fail[node]
                while f and ch not in goto[f]:
                    f = fail[f]
                f = goto[f].get(ch, 0) if goto[f].get(ch, 0) != child else 0
                fail[child] = f
                link[child] = f if own[f] >= 0 else link[f]
                queue.append(child)
        self._goto, self._fail, self._own, self._link = goto, fail, own, link

    def found(self, text: str) -> Iterator[int]:
        """Index of every key occurring in ``text``, once per position where it ends."""
        goto, fail, own, link = self._goto, self._fail, self._own, self._link
        node = 0
        for ch in text:
            while node and ch not in goto[node]:
                node = fail[node]
            node = goto[node].get(ch, 0)
            hit = node if own[node] >= 0 else link[node]
            while hit >= 0:
                yield own[hit]
                hit = link[hit]
