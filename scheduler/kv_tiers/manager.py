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
hands their results back. Tiers off: the scheduler holds a NoTiers (no_tiers.py) instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from scheduler.block_pool import BlockPool
from scheduler.kv_tiers.config import TierConfig
from scheduler.kv_tiers.copy_queue import CopyQueue
from scheduler.kv_tiers.cost_model import FetchCostModel
from scheduler.kv_tiers.disk_index import DiskIndex
from scheduler.kv_tiers.host_index import HostIndex
from scheduler.kv_tiers.stats import TierStats
from scheduler.request_state import RequestState
from stages.messages import KvDiskDone, KvDiskRequest, KvTransferOps
from stages.trace import host_clock_ns


@dataclass(slots=True)
class _Read:
    slot: int
    started_ns: int
    waiters: set[str] = field(default_factory=set)


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
        self._reads: dict[bytes, _Read] = {}
        self._writes: dict[bytes, int] = {}  # hash -> slot being written to disk
        self._version = 0  # bumped whenever a block becomes fetchable: prefetch again then
        self._seen_version: dict[str, int] = {}
        pool.on_evict = self._on_device_evict
        if config.offload_on_cache:
            pool.on_cached = self._on_cached

    # -- device eviction -> host ---------------------------------------------------------------
    def _on_device_evict(self, block_id: int, block_hash: bytes) -> None:
        slot = self.host.lookup(block_hash)
        if slot is not None:
            self.host.touch(block_hash)  # inclusive: its bytes are already there (or on their way)
            self.copies.fence |= not self.host.is_ready(slot)
            return
        self.copies.fence = True  # the block is reused next: its copy must run before that forward
        self._offload(block_id, block_hash)

    def _on_cached(self, block_id: int, block_hash: bytes) -> None:
        if block_hash not in self.host:  # (a block fetched from host is cached there already)
            self._offload(block_id, block_hash)

    def _offload(self, block_id: int, block_hash: bytes) -> None:
        placed = self.host.insert(block_hash)
        if placed is None:
            self.stats.num_host_full_drops += 1
            return
        slot, evicted = placed
        if evicted is not None:
            self.stats.evictions["host"] += 1
        self.copies.offload(block_id, slot, block_hash)
        self.stats.bytes["d2h"] += self.config.block_nbytes
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
            if self._should_write(block_hash):
                self._writes[block_hash] = slot  # keeps its filling pin until written
                self.disk_requests.append(KvDiskRequest("write", block_hash, slot))
            else:
                self.host.unpin(slot)

    def _should_write(self, block_hash: bytes) -> bool:
        if not self.config.has_disk or block_hash in self.disk or block_hash in self._writes:
            return False
        if len(self._writes) >= self.config.max_pending_disk_writes:
            self.stats.num_disk_writes_skipped += 1
            return False
        return True

    # -- disk results --------------------------------------------------------------------------
    def on_disk_done(self, done: KvDiskDone, now_ns: int | None = None) -> None:
        if done.kind == "write":
            slot = self._writes.pop(done.block_hash)
            self.host.unpin(slot)
            if done.ok:
                self.stats.bytes["disk_write"] += done.num_bytes
                for gone in self.disk.insert(done.block_hash):
                    self.stats.evictions["disk"] += 1
                    self.disk_requests.append(KvDiskRequest("delete", gone))
            else:
                self.stats.num_disk_write_errors += 1
        elif done.kind == "read":
            self._on_read_done(done, host_clock_ns() if now_ns is None else now_ns)

    def _on_read_done(self, done: KvDiskDone, now_ns: int) -> None:
        read = self._reads.pop(done.block_hash)
        for rid in read.waiters:
            self.stats.note_fetch(rid, done_ns=now_ns)
        if not done.ok:  # corrupt, truncated, foreign or unreadable: a miss, recomputed
            self.stats.num_disk_read_errors += 1
            self.disk.remove(done.block_hash)
            self.host.remove(done.block_hash)
            self.host.unpin(read.slot)
            return
        self.stats.bytes["disk_read"] += done.num_bytes
        self.cost.observe_disk_read(done.num_bytes, done.duration_ns / 1e9)
        self.host.mark_ready(read.slot)
        self._version += 1
        waiters = [rid for rid in read.waiters if rid in self._seen_version]
        if waiters and self.pool.lookup(done.block_hash) is None:
            self._load([(done.block_hash, read.slot)], waiters)  # takes over the read's pin
        else:
            self.host.unpin(read.slot)

    # -- prefetch ------------------------------------------------------------------------------
    def has_news(self, req: RequestState) -> bool:
        """Whether prefetch or must_wait could say anything new for this waiting request: some
        block became fetchable since its last prefetch, or disk reads are running."""
        return bool(self._reads) or self._seen_version.get(req.request_id) != self._version

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
            read = self._reads.get(block_hash)
            if read is not None:
                read.waiters.add(rid)
                tier = "disk"
            elif slot is not None:
                self.host.touch(block_hash)
                self.host.pin(slot)  # now: a disk read started below must not take this slot
                to_load.append((block_hash, slot))
                tier = "host"
            elif block_hash in self.disk and self._start_read(block_hash, rid):
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

    def _start_read(self, block_hash: bytes, rid: str) -> bool:
        placed = self.host.insert(block_hash)
        if placed is None:
            return False
        slot, evicted = placed
        if evicted is not None:
            self.stats.evictions["host"] += 1
        self.disk.touch(block_hash)
        now = host_clock_ns()
        self._reads[block_hash] = _Read(slot, now, {rid})
        self.disk_requests.append(KvDiskRequest("read", block_hash, slot))
        self.stats.note_fetch(rid, started_ns=now)
        return True

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
        if not self._reads:
            return False
        pending = 0
        started_ns = None
        for block_hash in req.block_hashes[num_device_hits:]:
            read = self._reads.get(block_hash)
            if read is None:
                break
            pending += 1
            started_ns = read.started_ns if started_ns is None else min(started_ns, read.started_ns)
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
        for read in self._reads.values():
            read.waiters.discard(rid)

    def take_disk_requests(self) -> list[KvDiskRequest]:
        out, self.disk_requests = self.disk_requests, []
        return out

    # -- introspection -------------------------------------------------------------------------
    def check(self) -> None:
        self.host.check()
        for block_hash, read in self._reads.items():
            assert self.host.lookup(block_hash) == read.slot and not self.host.is_ready(read.slot)
        for block_hash, slot in self._writes.items():
            assert self.host.lookup(block_hash) == slot and self.host.pins.get(slot, 0) > 0
