"""traceaug's PerfettoSQL modules, and what a user's SQL needs of them: the CLI's ``query``
and the API's ``traceaug.query`` decide both here, so they answer the same SQL alike."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

PACKAGE = "traceaug"

_FULL_LOAD_SQL = re.compile(
    r"\bargs?\b|arg_set_id|extract_arg|\bflow|INCLUDE\s+PERFETTO\s+MODULE\s+(?!traceaug\.)", re.IGNORECASE)
_DEFINES = re.compile(r"CREATE\s+PERFETTO\s+(?:TABLE|VIEW|FUNCTION|MACRO)\s+(\w+)", re.IGNORECASE)


@lru_cache(maxsize=1)
def sql_modules() -> dict[str, str]:
    """Module name (``traceaug.base``) -> its PerfettoSQL text, from ``traceaug/sql/``."""
    files = Path(__file__).parent / "sql"  # (importlib.resources would import zipfile on every start)
    return {f"{PACKAGE}.{f.name[:-4]}": f.read_text() for f in sorted(files.iterdir(), key=str)
            if f.name.endswith(".sql")}


@lru_cache(maxsize=1)
def _public_names() -> dict[str, str]:
    """Each public table / view / function a module defines (no leading ``_``) -> the module."""
    out: dict[str, str] = {}
    for module, text in sql_modules().items():
        for name in _DEFINES.findall(text):
            if not name.startswith("_"):
                out.setdefault(name.lower(), module)
    return out


def modules_for(sql: str) -> list[str]:
    """The traceaug modules defining a table, view or function that ``sql`` names, in the
    order the names first appear (an include brings in what the module itself includes)."""
    words = dict.fromkeys(w.lower() for w in re.findall(r"\w+", sql))
    names = _public_names()
    return list(dict.fromkeys(names[w] for w in words if w in names))


def needs_full_load(sql: str) -> bool:
    """An analysis load has only the args analyses read and no flow events: SQL that reads
    args or flows (or a standard-library module, which may) gets a full load."""
    return bool(_FULL_LOAD_SQL.search(sql))
