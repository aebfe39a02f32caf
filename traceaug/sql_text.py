"""SQL literals traceaug writes into queries (Perfetto's dialect, SQLite for Nsight exports), under one rule:
a value is always quoted, never trusted (kernel names hold quotes)."""

from __future__ import annotations

from collections.abc import Iterable


def literal(text: str) -> str:
    """``text`` as an SQL string literal: ``'it''s'``."""
    return "'" + text.replace("'", "''") + "'"


def literal_list(texts: Iterable[str]) -> str:
    """An SQL list of string literals for ``IN``: ``('a', 'b')``."""
    return "(" + ", ".join(literal(t) for t in texts) + ")"
