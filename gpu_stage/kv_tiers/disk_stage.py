"""KvDiskStage: the disk tier's actor. Reads block files into host slots, writes host slots to
block files and deletes evicted files, on a small thread pool so the event loop never waits on
the disk; each finished job goes back to the scheduler as a `KvDiskDone`.

Jobs run concurrently (up to `num_threads`): the scheduler pins every slot a job touches until
its `KvDiskDone` arrives, so no two jobs share a slot. Results are force-put into the scheduler's
inbox: the scheduler bounds the jobs it has in flight itself, and a blocking put here could wait
on a scheduler that is waiting to send us more work. On stop, queued and running jobs finish
first: a graceful shutdown flushes pending writes.
"""
from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from gpu_stage.kv_tiers.disk_store import DiskStore
from gpu_stage.kv_tiers.host_pool import HostKvPool
from stages.channel import Channel, ChannelClosed
from stages.messages import KvDiskDone, KvDiskRequest
from stages.stage import Stage

log = logging.getLogger("ttft.kv_disk")


class KvDiskStage(Stage[KvDiskRequest]):
    def __init__(self, store: DiskStore, host: HostKvPool, reply: Channel, inbox_size: int,
                 num_threads: int = 4, read_delay_s: float = 0.0) -> None:
        super().__init__("kv_disk", inbox_size)
        self.store = store
        self.host = host
        self.reply = reply
        self.read_delay_s = read_delay_s  # test hook: an injected disk latency (faults.py)
        self._executor = ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="ttft-kv-disk")
        self._jobs: set[asyncio.Task[None]] = set()

    async def handle(self, msg: KvDiskRequest) -> None:
        job = asyncio.create_task(self._run_job(msg), name=f"kv_disk:{msg.kind}")
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    async def _run_job(self, msg: KvDiskRequest) -> None:
        loop = asyncio.get_running_loop()
        try:
            ok, duration_ns = await loop.run_in_executor(self._executor, self._do, msg)
        except Exception:  # a bug, not a disk fault (those come back as False): report a miss
            log.exception("disk job %s failed", msg.kind)
            ok, duration_ns = False, 0
        if msg.kind == "delete":
            return
        done = KvDiskDone(msg.kind, msg.block_hash, msg.slot, ok, self.host.block_nbytes if ok else 0,
                          duration_ns)
        try:
            # One reply per job, and jobs are bounded by the scheduler (pinned host slots, the
            # write cap), so the reply channel holds at most that many past its size.
            self.reply.force_put(done)
        except ChannelClosed:
            pass  # shutting down: nobody waits for it

    def _do(self, msg: KvDiskRequest) -> tuple[bool, int]:
        """(ok, the job's own time): measured in the worker, so it says how fast the disk is,
        not how long the job queued."""
        t0 = time.perf_counter_ns()
        if msg.kind == "read" and self.read_delay_s:
            time.sleep(self.read_delay_s)
        ok = run_disk_job(self.store, self.host, msg.kind, msg.block_hash, msg.slot)
        return ok, time.perf_counter_ns() - t0

    async def flush(self) -> None:
        """Wait for every job taken so far (pending writes included)."""
        while self._jobs:
            await asyncio.gather(*list(self._jobs), return_exceptions=True)

    async def on_stop(self) -> None:
        await self.flush()
        self._executor.shutdown(wait=True)


def run_disk_job(store: DiskStore, host: HostKvPool, kind: str, block_hash: bytes, slot: int) -> bool:
    """Read a block file into a host slot, write a slot to a file, or delete a file -> ok."""
    if kind == "read":
        return store.read_into(block_hash, host.slot_bytes(slot))
    if kind == "write":
        return store.write(block_hash, host.slot_bytes(slot))
    store.delete(block_hash)
    return True
