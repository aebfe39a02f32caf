"""Give freed heap memory back to the operating system (glibc only; elsewhere a no-op).

After pass 1 the process has freed tens of MB of parsed JSON that glibc keeps for
reuse; the engine, which grows next, cannot use it, so peak RSS would count it twice.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc malloc.h)
TRIM_THRESHOLD, MMAP_THRESHOLD = 128 << 10, 32 << 20
REUSE_TRIM_THRESHOLD = 64 << 20  # pass-1 processes: keep freed chunk memory for the next chunk


@lru_cache(maxsize=1)
def _libc():
    """The C library already loaded in this process (``find_library`` would run ldconfig:
    15 ms on every command's start)."""
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:
        return None


def release_free_memory() -> None:
    """``malloc_trim(0)`` where there is one."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def return_freed_promptly() -> None:
    """Process-wide: give freed heap back once 128 KiB sit free at its top. glibc's own trim
    threshold grows to 64 MB once large buffers are freed, so pass 1's freed chunk buffers
    stayed counted. Buffers up to 32 MB stay on the heap (glibc's dynamic maximum), as an
    mmap per buffer costs 15% of counters' time. For the command line, which owns its
    process: ~7 MB off counters' peak on the 26 MB A100 trace, at ~3% of its time."""
    _thresholds(TRIM_THRESHOLD)


def reuse_freed() -> None:
    """Process-wide, for pass-1 children and workers: keep up to 64 MB of freed heap for
    reuse. Returning each chunk's freed memory makes the next chunk fault it in again,
    15% of pass 1; their peak is one chunk's objects either way, and they trim (or exit)
    before the parent's engine grows."""
    _thresholds(REUSE_TRIM_THRESHOLD)


def _thresholds(trim: int) -> None:
    libc = _libc()
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, trim)


# The same settings for a spawned process, through glibc's environment variables.
REUSE_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
             "MALLOC_TRIM_THRESHOLD_": str(REUSE_TRIM_THRESHOLD)}
