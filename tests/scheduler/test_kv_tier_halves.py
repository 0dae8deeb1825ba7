"""The KV tier manager's halves on their own: HostOffload (device -> host copies, fences, drops
when every host slot is pinned) and DiskJobs (write-through with its cap and errors, reads into
host slots that succeed or are forgotten in both tiers, the pending reads admission weighs)."""
from __future__ import annotations

import pytest

from scheduler.kv_tiers.config import TierConfig
from scheduler.kv_tiers.copy_queue import CopyQueue
from scheduler.kv_tiers.cost_model import FetchCostModel
from scheduler.kv_tiers.disk_index import DiskIndex
from scheduler.kv_tiers.disk_jobs import DiskJobs
from scheduler.kv_tiers.host_index import HostIndex
from scheduler.kv_tiers.host_offload import HostOffload
from scheduler.kv_tiers.stats import TierStats
from stages.messages import KvDiskDone, KvDiskRequest

NBYTES = 1024


def h(i: int) -> bytes:
    return bytes([i]) * 32


def _offload(num_host: int = 2) -> tuple[HostOffload, list[int]]:
    bumps: list[int] = []
    config = TierConfig(num_host_blocks=num_host, block_nbytes=NBYTES)
    half = HostOffload(config, HostIndex(num_host), CopyQueue(), TierStats(), lambda: bumps.append(1))
    return half, bumps


def test_an_evicted_block_is_offloaded_once_and_fences_until_ready() -> None:
    half, bumps = _offload()
    half.on_device_evict(5, h(1))
    assert half.copies.fence and half.host.lookup(h(1)) == 0 and len(bumps) == 1
    ops = half.copies.take_ops(step_id=1)
    assert ops is not None and ops.offloads == [(5, 0)] and ops.fence
    half.on_device_evict(6, h(1))  # inclusive: already there (still filling), so no second copy
    assert half.copies.fence and len(bumps) == 1 and half.stats.bytes["d2h"] == NBYTES
    half.copies.take_ops(step_id=2)
    half.host.mark_ready(0)
    half.on_device_evict(7, h(1))  # ready now: nothing to wait for
    assert not half.copies.fence and half.copies.take_ops(step_id=3) is None


def test_offload_on_cache_skips_host_blocks_and_drops_when_every_slot_is_pinned() -> None:
    half, bumps = _offload(num_host=1)
    half.on_cached(3, h(1))
    half.on_cached(4, h(1))  # fetched from host: cached there already
    assert not half.copies.fence and len(bumps) == 1
    half.on_device_evict(4, h(2))  # the only slot is filling, so pinned
    assert half.stats.num_host_full_drops == 1 and h(2) not in half.host and len(bumps) == 1


def _disk(num_host: int = 4, num_disk: int = 2, max_writes: int = 256) -> DiskJobs:
    config = TierConfig(num_host_blocks=num_host, num_disk_blocks=num_disk, block_nbytes=NBYTES,
                        max_pending_disk_writes=max_writes)
    return DiskJobs(config, DiskIndex(num_disk), HostIndex(num_host), FetchCostModel(config), TierStats(), [])


def _ready_slot(jobs: DiskJobs, block_hash: bytes) -> int:
    slot, _ = jobs.host.insert(block_hash)  # type: ignore[misc]
    jobs.host.mark_ready(slot)
    return slot


def test_write_through_queues_once_and_keeps_the_slot_pinned_until_done() -> None:
    jobs = _disk(num_disk=1)
    a, b = _ready_slot(jobs, h(1)), _ready_slot(jobs, h(2))
    assert jobs.write_through(h(1), a) and not jobs.write_through(h(1), a)  # already being written
    assert jobs.write_through(h(2), b)
    assert jobs.requests == [KvDiskRequest("write", h(1), a), KvDiskRequest("write", h(2), b)]
    jobs.check()
    jobs.write_done(KvDiskDone("write", h(1), a, True, num_bytes=NBYTES))
    jobs.write_done(KvDiskDone("write", h(2), b, True, num_bytes=NBYTES))  # capacity 1: h(1) goes
    assert jobs.disk.lru_order() == [h(2)] and jobs.requests[-1] == KvDiskRequest("delete", h(1))
    assert jobs.host.num_pinned == 0 and jobs.stats.bytes["disk_write"] == 2 * NBYTES
    assert not jobs.write_through(h(2), b)  # on disk already
    jobs.check()


def test_write_through_refuses_past_the_cap_and_counts_errors() -> None:
    jobs = _disk(max_writes=1)
    a, b = _ready_slot(jobs, h(1)), _ready_slot(jobs, h(2))
    assert jobs.write_through(h(1), a) and not jobs.write_through(h(2), b)
    assert jobs.stats.num_disk_writes_skipped == 1
    jobs.write_done(KvDiskDone("write", h(1), a, False))
    assert jobs.stats.num_disk_write_errors == 1 and len(jobs.disk) == 0 and jobs.host.pins == {b: 1}
    no_disk = _disk(num_disk=0)
    assert not no_disk.write_through(h(3), _ready_slot(no_disk, h(3))) and not no_disk.requests


@pytest.mark.parametrize("ok", [True, False])
def test_a_read_lands_pinned_in_host_or_is_forgotten_in_both_tiers(ok: bool) -> None:
    jobs = _disk()
    jobs.disk.insert(h(1))
    assert jobs.start_read(h(1), "r1")
    slot = jobs.host.lookup(h(1))
    assert jobs.requests == [KvDiskRequest("read", h(1), slot)] and jobs.reads[h(1)].waiters == {"r1"}
    jobs.check()
    read = jobs.read_done(KvDiskDone("read", h(1), slot, ok, num_bytes=NBYTES, duration_ns=10**6), now_ns=5)
    assert not jobs.reads
    if ok:
        assert read is not None and read.slot == slot and jobs.host.is_ready(slot) and jobs.host.pins == {slot: 1}
        assert h(1) in jobs.disk and jobs.stats.bytes["disk_read"] == NBYTES
    else:
        assert read is None and h(1) not in jobs.disk and h(1) not in jobs.host and not jobs.host.pins
        assert jobs.stats.num_disk_read_errors == 1
    jobs.check()


def test_pending_reads_count_the_run_from_the_first_hash_and_its_earliest_start() -> None:
    jobs = _disk(num_disk=4)
    for i in (1, 2, 4):
        jobs.disk.insert(h(i))
        assert jobs.start_read(h(i), f"r{i}")
    jobs.reads[h(1)].started_ns, jobs.reads[h(2)].started_ns = 30, 20
    assert jobs.pending_reads([h(1), h(2), h(3), h(4)]) == (2, 20)
    assert jobs.pending_reads([h(3), h(4)]) == (0, None)
    jobs.reads[h(2)].waiters.add("r9")
    jobs.forget_waiter("r9")
    jobs.forget_waiter("r1")
    assert [read.waiters for read in jobs.reads.values()] == [set(), {"r2"}, {"r4"}]


def test_check_catches_a_read_whose_slot_is_ready() -> None:
    jobs = _disk()
    jobs.disk.insert(h(1))
    jobs.start_read(h(1), "r1")
    jobs.host.mark_ready(jobs.reads[h(1)].slot)
    with pytest.raises(AssertionError):
        jobs.check()
