"""Every command, declared once: ``traceaug NAME`` is ``commands/NAME.py``'s ``COMMAND``, its click
command, API function and prefetch made from it; only the command run is imported."""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .declare import Command

SHARED = frozenset({"analysis", "declare", "rewriters"})  # what several commands' modules share
NAMES = tuple(sorted(f[:-3].replace("_", "-") for f in os.listdir(__path__[0])
                     if f.endswith(".py") and f[:-3] not in SHARED | {"__init__"}))


def load(name: str) -> Command:
    """The declaration of command ``name``."""
    return importlib.import_module(f"{__name__}.{name.replace('-', '_')}").COMMAND
