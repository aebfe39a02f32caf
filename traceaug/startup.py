"""The command line's first moments: Ctrl-C / SIGTERM while it imports end it at once, with
exit 130 / 143 and one line, no traceback. Only ``os`` and ``signal`` are imported (Python has
loaded ``os`` and ``enum`` already), so the handlers are in place before the rest of traceaug
loads; ``interrupt.install`` replaces them once the command runs."""

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
