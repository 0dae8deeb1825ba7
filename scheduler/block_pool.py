"""BlockPool: ref-counted KV blocks, a free list, and an LRU of reusable cached blocks.

Every block is in exactly one state:
  used    ref count > 0: some request's block table holds it (a shared prefix block: several).
  cached  ref count 0, holds the KV of a hashed full block: reusable by a prefix hit, evictable.
  free    ref count 0, holds nothing worth keeping.

`allocate` hands out free blocks first (oldest freed first) and only then evicts cached blocks,
least recently released first, so that a cold prompt never pushes out a warm prefix while empty
blocks remain. Both lists are OrderedDicts: O(1) append, pop from the head and removal from the
middle (a prefix hit on a cached block takes it out of the LRU).

Block 0 is the null block: never allocated, never counted. The GPU stage pads block tables and
points the slot mapping of padded (CUDA graph) positions at it, so padding writes land in a block
no request reads. `num_blocks` counts it; `num_usable_blocks == num_blocks - 1`.

Allocation returns None when short; it never raises. Misuse by our own code (freeing a block twice,
caching a block nobody holds) trips an assert, and `check()` verifies every invariant.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterable, Sequence

NULL_BLOCK_ID = 0


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = False) -> None:
        assert num_blocks >= 2 and block_size >= 1
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.ref_counts: list[int] = [0] * num_blocks
        self.block_hashes: list[bytes | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        self._cached: OrderedDict[int, None] = OrderedDict()  # head = least recently released
        self._hash_to_block: dict[bytes, int] = {}
        self.num_evictions = 0
        # Told of every cached block evicted, before its id is reused: the KV tiers copy it to
        # host memory then (scheduler/kv_tiers/manager.py).
        self.on_evict: Callable[[int, bytes], None] | None = None
        # Told of every block newly registered in the cache (the tiers may copy it down early).
        self.on_cached: Callable[[int, bytes], None] | None = None

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

    # -- allocate / free ---------------------------------------------------------------------
    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= len(self._free) + len(self._cached)

    def allocate(self, num_blocks: int) -> list[int] | None:
        """`num_blocks` blocks with ref count 1, or None (nothing changed) when short."""
        if not self.can_allocate(num_blocks):
            return None
        out: list[int] = []
        for _ in range(num_blocks):
            if self._free:
                block_id = self._free.popitem(last=False)[0]
            else:
                block_id = self._cached.popitem(last=False)[0]
                self._evict(block_id)
            self.ref_counts[block_id] = 1
            out.append(block_id)
        return out

    def free(self, block_ids: Iterable[int]) -> None:
        """Drop one reference to each block. A block whose count reaches 0 goes to the tail of
        the cached LRU if it holds a hashed block, else to the tail of the free list. Callers free
        a block table in reverse, so that a chain's last blocks are the first evicted."""
        for block_id in block_ids:
            assert block_id != NULL_BLOCK_ID, "freeing the null block"
            assert self.ref_counts[block_id] > 0, f"double free of block {block_id}"
            self.ref_counts[block_id] -= 1
            if self.ref_counts[block_id] == 0:
                if self.block_hashes[block_id] is not None:
                    self._cached[block_id] = None
                else:
                    self._free[block_id] = None

    # -- prefix cache hooks ------------------------------------------------------------------
    def lookup(self, block_hash: bytes) -> int | None:
        """The block holding the KV of the full block with this hash, if any (used or cached)."""
        return self._hash_to_block.get(block_hash)

    def touch(self, block_ids: Iterable[int]) -> None:
        """Take one reference to each hit block; a cached one leaves the LRU (it is used now).
        A used block may be unhashed: a sample group's followers share their leader's blocks."""
        for block_id in block_ids:
            assert self.block_hashes[block_id] is not None or self.ref_counts[block_id] > 0, \
                f"touching block {block_id}, neither cached nor in use"
            if self.ref_counts[block_id] == 0:
                del self._cached[block_id]
            self.ref_counts[block_id] += 1

    def cache_block(self, block_id: int, block_hash: bytes) -> bool:
        """Record that a used, fully computed block holds the block with `block_hash`. False (no
        change) when caching is off or another block already holds that content."""
        num_before = len(self._hash_to_block)
        self.cache_blocks((block_id,), (block_hash,))
        return len(self._hash_to_block) > num_before

    def cache_blocks(self, block_ids: Sequence[int], block_hashes: Sequence[bytes]) -> None:
        """Record each (block id, hash) pair in order, as `cache_block` does for one (the one place
        the rule lives): a prefill chunk completes up to budget / block_size blocks in one step,
        registered in one call and one dict probe each (setdefault: the size tells whether the
        hash was new)."""
        ref_counts, hashes, by_hash = self.ref_counts, self.block_hashes, self._hash_to_block
        enabled, on_cached = self.enable_caching, self.on_cached
        for block_id, block_hash in zip(block_ids, block_hashes):
            assert ref_counts[block_id] > 0, f"caching block {block_id} that nobody holds"
            if not enabled:
                continue
            num_before = len(by_hash)
            by_hash.setdefault(block_hash, block_id)
            if len(by_hash) == num_before:
                continue  # another block already holds that content
            assert hashes[block_id] is None, f"block {block_id} hashed twice"
            hashes[block_id] = block_hash
            if on_cached is not None:
                on_cached(block_id, block_hash)

    def refresh(self, block_ids: Iterable[int]) -> None:
        """Move the cached (ref 0) blocks among `block_ids` to the most recently used end: a
        waiting request that will hit them keeps them from being the next evicted."""
        for block_id in block_ids:
            if block_id in self._cached:
                self._cached.move_to_end(block_id)

    def reclaim(self, max_blocks: int) -> int:
        """Evict up to `max_blocks` cached blocks, least recently used first, into the free list,
        so that later allocations find free blocks and do no eviction. Returns how many."""
        num = 0
        while num < max_blocks and self._cached:
            block_id = self._cached.popitem(last=False)[0]
            self._evict(block_id)
            self._free[block_id] = None
            num += 1
        return num

    def _evict(self, block_id: int) -> None:
        block_hash = self.block_hashes[block_id]
        assert block_hash is not None and self.ref_counts[block_id] == 0
        del self._hash_to_block[block_hash]
        self.block_hashes[block_id] = None
        self.num_evictions += 1
        if self.on_evict is not None:
            self.on_evict(block_id, block_hash)

    def cached_lru_order(self) -> list[int]:
        """Cached block ids, next to be evicted first (for tests and debugging)."""
        return list(self._cached)

    def free_order(self) -> list[int]:
        """Free block ids, next to be allocated first (for tests and debugging)."""
        return list(self._free)

    # -- invariants --------------------------------------------------------------------------
    def check(self) -> None:
        free, cached = set(self._free), set(self._cached)
        assert len(free) == len(self._free) and len(cached) == len(self._cached)
        assert not (free & cached), f"blocks both free and cached: {sorted(free & cached)}"
        assert NULL_BLOCK_ID not in free and NULL_BLOCK_ID not in cached
        assert self.ref_counts[NULL_BLOCK_ID] == 0 and self.block_hashes[NULL_BLOCK_ID] is None
        num_used = 0
        for block_id in range(1, self.num_blocks):
            ref = self.ref_counts[block_id]
            assert ref >= 0, f"block {block_id} has ref count {ref}"
            in_lists = block_id in free or block_id in cached
            assert in_lists == (ref == 0), f"block {block_id}: ref {ref}, listed {in_lists}"
            num_used += ref > 0
            block_hash = self.block_hashes[block_id]
            if block_id in cached:
                assert block_hash is not None, f"cached block {block_id} has no hash"
            if block_id in free:
                assert block_hash is None, f"free block {block_id} still has a hash"
            if block_hash is not None:
                assert self._hash_to_block.get(block_hash) == block_id
        assert len(self._hash_to_block) == sum(h is not None for h in self.block_hashes)
        assert len(free) + len(cached) + num_used == self.num_usable_blocks
        assert num_used == self.num_used
