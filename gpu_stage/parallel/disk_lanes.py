"""DiskLanes: the disk tier's jobs run on every rank of a tensor-parallel group, each on its own shard.

Each rank keeps its shard of a block in a file of its own (kv_tiers/rank_tiers.py), so a disk job
(read a file into a host slot, write a slot to a file, delete a file) runs on every rank. The
driver's disk stage runs its jobs on a few threads; each thread owns a lane, a gloo group of its
own, and every worker serves each lane on a thread of its own. A job on a lane:
  1. the driver broadcasts it: JOB_LEN int32 (kind, host slot, the 32-byte block hash);
  2. every rank runs it on its own host pool and files (kv_tiers.disk_stage.run_disk_job);
  3. an all-reduce (MIN) of the verdicts: a read is a hit only when every rank's shard verified,
     a write is stored only when every rank's was. Nothing else comes back.
A lane carries one job at a time, in the same order on every rank (a driver thread holds its lane
for the whole job), so no message needs a tag; lanes run beside each other and beside the step
broadcast, as the disk stage's threads run beside the steps. The scheduler pins every slot a job
touches until its verdict, and issues a write only once the copy into its slot is done on every
rank (a worker fences its copies into the step they ride with: sharded_tiers.py), so a worker's
job never races its own copies.

`agree_disk_blocks` is the start-up half: the blocks the driver's scan found, kept where every
rank's scan found its shard too (a block missing on one rank would only be a miss, later).
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from gpu_stage.kv_tiers.block_file import HASH_NBYTES
from gpu_stage.parallel.group import IDLE_TIMEOUT, rank_lost

log = logging.getLogger("ttft.parallel")

KINDS = ("read", "write", "delete")  # codes 1, 2, 3; 0 ends a lane
_STOP = 0
JOB_LEN = 2 + HASH_NBYTES // 4  # kind, slot, hash

Job = Callable[[str, bytes, int], bool]  # (kind, block hash, host slot) -> ok


class DiskLanes:
    def __init__(self, rank: int, groups: list[dist.ProcessGroup]) -> None:
        self.rank, self.groups = rank, groups
        self._free: queue.Queue[int] = queue.Queue(maxsize=len(groups))
        for lane in range(len(groups)):
            self._free.put(lane)
        self._threads: list[threading.Thread] = []

    @classmethod
    def create(cls, rank: int, num_lanes: int) -> DiskLanes:
        """Every rank calls this at the same point of its start-up (new groups are collective)."""
        return cls(rank, [dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT) for _ in range(num_lanes)])

    def __len__(self) -> int:
        return len(self.groups)

    # -- the driver -------------------------------------------------------------------------
    def run(self, kind: str, block_hash: bytes, slot: int, local: Callable[[], bool]) -> bool:
        """Run a job on every rank, `local()` being the driver's own part -> every rank's ok."""
        assert self.rank == 0
        lane = self._free.get()
        group = self.groups[lane]
        try:
            job = torch.zeros(JOB_LEN, dtype=torch.int32)
            job[0], job[1] = KINDS.index(kind) + 1, slot
            job[2:] = torch.from_numpy(np.frombuffer(block_hash, dtype=np.int32).copy())
            dist.broadcast(job, src=0, group=group)
            ok = _run_quietly(local)
            verdict = torch.tensor([int(ok)], dtype=torch.int32)
            dist.all_reduce(verdict, op=dist.ReduceOp.MIN, group=group)
            return bool(verdict.item())
        except RuntimeError as exc:
            raise rank_lost(exc, f"disk {kind}") from exc
        finally:
            self._free.put(lane)

    def stop(self) -> None:
        """End every worker's lane threads (after the disk stage's last job)."""
        for group in self.groups:
            dist.broadcast(torch.zeros(JOB_LEN, dtype=torch.int32), src=0, group=group)

    # -- a worker ---------------------------------------------------------------------------
    def serve(self, job: Job) -> DiskLanes:
        """Serve every lane on a thread of its own until the driver ends it."""
        assert self.rank != 0
        self._threads = [threading.Thread(target=self._serve_lane, args=(group, job), daemon=True,
                                          name=f"ttft-disk-lane-{i}") for i, group in enumerate(self.groups)]
        for thread in self._threads:
            thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        for thread in self._threads:
            thread.join(timeout=timeout_s)

    def _serve_lane(self, group: dist.ProcessGroup, job: Job) -> None:
        buf = torch.zeros(JOB_LEN, dtype=torch.int32)
        verdict = torch.zeros(1, dtype=torch.int32)
        try:
            while True:
                dist.broadcast(buf, src=0, group=group)
                kind = int(buf[0])
                if kind == _STOP:
                    return
                block_hash = buf[2:].numpy().tobytes()
                verdict[0] = int(_run_quietly(lambda: job(KINDS[kind - 1], block_hash, int(buf[1]))))
                dist.all_reduce(verdict, op=dist.ReduceOp.MIN, group=group)
        except RuntimeError as exc:  # the driver is gone: the worker's main loop ends it too
            log.warning("disk lane of rank %d ends: %s", self.rank, rank_lost(exc, "disk lane"))


def _run_quietly(job: Callable[[], bool]) -> bool:
    """A job's verdict; an exception (a bug: disk faults come back as False) is a miss, logged,
    so that every rank still reaches the lane's all-reduce."""
    try:
        return bool(job())
    except Exception:
        log.exception("disk job failed")
        return False


def agree_disk_blocks(group: dist.ProcessGroup, rank: int, hashes: list[bytes],
                      sizes: tuple[int, int]) -> list[bytes]:
    """Start-up, every rank: the driver's scanned `hashes` (oldest first) that every rank's scan
    found too. `sizes` (host slots, disk files) must be the same on every rank: the driver's are
    sent with the list, and a worker whose sizes differ refuses to start."""
    header = torch.tensor([len(hashes), *sizes], dtype=torch.int64)
    dist.broadcast(header, src=0, group=group)
    num, *driver_sizes = header.tolist()
    if tuple(driver_sizes) != tuple(sizes):
        raise ValueError(f"rank {rank} sized its KV tiers {sizes}, the driver {tuple(driver_sizes)}")
    if num == 0:
        return []
    raw = torch.zeros(num * HASH_NBYTES, dtype=torch.uint8)
    if rank == 0:
        raw.numpy()[:] = np.frombuffer(b"".join(hashes), dtype=np.uint8)
    dist.broadcast(raw, src=0, group=group)
    driver_hashes = [raw[i * HASH_NBYTES:(i + 1) * HASH_NBYTES].numpy().tobytes() for i in range(num)]
    own = set(hashes)
    keep = torch.tensor([h in own for h in driver_hashes], dtype=torch.int32)
    dist.all_reduce(keep, op=dist.ReduceOp.MIN, group=group)
    return [h for h, k in zip(driver_hashes, keep.tolist()) if k]
