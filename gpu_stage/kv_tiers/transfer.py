"""KvTransfer: runs a batch's tier copies (device pool <-> host slots) before its forward.

On CUDA the copies run on their own stream: it first waits for the compute stream (the blocks
to offload were written by earlier steps; unless `wait_compute` is off: early loads into blocks
no queued step writes), then copies every offload (device -> host) and every
load (host -> device) in that order. If the ops are a `fence`, the compute stream waits for them
before the forward that may overwrite an offloaded block or read a loaded one; otherwise (early
offloads of cached blocks only) they run beside it. No host sync here: `run` returns an event the
runner waits for before it reports the step done, so the host learns the copies are done when the
step's result arrives. On CPU the same copies are plain memcpys.
Consecutive blocks going to consecutive slots are copied as one run.
NoTransfer is the runner's while the KV tiers are off: no host slots, so no copy to run.
"""
from __future__ import annotations

import torch

from gpu_stage.kv.cache import KvCache
from gpu_stage.kv_tiers.host_pool import HostKvPool
from stages.messages import KvTransferOps


def runs(pairs: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(first src, first dst, length) runs of pairs whose src and dst both step by one."""
    out: list[tuple[int, int, int]] = []
    for src, dst in pairs:
        if out and src == out[-1][0] + out[-1][2] and dst == out[-1][1] + out[-1][2]:
            first_src, first_dst, num = out[-1]
            out[-1] = (first_src, first_dst, num + 1)
        else:
            out.append((src, dst, 1))
    return out


class NoTransfer:
    """The KV tiers are off: the scheduler (NoTiers) queues no copy, so a batch carries none."""
    enabled = False

    def run(self, ops: KvTransferOps) -> None:
        assert not ops, "tier copies without a host tier"  # (a fence alone is nothing to wait for)
        return None


class KvTransfer:
    enabled = True

    def __init__(self, kv_cache: KvCache, host: HostKvPool) -> None:
        self.kv = kv_cache.kv.view(kv_cache.num_blocks, -1)  # [num_blocks, block_numel]
        assert self.kv.shape[1] == host.block_numel and kv_cache.dtype == host.dtype
        self.host = host
        self.cuda = self.kv.is_cuda
        self.stream = torch.cuda.Stream(self.kv.device) if self.cuda else None
        self.num_blocks_moved = 0

    def run(self, ops: KvTransferOps) -> torch.cuda.Event | None:
        """Queue the copies; the event (CUDA) passes when they are done."""
        if self.stream is None:
            self._copy(ops)
            return None
        compute = torch.cuda.current_stream(self.kv.device)
        if ops.wait_compute:
            self.stream.wait_stream(compute)
        with torch.cuda.stream(self.stream):
            self._copy(ops)
            done = torch.cuda.Event()
            done.record()
        if ops.fence:
            compute.wait_event(done)
        return done

    def _copy(self, ops: KvTransferOps) -> None:
        non_blocking = self.cuda
        for block, slot, num in runs(ops.offloads):
            dst = self.host.run(slot, num)
            if dst is None or block + num > self.kv.shape[0]:
                for i in range(num):
                    self.host.slot(slot + i).copy_(self.kv[block + i], non_blocking=non_blocking)
            else:
                dst.copy_(self.kv[block:block + num], non_blocking=non_blocking)
        for slot, block, num in runs(ops.loads):
            src = self.host.run(slot, num)
            if src is None:
                for i in range(num):
                    self.kv[block + i].copy_(self.host.slot(slot + i), non_blocking=non_blocking)
            else:
                self.kv[block:block + num].copy_(src, non_blocking=non_blocking)
        self.num_blocks_moved += len(ops.offloads) + len(ops.loads)
