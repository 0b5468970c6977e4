"""Giving the C heap's free memory back to the system.

A task's flushes allocate in bursts (the values of a batch's writes, RocksDB's own
buffers in its threads) and free them again; glibc keeps most of what is freed in its
arenas, so a process's RSS stays at the high-water mark of its bursts, above its live
state (a key-churn run with ``percentile`` held ~120 MB free in glibc). The store calls
:func:`release_free_heap` after each periodic compaction of deleted ranges.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

__all__ = ["release_free_heap"]

_lock = threading.Lock()
_trim: Callable[[int], int] | None = None
_looked = False


def release_free_heap() -> bool:
    """``malloc_trim(0)`` where the C library is glibc; whether it ran."""
    global _trim, _looked
    with _lock:
        if not _looked:
            _looked = True
            _trim = _find_malloc_trim()
        trim = _trim
    if trim is None:
        return False
    trim(0)
    return True


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:  # the C library the process runs with (no ldconfig lookup from a thread)
        trim = ctypes.CDLL(None).malloc_trim  # glibc only (not musl, not macOS)
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim
