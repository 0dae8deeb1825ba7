"""BlockPool: exact block ids in allocation order, LRU reuse order, and check() after every call."""
from __future__ import annotations

import pytest

from scheduler.block_pool import NULL_BLOCK_ID, BlockPool


def h(n: int) -> bytes:
    return n.to_bytes(32, "little")


def counts(pool: BlockPool) -> tuple[int, int, int]:
    pool.check()
    return pool.num_free, pool.num_cached, pool.num_used


def test_fresh_pool_reserves_null_block() -> None:
    pool = BlockPool(num_blocks=5, block_size=4)
    assert counts(pool) == (4, 0, 0)
    assert pool.num_usable_blocks == 4
    assert pool.free_order() == [1, 2, 3, 4]
    assert NULL_BLOCK_ID == 0


def test_allocate_in_order_and_none_when_short() -> None:
    pool = BlockPool(num_blocks=5, block_size=4)
    assert pool.allocate(2) == [1, 2]
    assert counts(pool) == (2, 0, 2)
    assert pool.can_allocate(2) and not pool.can_allocate(3)
    assert pool.allocate(3) is None  # short: None, and nothing changed
    assert counts(pool) == (2, 0, 2)
    assert pool.allocate(2) == [3, 4]
    assert pool.allocate(1) is None
    assert pool.allocate(0) == []
    assert counts(pool) == (0, 0, 4)


def test_freed_blocks_are_reused_oldest_freed_first() -> None:
    pool = BlockPool(num_blocks=7, block_size=4)
    assert pool.allocate(6) == [1, 2, 3, 4, 5, 6]
    pool.free([4, 2])
    assert counts(pool) == (2, 0, 4)
    pool.free([5])
    assert pool.free_order() == [4, 2, 5]
    assert pool.allocate(2) == [4, 2]
    assert pool.allocate(1) == [5]
    pool.check()


def test_shared_block_stays_used_until_last_reference() -> None:
    pool = BlockPool(num_blocks=3, block_size=4, enable_caching=True)
    [b] = pool.allocate(1)
    assert pool.cache_block(b, h(1))
    pool.touch([b])  # a second request shares it
    assert pool.ref_counts[b] == 2
    pool.free([b])
    assert counts(pool) == (1, 0, 1)
    pool.free([b])
    assert counts(pool) == (1, 1, 0)


def test_double_free_and_null_free_are_caught() -> None:
    pool = BlockPool(num_blocks=3, block_size=4)
    [b] = pool.allocate(1)
    pool.free([b])
    with pytest.raises(AssertionError, match="double free"):
        pool.free([b])
    with pytest.raises(AssertionError, match="null block"):
        pool.free([NULL_BLOCK_ID])
    pool.check()


def test_cached_blocks_evicted_lru_after_free_blocks_run_out() -> None:
    pool = BlockPool(num_blocks=6, block_size=4, enable_caching=True)
    assert pool.allocate(4) == [1, 2, 3, 4]
    for i, b in enumerate([1, 2, 3]):
        assert pool.cache_block(b, h(i))
    # A request frees its table last block first: the chain's tail becomes the oldest entry.
    pool.free(reversed([1, 2, 3]))
    assert pool.cached_lru_order() == [3, 2, 1]
    assert counts(pool) == (1, 3, 1)
    # Free (never cached) block 5 goes first, then cached blocks least recently released first.
    assert pool.allocate(1) == [5]
    assert pool.num_evictions == 0
    assert pool.allocate(2) == [3, 2]
    assert pool.num_evictions == 2
    assert pool.lookup(h(2)) is None and pool.lookup(h(1)) is None
    assert pool.lookup(h(0)) == 1
    assert counts(pool) == (0, 1, 4)


def test_touch_takes_cached_block_out_of_lru() -> None:
    pool = BlockPool(num_blocks=4, block_size=4, enable_caching=True)
    assert pool.allocate(3) == [1, 2, 3]
    pool.cache_block(1, h(1))
    pool.cache_block(2, h(2))
    pool.free([1, 2, 3])
    assert pool.cached_lru_order() == [1, 2]
    pool.touch([1])  # prefix hit: used again, cannot be evicted
    assert pool.cached_lru_order() == [2]
    assert counts(pool) == (1, 1, 1)
    assert pool.allocate(2) == [3, 2]  # free block 3 first, then evicts 2, never the used 1
    assert pool.allocate(1) is None
    pool.free([1])
    assert pool.cached_lru_order() == [1]  # back at the tail, still findable
    assert pool.lookup(h(1)) == 1
    pool.check()


def test_cache_block_refuses_duplicate_content_and_when_disabled() -> None:
    pool = BlockPool(num_blocks=4, block_size=4, enable_caching=True)
    a, b = pool.allocate(2)
    assert pool.cache_block(a, h(7))
    assert not pool.cache_block(b, h(7))  # same content computed twice: first holder keeps the key
    pool.free([b])
    assert pool.free_order() == [3, b]  # the duplicate is plain free, not cached
    off = BlockPool(num_blocks=3, block_size=4)
    [c] = off.allocate(1)
    assert not off.cache_block(c, h(1))
    off.free([c])
    assert counts(off) == (2, 0, 0)
    pool.check()


@pytest.mark.parametrize("enabled", [True, False])
def test_cache_blocks_is_cache_block_for_each_pair(enabled: bool) -> None:
    """Same state, same callbacks, duplicates skipped (within the call and against the cache)."""
    pools = [BlockPool(num_blocks=10, block_size=4, enable_caching=enabled) for _ in range(2)]
    seen: list[list[tuple[int, bytes]]] = [[], []]
    for pool, log in zip(pools, seen):
        pool.on_cached = lambda b, k, log=log: log.append((b, k))
        ids = pool.allocate(7)
        assert ids == list(range(1, 8))
        pool.cache_block(ids[0], h(5))  # already held by another block
    pairs = [(2, h(1)), (3, h(2)), (4, h(5)), (5, h(2)), (6, h(3))]
    for block_id, block_hash in pairs:
        pools[0].cache_block(block_id, block_hash)
    pools[1].cache_blocks([b for b, _ in pairs], [k for _, k in pairs])
    assert seen[0] == seen[1]
    assert pools[0].block_hashes == pools[1].block_hashes
    assert pools[0]._hash_to_block == pools[1]._hash_to_block
    for pool in pools:
        pool.free(reversed(ids))
    assert pools[0].cached_lru_order() == pools[1].cached_lru_order()
    assert counts(pools[0]) == counts(pools[1])


def test_cache_blocks_asserts_a_held_block() -> None:
    pool = BlockPool(num_blocks=4, block_size=4, enable_caching=True)
    with pytest.raises(AssertionError, match="nobody holds"):
        pool.cache_blocks([2], [h(1)])


@pytest.mark.parametrize("damage", ["cached unhashed", "free hashed", "index stale", "index extra"])
def test_check_catches_hash_bookkeeping_out_of_step(damage: str) -> None:
    """The hash half of check(), on top of BlockLists' (test_block_lists.py)."""
    pool = BlockPool(num_blocks=6, block_size=4, enable_caching=True)
    a, b = pool.allocate(2)  # type: ignore[misc]
    assert pool.cache_block(a, h(1)) and pool.cache_block(b, h(2))
    pool.free([b, a])
    pool.check()
    if damage == "cached unhashed":
        pool.block_hashes[a] = None
    elif damage == "free hashed":
        pool.block_hashes[pool.free_order()[0]] = h(9)
    elif damage == "index stale":
        pool._hash_to_block[h(1)] = b
    else:
        pool._hash_to_block[h(9)] = a
    with pytest.raises(AssertionError):
        pool.check()
