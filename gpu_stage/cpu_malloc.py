"""Keep glibc from handing freed tensor memory back to the OS between layers (CPU path only).

A CPU forward allocates and frees the same few-MB activations every layer (gathered K/V, MLP
intermediates). With glibc's defaults, blocks above the dynamic mmap threshold are mmap'd fresh and
the heap top is trimmed on free, so every layer pays thousands of page faults (on the SmolLM2
shape the two settings below cut a batch-8 decode step's CPU time by a third; same effect as
MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the environment). The cost is that the process keeps its peak heap.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger("ttft.gpu")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's maximum on 64-bit
_TRIM_THRESHOLD_BYTES = 1 << 30

_done = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process. False where not glibc."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES) == 1
        ok = libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES) == 1 and ok
    except (OSError, AttributeError):  # musl or no libc symbol: nothing to tune
        return False
    _done = ok
    if not ok:
        log.info("mallopt refused the CPU allocator settings; continuing with defaults")
    return ok
