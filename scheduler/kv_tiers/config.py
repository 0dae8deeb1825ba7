"""TierConfig: sizes of the tiers below the device pool and the figures the fetch cost model uses."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TierConfig:
    num_host_blocks: int = 0  # slots of the host-memory tier; 0: no tiers at all
    num_disk_blocks: int = 0  # block files the disk tier may hold; 0: no disk tier
    block_nbytes: int = 0  # bytes of one block (all layers, K and V)
    # The disk rate the cost model starts from (PERFORMANCE.md, H200 host: ~3.6 GB/s), then
    # learned from the reads themselves. (Host loads are always taken: ~54 GB/s beats recompute.)
    disk_bytes_per_s: float = 3.6e9
    # Recompute cost per prompt token before any step was measured (learned from steps after).
    recompute_s_per_token: float = 20e-6
    disk_parallelism: int = 4  # disk jobs in flight at once (the disk stage's threads)
    # Disk writes in flight at most: past it an offloaded block is not written (it is a cache).
    max_pending_disk_writes: int = 256
    # A waiting request never waits for a fetch longer than this; then it recomputes.
    max_fetch_wait_s: float = 5.0
    # Copy each block to host memory as soon as it is computed and cached (on the copy stream,
    # beside later steps), so that evicting it later costs no copy in the step that reuses it.
    # False: copy only on eviction (the exact-order cascade tests pin that mode).
    offload_on_cache: bool = False

    def __post_init__(self) -> None:
        if self.num_host_blocks < 0 or self.num_disk_blocks < 0:
            raise ValueError("tier sizes must be >= 0")
        if self.num_disk_blocks and not self.num_host_blocks:
            raise ValueError("a disk tier needs host slots to stage its blocks in")
        if self.enabled and self.block_nbytes <= 0:
            raise ValueError("block_nbytes must be > 0 when tiers are on")

    @property
    def enabled(self) -> bool:
        return self.num_host_blocks > 0

    @property
    def has_disk(self) -> bool:
        return self.num_disk_blocks > 0
