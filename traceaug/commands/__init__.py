"""Every command, declared once: ``traceaug NAME`` is ``commands/NAME.py``'s ``COMMAND`` (a
``declare.Command``), from which the click command (``cli``), the Python API function
(``api``) and the prefetch come. Only the command run is imported."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .declare import Command

NAMES = ("breakdown", "collectives", "convert", "counters", "critical-path", "diff", "gaps", "info",
         "kernels", "launches", "merge", "open", "patterns", "query", "report", "stragglers",
         "summary", "whatif")


def load(name: str) -> Command:
    """The declaration of command ``name``."""
    return importlib.import_module(f"{__name__}.{name.replace('-', '_')}").COMMAND
