"""DiskStoreStats and the counters behind them: what a DiskStore's calls came to, counted from the
worker threads that make those calls (one lock, held only to bump or copy a counter).

A failed write is counted and logged once per kind of failure (its errno), not once per block: a
full disk refuses every block after the first, and the log would say the same thing each time.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace

log = logging.getLogger("gpu_stage.kv_tiers.disk_store")


@dataclass
class DiskStoreStats:
    num_writes: int = 0
    num_write_errors: int = 0
    num_hits: int = 0
    num_misses: int = 0  # no file, or a foreign one
    num_corrupt: int = 0  # ours but wrong: detected, deleted, never served


class DiskStoreCounters:
    def __init__(self) -> None:
        self._stats = DiskStoreStats()
        self._lock = threading.Lock()  # guards _stats only
        self._last_errno: int | None = None

    def count(self, field: str) -> None:
        """Add one to the DiskStoreStats field named `field`."""
        with self._lock:
            setattr(self._stats, field, getattr(self._stats, field) + 1)

    def snapshot(self) -> DiskStoreStats:
        """A copy of the counters, consistent with itself."""
        with self._lock:
            return replace(self._stats)

    def write_failed(self, exc: OSError) -> None:
        """Count a failed write; log it when its errno differs from the last one logged."""
        self.count("num_write_errors")
        if exc.errno != self._last_errno:
            self._last_errno = exc.errno
            log.warning("kv disk tier: write failed (%s); blocks will be recomputed", exc)
