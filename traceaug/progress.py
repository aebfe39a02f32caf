"""A progress line on stderr when it is a terminal; silent when piped."""

from __future__ import annotations

import sys
import time

import traceaug.runtime as runtime


def shown() -> bool:
    """Whether progress and notes are shown (``runtime.Runtime.shows_progress``)."""
    return runtime.current().shows_progress()


def line(text: str = "") -> None:
    """Replace the progress line on stderr with ``text`` (nothing: clear it)."""
    sys.stderr.write(f"\r\033[K{text}")
    sys.stderr.flush()


def note(message: str) -> None:
    """Say on stderr, on a line of its own (over any progress line), what a pause is for;
    nothing unless ``shown()``."""
    if shown():
        line(f"{message}\n")


class Progress:
    """Shows ``label: 42% (12.3 MB/s)``; a no-op unless stderr is a TTY."""

    def __init__(self, label: str, total: int, enabled: bool | None = None) -> None:
        self.label = label
        self.total = max(total, 1)
        if enabled is None:
            enabled = shown()
        self.enabled = enabled
        self.start = time.monotonic()
        self._last = 0.0

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and done < self.total:
            return
        self._last = now
        rate = done / max(now - self.start, 1e-6) / 1e6
        pct = min(100, 100 * done // self.total)
        sys.stderr.write(f"\r{self.label}: {pct:3d}% ({rate:.1f} MB/s)")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            line()
