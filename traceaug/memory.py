"""Give freed heap memory back to the operating system (glibc only; elsewhere a no-op).

After pass 1 the process has freed tens of MB of parsed JSON that glibc keeps for
reuse; the engine, which grows next, cannot use it, so peak RSS would count it twice.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache


@lru_cache(maxsize=1)
def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


def release_free_memory() -> None:
    """``malloc_trim(0)`` where there is one."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
