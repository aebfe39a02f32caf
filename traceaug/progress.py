"""A progress line on stderr when it is a terminal; silent when piped."""

from __future__ import annotations

import os
import sys
import time


class Progress:
    """Shows ``label: 42% (12.3 MB/s)``; a no-op unless stderr is a TTY."""

    def __init__(self, label: str, total: int, enabled: bool | None = None) -> None:
        self.label = label
        self.total = max(total, 1)
        if enabled is None:
            enabled = sys.stderr.isatty() and not os.environ.get("TRACEAUG_NO_PROGRESS")
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
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
