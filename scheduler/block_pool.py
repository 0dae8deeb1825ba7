"""BlockPool: ref-counted KV blocks, a free list, and an LRU of reusable cached blocks.

The block states (used, cached, free), the two lists, their counts and the null block are
BlockLists' (block_lists.py); the pool adds what moves blocks between them and the prefix-cache
bookkeeping: which full block's hash each block holds, and which block holds a hash.

`allocate` hands out free blocks first (oldest freed first) and only then evicts cached blocks,
least recently released first, so that a cold prompt never pushes out a warm prefix while empty
blocks remain.

Allocation returns None when short; it never raises. Misuse by our own code (freeing a block twice,
caching a block nobody holds) trips an assert, and `check()` verifies every invariant.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from scheduler.block_lists import NULL_BLOCK_ID, BlockLists

__all__ = ["NULL_BLOCK_ID", "BlockPool"]


class BlockPool(BlockLists):
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = False) -> None:
        assert block_size >= 1
        super().__init__(num_blocks)
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.block_hashes: list[bytes | None] = [None] * num_blocks
        self._hash_to_block: dict[bytes, int] = {}
        self.num_evictions = 0
        # Told of every cached block evicted, before its id is reused: the KV tiers copy it to
        # host memory then (scheduler/kv_tiers/host_offload.py).
        self.on_evict: Callable[[int, bytes], None] | None = None
        # Told of every block newly registered in the cache (the tiers may copy it down early).
        self.on_cached: Callable[[int, bytes], None] | None = None

    # -- allocate / free ---------------------------------------------------------------------
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

    # -- invariants --------------------------------------------------------------------------
    def check(self) -> None:
        """BlockLists' invariants, and: a cached block has a hash, a free one none, and the hash
        index maps exactly the hashed blocks back to themselves."""
        super().check()
        assert self.block_hashes[NULL_BLOCK_ID] is None
        for block_id in self._cached:
            assert self.block_hashes[block_id] is not None, f"cached block {block_id} has no hash"
        for block_id in self._free:
            assert self.block_hashes[block_id] is None, f"free block {block_id} still has a hash"
        for block_id, block_hash in enumerate(self.block_hashes):
            if block_hash is not None:
                assert self._hash_to_block.get(block_hash) == block_id
        assert len(self._hash_to_block) == sum(h is not None for h in self.block_hashes)
