"""BlockLists: the counts and orders read from the free list and the cached LRU, `refresh` moving
cached blocks only, and `check` catching a block listed wrongly."""
from __future__ import annotations

import pytest

from scheduler.block_lists import NULL_BLOCK_ID, BlockLists


def _lists_with(num_blocks: int, used: dict[int, int], cached: list[int]) -> BlockLists:
    """Lists of `num_blocks` where `used` maps block -> ref count and `cached` is the LRU order."""
    lists = BlockLists(num_blocks)
    for block_id, ref in used.items():
        del lists._free[block_id]
        lists.ref_counts[block_id] = ref
    for block_id in cached:
        del lists._free[block_id]
        lists._cached[block_id] = None
    return lists


def test_fresh_lists_count_every_usable_block_free() -> None:
    lists = BlockLists(5)
    lists.check()
    assert (lists.num_usable_blocks, lists.num_free, lists.num_cached, lists.num_used) == (4, 4, 0, 0)
    assert lists.free_order() == [1, 2, 3, 4] and NULL_BLOCK_ID not in lists.free_order()
    assert lists.can_allocate(4) and not lists.can_allocate(5)


def test_counts_and_refresh() -> None:
    lists = _lists_with(8, used={1: 1, 2: 3}, cached=[5, 3, 6])
    lists.check()
    assert (lists.num_free, lists.num_cached, lists.num_used, lists.num_allocatable) == (2, 3, 2, 5)
    lists.refresh([3, 1, 4])  # 1 is used and 4 free: only the cached 3 moves
    assert lists.cached_lru_order() == [5, 6, 3] and lists.free_order() == [4, 7]
    lists.check()


@pytest.mark.parametrize("damage", ["both lists", "held and listed", "unlisted", "null listed"])
def test_check_catches_a_misplaced_block(damage: str) -> None:
    lists = _lists_with(6, used={1: 1}, cached=[2])
    if damage == "both lists":
        lists._free[2] = None
    elif damage == "held and listed":
        lists.ref_counts[3] = 1
    elif damage == "unlisted":
        del lists._free[3]
    else:
        lists._cached[NULL_BLOCK_ID] = None
    with pytest.raises(AssertionError):
        lists.check()
