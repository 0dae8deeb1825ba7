"""DiskJobs: the disk half of the KV tiers as the scheduler sees it (manager.py tells the cascade).

It queues `KvDiskRequest`s for the disk stage and takes their results: writes of ready host slots
to block files (write-through, so a restart finds them; the slot stays pinned until the write is
done) and reads of block files into host slots. The disk index (DiskIndex) is updated as writes
complete and evicts least recently used first; a read that fails forgets the block in both tiers.
It never touches a file: the disk stage does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from scheduler.kv_tiers.config import TierConfig
from scheduler.kv_tiers.cost_model import FetchCostModel
from scheduler.kv_tiers.disk_index import DiskIndex
from scheduler.kv_tiers.host_index import HostIndex
from scheduler.kv_tiers.stats import TierStats
from stages.messages import KvDiskDone, KvDiskRequest
from stages.trace import host_clock_ns


@dataclass(slots=True)
class DiskRead:
    slot: int
    started_ns: int
    waiters: set[str] = field(default_factory=set)


class DiskJobs:
    def __init__(self, config: TierConfig, disk: DiskIndex, host: HostIndex, cost: FetchCostModel,
                 stats: TierStats, requests: list[KvDiskRequest]) -> None:
        self.config = config
        self.disk = disk
        self.host = host
        self.cost = cost
        self.stats = stats
        self.requests = requests  # queued for the disk stage (the manager's disk_requests)
        self.reads: dict[bytes, DiskRead] = {}
        self.writes: dict[bytes, int] = {}  # hash -> slot being written to disk

    # -- writes --------------------------------------------------------------------------------
    def write_through(self, block_hash: bytes, slot: int) -> bool:
        """Queue the write of a ready host slot, which keeps its filling pin until written. False
        when it is not written (no disk tier, already on disk or being written, too many writes
        in flight): the caller unpins the slot."""
        if not self.config.has_disk or block_hash in self.disk or block_hash in self.writes:
            return False
        if len(self.writes) >= self.config.max_pending_disk_writes:
            self.stats.num_disk_writes_skipped += 1
            return False
        self.writes[block_hash] = slot
        self.requests.append(KvDiskRequest("write", block_hash, slot))
        return True

    def write_done(self, done: KvDiskDone) -> None:
        slot = self.writes.pop(done.block_hash)
        self.host.unpin(slot)
        if not done.ok:
            self.stats.num_disk_write_errors += 1
            return
        self.stats.bytes["disk_write"] += done.num_bytes
        for gone in self.disk.insert(done.block_hash):
            self.stats.evictions["disk"] += 1
            self.requests.append(KvDiskRequest("delete", gone))

    # -- reads ---------------------------------------------------------------------------------
    def start_read(self, block_hash: bytes, rid: str) -> bool:
        """Read a disk block into a new host slot for request `rid`; False when every host slot
        is pinned."""
        placed = self.host.insert(block_hash)
        if placed is None:
            return False
        slot, evicted = placed
        if evicted is not None:
            self.stats.evictions["host"] += 1
        self.disk.touch(block_hash)
        now = host_clock_ns()
        self.reads[block_hash] = DiskRead(slot, now, {rid})
        self.requests.append(KvDiskRequest("read", block_hash, slot))
        self.stats.note_fetch(rid, started_ns=now)
        return True

    def read_done(self, done: KvDiskDone, now_ns: int) -> DiskRead | None:
        """Settle a finished read: its waiters' fetch times, then either a miss (corrupt,
        truncated, foreign or unreadable: forgotten in both tiers, recomputed; None) or a ready
        host slot, still pinned for the caller, who loads it or unpins it (the read)."""
        read = self.reads.pop(done.block_hash)
        for rid in read.waiters:
            self.stats.note_fetch(rid, done_ns=now_ns)
        if not done.ok:
            self.stats.num_disk_read_errors += 1
            self.disk.remove(done.block_hash)
            self.host.remove(done.block_hash)
            self.host.unpin(read.slot)
            return None
        self.stats.bytes["disk_read"] += done.num_bytes
        self.cost.observe_disk_read(done.num_bytes, done.duration_ns / 1e9)
        self.host.mark_ready(read.slot)
        return read

    def pending_reads(self, block_hashes: Sequence[bytes]) -> tuple[int, int | None]:
        """(how many of `block_hashes`, from the first, are being read; the earliest start, ns)."""
        num = 0
        started_ns = None
        for block_hash in block_hashes:
            read = self.reads.get(block_hash)
            if read is None:
                break
            num += 1
            started_ns = read.started_ns if started_ns is None else min(started_ns, read.started_ns)
        return num, started_ns

    def forget_waiter(self, rid: str) -> None:
        for read in self.reads.values():
            read.waiters.discard(rid)

    def check(self) -> None:
        """A read's slot is filling, a write's is pinned, and each holds its block."""
        for block_hash, read in self.reads.items():
            assert self.host.lookup(block_hash) == read.slot and not self.host.is_ready(read.slot)
        for block_hash, slot in self.writes.items():
            assert self.host.lookup(block_hash) == slot and self.host.pins.get(slot, 0) > 0
