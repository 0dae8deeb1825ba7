"""KV tiers under tensor parallelism: every rank offloads, restores and stores its own shard.

The scheduler sees one set of tiers, as it sees one KV pool: the same host slot ids and block
hashes name a block's shard on every rank (kv_tiers/rank_tiers.py sizes them alike). Here:
  ShardedTransfer     the driver's copier: a batch's tier copies (and early copies) go to every
                      worker over the step broadcast, then run on the driver's own shard;
  ShardedKvDiskStage  the driver's disk stage: each job runs on every rank through the disk lanes
                      (disk_lanes.py), its verdict every rank's;
  WorkerTiers         a worker's side: its host pool and block files, the copies it receives, the
                      lanes it serves;
  connect_tiers       the start-up step every rank takes at the same point: the disk blocks every
                      rank holds, and the lanes.
A worker fences its copies into the step they ride with (its compute stream waits for them): the
driver learns a step is done only after every rank's forward of it (its collectives), so "step
done" still means "its copies are done" on every rank, which the scheduler relies on to reuse a
block or a slot and to write a slot to disk. (On the driver, early offloads still run beside the
forward; a worker's wait for them costs the copy of a few blocks.)
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import torch

from gpu_stage.kv.cache import KvCache
from gpu_stage.kv_tiers.disk_stage import KvDiskStage, run_disk_job
from gpu_stage.kv_tiers.disk_store import DiskStore
from gpu_stage.kv_tiers.host_pool import HostKvPool
from gpu_stage.kv_tiers.rank_tiers import RankTiers, TierSpec, build_rank_tiers
from gpu_stage.kv_tiers.transfer import KvTransfer
from gpu_stage.parallel.disk_lanes import DiskLanes, agree_disk_blocks
from gpu_stage.parallel.step_broadcast import StepBroadcast
from gpu_stage.parallel.tensor_parallel import TensorParallel
from stages.channel import Channel
from stages.messages import KvDiskRequest, KvTransferOps


class ShardedTransfer:
    enabled = True

    def __init__(self, local: KvTransfer, steps: StepBroadcast) -> None:
        self.local, self.steps = local, steps

    def run(self, ops: KvTransferOps) -> torch.cuda.Event | None:
        if ops:  # (a fence alone stays here: every worker fences its copies anyway)
            self.steps.send_copies(ops)
        return self.local.run(ops)

    @property
    def num_blocks_moved(self) -> int:
        return self.local.num_blocks_moved


class ShardedKvDiskStage(KvDiskStage):
    """KvDiskStage whose every job runs on every rank; one thread per lane."""

    def __init__(self, store: DiskStore, host: HostKvPool, reply: Channel, inbox_size: int, lanes: DiskLanes,
                 read_delay_s: float = 0.0) -> None:
        super().__init__(store, host, reply, inbox_size, num_threads=len(lanes), read_delay_s=read_delay_s)
        self.lanes = lanes

    def _do(self, msg: KvDiskRequest) -> tuple[bool, int]:
        """(every rank's ok, the time until the slowest rank's part was done)."""
        t0 = time.perf_counter_ns()
        ok = self.lanes.run(msg.kind, msg.block_hash, msg.slot, lambda: KvDiskStage._do(self, msg)[0])
        return ok, time.perf_counter_ns() - t0


def connect_tiers(parallel: TensorParallel, tiers: RankTiers, num_lanes: int) -> tuple[list[bytes], DiskLanes | None]:
    """Every rank, at the same point of its start-up -> (the blocks every rank's disk holds,
    oldest first; the disk lanes, None without a disk tier). The lanes are kept on `parallel`
    (the driver ends them when it closes)."""
    found = tiers.store.scan() if tiers.store is not None else []
    blocks = agree_disk_blocks(parallel.host_group, parallel.rank, found, (tiers.num_host, tiers.num_disk))
    parallel.disk_lanes = DiskLanes.create(parallel.rank, num_lanes) if tiers.store is not None else None
    return blocks, parallel.disk_lanes


@dataclass
class WorkerTiers:
    tiers: RankTiers
    transfer: KvTransfer
    lanes: DiskLanes | None

    @classmethod
    def start(cls, spec: TierSpec, kv_cache: KvCache, parallel: TensorParallel) -> WorkerTiers:
        """Build this worker's tiers and serve the driver's disk jobs from now on."""
        tiers = build_rank_tiers(spec, kv_cache, parallel.rank, parallel.world_size)
        _, lanes = connect_tiers(parallel, tiers, spec.disk_threads)
        if lanes is not None:
            lanes.serve(partial(run_disk_job, tiers.store, tiers.host_pool))
        return cls(tiers, KvTransfer(kv_cache, tiers.host_pool), lanes)

    def copy(self, ops: KvTransferOps) -> None:
        """Run the driver's tier copies on this shard; the next forward waits for them."""
        ops.fence = True
        self.transfer.run(ops)

    def join(self, timeout_s: float = 5.0) -> None:
        if self.lanes is not None:
            self.lanes.join(timeout_s)
