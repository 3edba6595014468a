"""Keep freed memory inside the training process on Linux (glibc), where it is reused.

glibc gives every block above its mmap threshold (which adapts up to 32 MiB) fresh pages from the
kernel and hands them back on free, and it trims the heap's free top the same way. A training
step allocates and frees such blocks by the hundred (logits, their gradient, FFN activations),
and every page of each is faulted in again: on the project's VM that first touch cost more than
the arithmetic on it (docs/benchmarks/train.md). Raising both thresholds keeps the pages; the
resident set then stays near its peak instead of falling between steps.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
KEEP = 1 << 30  # bytes: only blocks and free tops above 1 GiB go back to the kernel


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds to 1 GiB, once; False where the C library is not
    glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt, Windows)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, KEEP)) and bool(mallopt(M_TRIM_THRESHOLD, KEEP))
