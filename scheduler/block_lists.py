"""BlockLists: a KV pool's ref counts, its two lists of blocks that nobody holds, and the counts and
orders read from them. BlockPool (block_pool.py) builds on it and decides what moves where.

Every block is in exactly one state:
  used    ref count > 0: some request's block table holds it (a shared prefix block: several).
  cached  ref count 0, holds the KV of a hashed full block: reusable by a prefix hit, evictable.
  free    ref count 0, holds nothing worth keeping.
Both lists are OrderedDicts: O(1) append, pop from the head and removal from the middle (a prefix
hit on a cached block takes it out of the LRU). The free list's head is the next allocated, the
cached LRU's head the next evicted.

Block 0 is the null block: never allocated, never counted. The GPU stage pads block tables and
points the slot mapping of padded (CUDA graph) positions at it, so padding writes land in a block
no request reads. `num_blocks` counts it; `num_usable_blocks == num_blocks - 1`.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterable

NULL_BLOCK_ID = 0


class BlockLists:
    def __init__(self, num_blocks: int) -> None:
        assert num_blocks >= 2
        self.num_blocks = num_blocks
        self.ref_counts: list[int] = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        self._cached: OrderedDict[int, None] = OrderedDict()  # head = least recently released

    # -- counts ------------------------------------------------------------------------------
    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def num_used(self) -> int:
        return self.num_usable_blocks - len(self._free) - len(self._cached)

    @property
    def num_allocatable(self) -> int:
        """Blocks `allocate` can hand out now: free ones plus evictable cached ones."""
        return len(self._free) + len(self._cached)

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= len(self._free) + len(self._cached)

    # -- orders ------------------------------------------------------------------------------
    def refresh(self, block_ids: Iterable[int]) -> None:
        """Move the cached (ref 0) blocks among `block_ids` to the most recently used end: a
        waiting request that will hit them keeps them from being the next evicted."""
        for block_id in block_ids:
            if block_id in self._cached:
                self._cached.move_to_end(block_id)

    def cached_lru_order(self) -> list[int]:
        """Cached block ids, next to be evicted first (for tests and debugging)."""
        return list(self._cached)

    def free_order(self) -> list[int]:
        """Free block ids, next to be allocated first (for tests and debugging)."""
        return list(self._free)

    # -- invariants --------------------------------------------------------------------------
    def check(self) -> None:
        """Each usable block listed exactly when nobody holds it, in one list at most; the null
        block in none; free + cached + used == usable."""
        free, cached = set(self._free), set(self._cached)
        assert len(free) == len(self._free) and len(cached) == len(self._cached)
        assert not (free & cached), f"blocks both free and cached: {sorted(free & cached)}"
        assert NULL_BLOCK_ID not in free and NULL_BLOCK_ID not in cached
        assert self.ref_counts[NULL_BLOCK_ID] == 0
        num_used = 0
        for block_id in range(1, self.num_blocks):
            ref = self.ref_counts[block_id]
            assert ref >= 0, f"block {block_id} has ref count {ref}"
            in_lists = block_id in free or block_id in cached
            assert in_lists == (ref == 0), f"block {block_id}: ref {ref}, listed {in_lists}"
            num_used += ref > 0
        assert len(free) + len(cached) + num_used == self.num_usable_blocks
        assert num_used == self.num_used
