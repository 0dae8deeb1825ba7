"""PrefixIndex: leading blocks held per replica, LRU bound, forgetting a lost replica."""
from __future__ import annotations

from router.prefix_index import PrefixIndex


def test_counts_only_the_leading_run_of_held_blocks() -> None:
    index = PrefixIndex()
    index.record(0, [b"a", b"b", b"c"])
    assert index.num_cached_blocks(0, [b"a", b"b", b"c", b"d"]) == 3
    assert index.num_cached_blocks(0, [b"a", b"x", b"c"]) == 1
    assert index.num_cached_blocks(1, [b"a", b"b"]) == 0
    index.record(1, [b"a"])
    assert index.num_cached_blocks(1, [b"a", b"b"]) == 1 and index.num_cached_blocks(0, [b"a", b"b"]) == 2


def test_least_recently_used_blocks_go_first_past_the_bound() -> None:
    index = PrefixIndex(max_blocks=3)
    index.record(0, [b"a", b"b", b"c"])
    index.record(0, [b"a"])  # a is used again: b is now the oldest
    index.record(0, [b"d"])
    assert len(index) == 3
    assert index.num_cached_blocks(0, [b"b"]) == 0 and index.num_cached_blocks(0, [b"a"]) == 1


def test_a_forgotten_replica_holds_nothing_until_it_is_sent_blocks_again() -> None:
    index = PrefixIndex()
    index.record(0, [b"a", b"b"])
    index.record(1, [b"a", b"b"])
    index.forget(0)
    assert index.num_cached_blocks(0, [b"a", b"b"]) == 0
    assert index.num_cached_blocks(1, [b"a", b"b"]) == 2
    index.record(0, [b"a"])
    assert index.num_cached_blocks(0, [b"a", b"b"]) == 1


def test_removed_blocks_end_the_run_there_for_that_replica_only() -> None:
    index = PrefixIndex()
    index.record(0, [b"a", b"b", b"c"])
    index.record(1, [b"a", b"b"])
    index.remove(0, [b"b", b"never-held"])
    assert index.num_cached_blocks(0, [b"a", b"b", b"c"]) == 1
    assert index.num_cached_blocks(1, [b"a", b"b"]) == 2
    index.remove(1, [b"a", b"b"])
    index.remove(0, [b"a", b"c"])
    assert len(index) == 0  # a hash nobody holds is dropped, not kept empty


def test_host_blocks_are_bounded_with_the_index() -> None:
    index = PrefixIndex(max_blocks=3)
    hashes = [bytes([k]) * 16 for k in range(5)]
    index.record(0, hashes, on_host=True)  # the two oldest fall out of the index, and of the host set
    assert index.num_cached_blocks(0, hashes[2:]) == 3 and index.num_host_blocks(0, hashes[2:], 3) == 3
    assert index._on_host[0] == set(hashes[2:])


def test_held_is_the_two_look_ups_remembered_only_while_the_index_stands() -> None:
    index = PrefixIndex()
    hashes = (b"a", b"b", b"c")
    index.record(0, hashes[:2])
    index.record(0, hashes[1:2], on_host=True)
    assert index.held(0, hashes) == (2, 1) == (index.num_cached_blocks(0, hashes), index.num_host_blocks(0, hashes, 2))
    assert index.held(1, hashes) == (0, 0) and index.held(0, hashes) == (2, 1)  # one remembered per replica
    for change in (lambda: index.record(0, hashes), lambda: index.remove(0, hashes[1:]), lambda: index.forget(0)):
        before = index.held(0, hashes)
        change()
        assert index.held(0, hashes) == (index.num_cached_blocks(0, hashes),
                                         index.num_host_blocks(0, hashes, index.num_cached_blocks(0, hashes)))
        assert index.held(0, hashes) != before  # each change is seen at once
    assert index.held(0, (b"other",)) == (0, 0)  # another prompt is looked up, not taken from the memo
