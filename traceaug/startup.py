"""The command line's first moments: Ctrl-C / SIGTERM while it imports exit at once (130 / 143, one line, no
traceback); only ``os`` and ``signal`` are imported, so the handlers are set before traceaug loads."""

from __future__ import annotations

import os
import signal


def _exit(signum: int, frame) -> None:
    os.write(2, b"traceaug: interrupted\n")
    os._exit(128 + signum)


def early() -> None:
    """Exit at once on SIGINT / SIGTERM (a no-op outside the main thread)."""
    try:
        signal.signal(signal.SIGINT, _exit)
        signal.signal(signal.SIGTERM, _exit)
    except ValueError:  # not the main thread of the main interpreter
        pass
