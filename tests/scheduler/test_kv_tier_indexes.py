"""HostIndex, DiskIndex and FetchCostModel on their own: slot reuse and LRU order, pins that keep
in-flight slots from being reused, disk capacity on start-up, and the wait-or-recompute rule."""
from __future__ import annotations

import pytest

from scheduler.kv_tiers.config import TierConfig
from scheduler.kv_tiers.cost_model import FetchCostModel
from scheduler.kv_tiers.disk_index import DiskIndex
from scheduler.kv_tiers.host_index import HostIndex


def h(i: int) -> bytes:
    return bytes([i]) * 32


def test_host_slots_fill_in_order_then_the_lru_unpinned_one_is_reused() -> None:
    idx = HostIndex(3)
    assert [idx.insert(h(i)) for i in range(3)] == [(0, None), (1, None), (2, None)]
    assert idx.insert(h(9)) is None  # all filling, so all pinned
    for slot in range(3):
        idx.mark_ready(slot)
        idx.unpin(slot)
    idx.touch(h(0))  # LRU: 1, 2, 0
    idx.pin(1)  # e.g. the source of a load in flight
    assert idx.insert(h(3)) == (2, h(2))  # 1 is pinned: the next LRU one goes
    assert idx.lru_order() == [h(1), h(0), h(3)] and idx.lookup(h(2)) is None
    idx.check()


def test_a_removed_pinned_slot_is_freed_only_when_unpinned() -> None:
    idx = HostIndex(1)
    slot, _ = idx.insert(h(1))
    idx.remove(h(1))  # a failed read: forgotten, but the read still holds the slot
    assert h(1) not in idx and idx.insert(h(2)) is None
    idx.unpin(slot)
    assert idx.insert(h(2)) == (0, None)
    idx.check()


def test_disk_index_keeps_capacity_from_the_start() -> None:
    idx = DiskIndex(2, existing=[h(1), h(2), h(3)])  # a smaller disk tier than last time
    assert idx.over_capacity_at_start == [h(1)] and idx.lru_order() == [h(2), h(3)]
    idx.touch(h(2))
    assert idx.insert(h(4)) == [h(3)] and idx.lru_order() == [h(2), h(4)]


def test_wait_only_when_the_fetch_beats_recompute_scaled_by_the_busy_gpu() -> None:
    cost = FetchCostModel(TierConfig(num_host_blocks=1, block_nbytes=1, disk_bytes_per_s=1e9,
                                     recompute_s_per_token=1e-4, max_fetch_wait_s=5.0,
                                     disk_parallelism=1))
    # 100 MB: 0.1 s to read; 512 tokens: 51 ms to recompute
    assert not cost.should_wait(100_000_000, 0.0, 512, num_busy=0)
    assert cost.should_wait(100_000_000, 0.0, 512, num_busy=1)  # recompute would delay another
    assert cost.should_wait(100_000_000, 0.08, 512, num_busy=0)  # almost there
    assert not cost.should_wait(100_000_000, 6.0, 512, num_busy=8)  # never past the cap
    assert cost.remaining_fetch_s(100_000_000, 1.0) == pytest.approx(0.025)  # overdue: a quarter again
    cost.disk_parallelism = 4  # four reads side by side: a quarter of the time
    assert cost.remaining_fetch_s(100_000_000, 0.0) == pytest.approx(0.025)


def test_rates_are_learned_from_measurements() -> None:
    cost = FetchCostModel(TierConfig(num_host_blocks=1, block_nbytes=1, disk_bytes_per_s=1e9,
                                     recompute_s_per_token=1e-4))
    cost.observe_step(10, 1.0)  # a decode-sized step says nothing about prefill cost
    assert cost.recompute_s_per_token == 1e-4
    for _ in range(50):
        cost.observe_step(1000, 0.02)
        cost.observe_disk_read(2_000_000, 0.001)
    assert cost.recompute_s_per_token == pytest.approx(2e-5, rel=1e-3)
    assert cost.disk_bytes_per_s == pytest.approx(2e9, rel=1e-3)
