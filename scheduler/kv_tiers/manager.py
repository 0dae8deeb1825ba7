"""KvTierManager: where each cached block lives below the device pool, and the copies that move it.

The cascade, device -> host -> disk:
- When the device pool evicts a cached block (BlockPool.on_evict), its bytes are copied into a host
  slot (an *offload*, run by the GPU stage before the next step's forward, so before the block is
  overwritten). Tiers are inclusive: a block already in the host tier is only refreshed.
  With `offload_on_cache`, a block is offloaded as soon as it is cached (BlockPool.on_cached), on
  the copy stream beside the next steps (the batch's ops are not a `fence`), so that evicting it
  later costs the step that reuses it nothing; that step is fenced only if the copy may still be
  running (its slot is not ready yet).
- When the offload's step has completed, the slot is ready and, with a disk tier, is written to a
  block file in the background (write-through, so a restart finds it); the slot stays pinned until
  the write is done. Host and disk each evict least recently used first.
Shadow prefetch, at arrival: the request's chain of block hashes is followed past the device hits
into the host tier (those blocks are given device blocks now and *loaded* with the next step) and
the disk tier (read into a host slot in the background, then loaded). A fetched device block is
at once an ordinary cached prefix block (ref 0, at the most recently used end), so admission finds
it as a prefix hit and the shadow protects it as one of the request's claimed hits. Nothing holds
it: a request that waits for room never pins blocks an older request needs (no deadlock). Device
order makes this safe: a batch's loads run before its forward, so any step that reads the block,
that batch or a later one, sees it loaded; and if the block is evicted and reused before its load
runs, the load lands first and the new owner's own writes come after it.
The manager is a synchronous core: it never copies bytes. It queues `KvTransferOps` for the next
batch (through its CopyQueue, copy_queue.py) and `KvDiskRequest`s for the disk stage; the stage
hands their results back. Its halves: HostOffload (host_offload.py) runs device -> host, DiskJobs
(disk_jobs.py) the writes and reads of the disk tier; the manager keeps the prefetch, the loads
and admission's wait-or-recompute. Tiers off: the scheduler holds a NoTiers (no_tiers.py) instead.
"""
from __future__ import annotations

from typing import Callable, Iterable

from scheduler.block_pool import BlockPool
from scheduler.kv_tiers.config import TierConfig
from scheduler.kv_tiers.copy_queue import CopyQueue
from scheduler.kv_tiers.cost_model import FetchCostModel
from scheduler.kv_tiers.disk_index import DiskIndex
from scheduler.kv_tiers.disk_jobs import DiskJobs
from scheduler.kv_tiers.host_index import HostIndex
from scheduler.kv_tiers.host_offload import HostOffload
from scheduler.kv_tiers.stats import TierStats
from scheduler.request_state import RequestState
from stages.messages import KvDiskDone, KvDiskRequest, KvTransferOps
from stages.trace import host_clock_ns


class KvTierManager:
    enabled = True  # (NoTiers: False)

    def __init__(self, config: TierConfig, pool: BlockPool, room: Callable[[str], int],
                 fetched: Callable[[str, int], None], existing_disk: Iterable[bytes] = ()) -> None:
        assert config.enabled and pool.enable_caching, "tiers hold prefix-cache blocks: caching must be on"
        self.config = config
        self.pool = pool
        self.room = room  # device blocks a fetch for a request may take, claims respected
        self.fetched = fetched  # told of blocks fetched for a request that already holds a claim
        self.host = HostIndex(config.num_host_blocks)
        # No disk tier: an index of no capacity, which never holds a block (nothing is written).
        self.disk = DiskIndex(config.num_disk_blocks, existing_disk if config.has_disk else ())
        self.cost = FetchCostModel(config)
        self.stats = TierStats()
        self.disk_requests: list[KvDiskRequest] = [
            KvDiskRequest("delete", h) for h in self.disk.over_capacity_at_start]
        self.copies = CopyQueue()
        self.disk_jobs = DiskJobs(config, self.disk, self.host, self.cost, self.stats, self.disk_requests)
        self._version = 0  # bumped whenever a block becomes fetchable: prefetch again then
        self._seen_version: dict[str, int] = {}
        offload = HostOffload(config, self.host, self.copies, self.stats, self._fetchable)
        pool.on_evict = offload.on_device_evict
        if config.offload_on_cache:
            pool.on_cached = offload.on_cached

    def _fetchable(self) -> None:
        self._version += 1

    # -- batches -------------------------------------------------------------------------------
    def take_ops(self, step_id: int) -> KvTransferOps | None:
        """The copies to ride with batch `step_id` (CopyQueue.take_ops)."""
        return self.copies.take_ops(step_id)

    def take_early_ops(self, next_step_id: int) -> KvTransferOps | None:
        """Loads to start now, before the batch that admits their request (CopyQueue.take_early_ops)."""
        return self.copies.take_early_ops(next_step_id)

    def mark_dirty(self, block_ids: Iterable[int], until_step: int) -> None:
        """Blocks freed while step `until_step` may still write them (CopyQueue.mark_dirty)."""
        self.copies.mark_dirty(block_ids, until_step)

    def observe_step(self, num_tokens: int, duration_s: float) -> None:
        """A step's time: the recompute cost that the wait-or-recompute choice weighs."""
        self.cost.observe_step(num_tokens, duration_s)

    def on_step_done(self, step_id: int) -> None:
        """A batch's copies have completed (its step did): offloaded slots are ready, load
        sources free to go; ready slots are written to disk in the background."""
        done = self.copies.step_done(step_id)
        if done is None:
            return
        now = host_clock_ns()
        for info in done.load_infos:  # the copies ran before the step's forward: done by now
            info["fetch_done_ns"] = now
        for slot in done.load_slots:
            self.host.unpin(slot)
        for slot, block_hash in done.ready_slots:
            self.host.mark_ready(slot)
            if not self.disk_jobs.write_through(block_hash, slot):
                self.host.unpin(slot)

    # -- disk results --------------------------------------------------------------------------
    def on_disk_done(self, done: KvDiskDone, now_ns: int | None = None) -> None:
        if done.kind == "write":
            self.disk_jobs.write_done(done)
            return
        now_ns = host_clock_ns() if now_ns is None else now_ns
        read = self.disk_jobs.read_done(done, now_ns) if done.kind == "read" else None
        if read is None:  # not a read, or a failed one (a miss, recomputed)
            return
        self._fetchable()
        waiters = [rid for rid in read.waiters if rid in self._seen_version]
        if waiters and self.pool.lookup(done.block_hash) is None:
            self._load([(done.block_hash, read.slot)], waiters)  # takes over the read's pin
        else:
            self.host.unpin(read.slot)

    # -- prefetch ------------------------------------------------------------------------------
    def has_news(self, req: RequestState) -> bool:
        """Whether prefetch or must_wait could say anything new for this waiting request: some
        block became fetchable since its last prefetch, or disk reads are running."""
        return bool(self.disk_jobs.reads) or self._seen_version.get(req.request_id) != self._version

    def prefetch(self, req: RequestState, device_hits: list[int]) -> bool:
        """Bring up what the request's prefix has below the device: host blocks are loaded with
        the next batch, disk blocks read into host now. Cheap to call again: it does nothing
        until some block became fetchable since its last call for this request. True when it
        gave blocks to the device, which may now continue `device_hits` (match again)."""
        rid = req.request_id
        last = self._seen_version.get(rid)
        if last == self._version:
            return False
        self._seen_version[rid] = self._version
        count_hits = last is None  # hits are what the first (arrival-time) match found
        self.stats.track(req)
        max_hit_blocks = (req.num_tokens - 1) // self.pool.block_size
        to_load: list[tuple[bytes, int]] = []
        for block_hash in req.block_hashes[len(device_hits):max_hit_blocks]:
            if self.pool.lookup(block_hash) is not None:
                continue  # already on the device (fetched for someone else)
            slot = self.host.lookup(block_hash)
            read = self.disk_jobs.reads.get(block_hash)
            if read is not None:
                read.waiters.add(rid)
                tier = "disk"
            elif slot is not None:
                self.host.touch(block_hash)
                self.host.pin(slot)  # now: a disk read started below must not take this slot
                to_load.append((block_hash, slot))
                tier = "host"
            elif block_hash in self.disk and self.disk_jobs.start_read(block_hash, rid):
                tier = "disk"
            else:
                break
            if count_hits:
                self.stats.note_hit(req, tier)
        if to_load:
            self.pool.touch(device_hits)  # so the allocation cannot evict this request's own hits
            self._load(to_load, [rid])
            self.pool.free(reversed(device_hits))
        return bool(to_load)

    def _load(self, blocks: list[tuple[bytes, int]], for_ids: list[str]) -> None:
        """Give `blocks` (hash, host slot) device blocks, register them as cached prefix blocks
        and queue their host -> device copies (fetched for `for_ids`, whose traces record it).
        The caller pinned each slot (so that nothing, e.g. the offloads of blocks the allocation
        evicts, takes it in between); the pins of the copies queued last until their step is done."""
        num = min(len(blocks), max(0, self.room(for_ids[0])))
        block_ids = self.pool.allocate(num) if num else None
        for _, slot in blocks[len(block_ids or ()):]:
            self.host.unpin(slot)
        if not block_ids:
            self.stats.num_loads_deferred += len(blocks)
            return
        self.stats.num_loads_deferred += len(blocks) - len(block_ids)
        for rid in for_ids:
            self.fetched(rid, len(block_ids))
        now = host_clock_ns()
        for (block_hash, slot), block_id in zip(blocks, block_ids):
            registered = self.pool.cache_block(block_id, block_hash)
            assert registered, "a fetched block is already on the device"
            self.copies.load(slot, block_id)
            for rid in for_ids:
                self.stats.note_fetch(rid, started_ns=now, num_bytes=self.config.block_nbytes)
        self.pool.free(reversed(block_ids))  # cached now: chain tail nearest eviction, as kv.free
        self.copies.note_loaded_for(info for rid in for_ids if (info := self.stats.infos.get(rid)) is not None)
        self.stats.bytes["h2d"] += len(block_ids) * self.config.block_nbytes

    # -- admission -----------------------------------------------------------------------------
    def must_wait(self, req: RequestState, num_device_hits: int, num_busy: int) -> bool:
        """Whether the request should wait for the disk reads that continue its device prefix
        rather than recompute those blocks now (see cost_model.py)."""
        if not self.disk_jobs.reads:
            return False
        pending, started_ns = self.disk_jobs.pending_reads(req.block_hashes[num_device_hits:])
        if not pending:
            return False
        assert started_ns is not None
        elapsed_s = (host_clock_ns() - started_ns) / 1e9
        wait = self.cost.should_wait(pending * self.config.block_nbytes, elapsed_s,
                                     pending * self.pool.block_size, num_busy)
        self.stats.note_decision(req, "wait" if wait else "recompute", host_clock_ns())
        return wait

    def release(self, req: RequestState) -> None:
        """The request was admitted or ended: forget its prefetch bookkeeping (its trace keeps
        the record) and stop waiting on its behalf for reads still running."""
        rid = req.request_id
        self._seen_version.pop(rid, None)
        self.stats.note_admitted(rid, host_clock_ns())
        self.stats.forget(rid)
        self.disk_jobs.forget_waiter(rid)

    def take_disk_requests(self) -> list[KvDiskRequest]:
        out = self.disk_requests[:]  # the list itself stays: DiskJobs appends to it
        self.disk_requests.clear()
        return out

    # -- introspection -------------------------------------------------------------------------
    def check(self) -> None:
        self.host.check()
        self.disk_jobs.check()
