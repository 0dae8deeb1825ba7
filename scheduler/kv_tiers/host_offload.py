"""HostOffload: the device -> host half of the KV tiers (manager.py tells the whole cascade).

When the device pool evicts a cached block (BlockPool.on_evict), its bytes are copied into a host
slot, run by the GPU stage before the next step's forward, so before the block is overwritten:
that copy fences the batch. Tiers are inclusive: a block already in the host tier is only
refreshed (and fences only while its own copy may still be running). With `offload_on_cache` a
block is offloaded as soon as it is cached (BlockPool.on_cached), beside the next steps, so that
evicting it later costs nothing.
"""
from __future__ import annotations

from typing import Callable

from scheduler.kv_tiers.config import TierConfig
from scheduler.kv_tiers.copy_queue import CopyQueue
from scheduler.kv_tiers.host_index import HostIndex
from scheduler.kv_tiers.stats import TierStats


class HostOffload:
    def __init__(self, config: TierConfig, host: HostIndex, copies: CopyQueue, stats: TierStats,
                 fetchable: Callable[[], None]) -> None:
        self.config = config
        self.host = host
        self.copies = copies
        self.stats = stats
        self.fetchable = fetchable  # told whenever a block becomes fetchable from the host tier

    def on_device_evict(self, block_id: int, block_hash: bytes) -> None:
        slot = self.host.lookup(block_hash)
        if slot is not None:
            self.host.touch(block_hash)  # inclusive: its bytes are already there (or on their way)
            self.copies.fence |= not self.host.is_ready(slot)
            return
        self.copies.fence = True  # the block is reused next: its copy must run before that forward
        self._offload(block_id, block_hash)

    def on_cached(self, block_id: int, block_hash: bytes) -> None:
        if block_hash not in self.host:  # (a block fetched from host is cached there already)
            self._offload(block_id, block_hash)

    def _offload(self, block_id: int, block_hash: bytes) -> None:
        placed = self.host.insert(block_hash)
        if placed is None:
            self.stats.num_host_full_drops += 1
            return
        slot, evicted = placed
        if evicted is not None:
            self.stats.evictions["host"] += 1
        self.copies.offload(block_id, slot, block_hash)
        self.stats.bytes["d2h"] += self.config.block_nbytes
        self.fetchable()
