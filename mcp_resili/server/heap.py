"""Handing freed memory back to the system, so that a long-running server's resident set follows its budgets.

glibc keeps what a process frees for reuse, and once large blocks have been freed it raises its
threshold for serving big blocks from fresh mappings, so later large arguments land in the heap as
well. A server that met a burst of multi-megabyte calls then keeps the burst's resident set after
those episodes are gone (the soak in docs/benchmarks.md found 80 MiB free but kept in a 224 MiB heap).
So after every `TRIM_EVERY` bytes of calls' arguments taken in or of episodes released, the server
asks glibc to return its free pages (``malloc_trim``). Elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

#: Bytes of arguments taken in or episodes released between two trims: a trim walks the heap (a
#: millisecond or so for a few hundred MiB), so it is worth its cost only after this much churn.
TRIM_EVERY = 32 * 1024 * 1024


def glibc_trim() -> Callable[[], int] | None:
    """``malloc_trim(0)`` of this process's C library, or None when it has none (not glibc)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def trim_all() -> int:
        return int(trim(0))

    return trim_all


class HeapTrimmer:
    """Counts memory churn and trims the heap after every ``every`` bytes of it."""

    def __init__(self, every: int = TRIM_EVERY, trim: Callable[[], int] | None = None) -> None:
        self.every = every
        self._trim = trim
        self._since = 0
        #: Trims done so far (for tests and benchmarks).
        self.trims = 0

    def churned(self, nbytes: int) -> None:
        """``nbytes`` more were taken in or released; trim once `every` bytes have been."""
        if self._trim is None or nbytes <= 0:
            return
        self._since += nbytes
        if self._since >= self.every:
            self._since = 0
            self.trims += 1
            self._trim()


def default_trimmer() -> HeapTrimmer:
    """A trimmer using glibc's ``malloc_trim`` where there is one (else it counts and does nothing)."""
    return HeapTrimmer(trim=glibc_trim())
