"""``traceaug convert``: an Nsight Systems SQLite export to a Chrome JSON trace."""

from __future__ import annotations

from pathlib import Path

from ..read import nsys


def run(src: Path, dst: Path) -> str:
    """Convert ``src`` into ``dst`` and say what was written."""
    n = nsys.convert(src, dst)
    return f"wrote {dst}: {n} events\n"
