"""DiskIndex: which block hashes the disk tier holds, in LRU order, within its capacity.

Only the disk stage touches the files; this index is the scheduler's view, rebuilt at start-up
from the files a predecessor left (oldest first), and updated when a write completes. Evicting
an entry returns its hash so the caller can have the file deleted.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterable


class DiskIndex:
    def __init__(self, capacity_blocks: int, existing: Iterable[bytes] = ()) -> None:
        self.capacity_blocks = capacity_blocks
        self._lru: OrderedDict[bytes, None] = OrderedDict()
        self.over_capacity_at_start: list[bytes] = []  # files to delete: past a smaller capacity
        for block_hash in existing:
            self._lru[block_hash] = None
        while len(self._lru) > capacity_blocks:  # a smaller --kv-disk-gb than last time
            self.over_capacity_at_start.append(self._lru.popitem(last=False)[0])

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._lru

    def touch(self, block_hash: bytes) -> None:
        self._lru.move_to_end(block_hash)

    def insert(self, block_hash: bytes) -> list[bytes]:
        """Record a written block at the MRU end; returns the hashes evicted to stay in capacity."""
        self._lru[block_hash] = None
        self._lru.move_to_end(block_hash)
        evicted = []
        while len(self._lru) > self.capacity_blocks:
            evicted.append(self._lru.popitem(last=False)[0])
        return evicted

    def remove(self, block_hash: bytes) -> None:
        self._lru.pop(block_hash, None)

    def lru_order(self) -> list[bytes]:
        return list(self._lru)
