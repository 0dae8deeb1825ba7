"""DiskStoreCounters: counts from many threads add up, a snapshot is a copy, and a failed write is
logged once per errno while every one is counted."""
from __future__ import annotations

import errno
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpu_stage.kv_tiers.disk_store_stats import DiskStoreCounters, DiskStoreStats


def test_counts_from_threads_add_up_and_snapshots_are_copies() -> None:
    counters = DiskStoreCounters()
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda i: counters.count("num_hits" if i % 2 else "num_misses"), range(400)))
    before = counters.snapshot()
    counters.count("num_writes")
    assert before == DiskStoreStats(num_hits=200, num_misses=200)
    assert counters.snapshot() == DiskStoreStats(num_writes=1, num_hits=200, num_misses=200)


def test_write_failures_counted_each_logged_once_per_errno(caplog: pytest.LogCaptureFixture) -> None:
    counters = DiskStoreCounters()
    full, read_only = OSError(errno.ENOSPC, "No space left"), OSError(errno.EROFS, "Read-only")
    with caplog.at_level(logging.WARNING, logger="gpu_stage.kv_tiers.disk_store"):
        for exc in (full, full, full, read_only, read_only, full):
            counters.write_failed(exc)
    assert counters.snapshot().num_write_errors == 6
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 3 and "No space left" in logged[0] and "Read-only" in logged[1]
