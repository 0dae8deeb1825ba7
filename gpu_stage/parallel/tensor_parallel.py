"""TensorParallel: the collectives a sharded model calls, and what else one rank of the group owns.

Every collective runs on the current stream with torch.distributed: NCCL on GPUs, gloo on CPU.
NCCL's all_reduce and all_gather enqueue a kernel on the calling stream without any host sync,
so a CUDA graph captures them with the step's other kernels and a replay runs them again (every
rank must capture and replay the same graphs in the same order, which the lockstep start-up and
the step broadcast guarantee). gloo runs them synchronously on the host.

    all_reduce(x)        after o_proj and down_proj (row-parallel): the partial sums of every rank
    embed(ids, weight)   vocabulary-parallel lookup: rows outside this rank's range read zeros,
                         then an all-reduce (one non-zero term per row, so the sum is exact)
    gather_vocab(x)      the lm_head's [S, V/N] logits of every rank -> [S, V] on every rank (the
                         driver samples them; the workers drop theirs)

Why the embedding is vocabulary-parallel rather than replicated: a tied model (SmolLM2, Llama 3.2
1B) shares it with the lm_head shard, so a replicated one would hold the whole vocabulary matrix
on every rank again; its all-reduce moves [T, hidden] per step, what one layer's o_proj does.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gpu_stage.model.config import ModelConfig
from gpu_stage.parallel.group import ParallelGroup, rank_lost
from gpu_stage.parallel.shard_plan import ShardPlan
from gpu_stage.parallel.step_broadcast import StepBroadcast

# torch 2.13 names it all_gather_single; older releases all_gather_into_tensor (same semantics).
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class TensorParallel:
    def __init__(self, plan: ShardPlan, group: dist.ProcessGroup | None = None,
                 host_group: dist.ProcessGroup | None = None, steps: StepBroadcast | None = None) -> None:
        self.plan = plan
        self.rank, self.world_size = plan.rank, plan.world_size
        self.group = group  # the device's collectives (None: the default group)
        self.host_group = host_group  # gloo on CPU tensors: start-up agreement (None: the default)
        self.steps = steps  # the step broadcast (the driver sends, the workers receive)
        self.disk_lanes = None  # the disk tier's jobs on every rank (sharded_tiers.connect_tiers)
        self._vocab_start = plan.vocab_start
        self._vocab_stop = plan.vocab_start + plan.vocab_shard_size

    @classmethod
    def over(cls, group: ParallelGroup, config: ModelConfig) -> TensorParallel:
        """This rank's TensorParallel over `group` for the whole model's `config`."""
        steps = StepBroadcast(group.rank, group.host_group, group.device_group, group.device)
        return cls(ShardPlan(config, group.rank, group.world_size), group.device_group, group.host_group, steps)

    @property
    def local_config(self) -> ModelConfig:
        return self.plan.local_config

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum over the ranks, in place -> x."""
        try:
            dist.all_reduce(x, group=self.group)
        except RuntimeError as exc:
            raise rank_lost(exc, "all-reduce") from exc
        return x

    def embed(self, ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """ids [T] (whole-vocabulary ids), weight [V/N, hidden] this rank's rows -> [T, hidden]."""
        inside = (ids >= self._vocab_start) & (ids < self._vocab_stop)  # [T]
        local = (ids - self._vocab_start) * inside  # outside rows read row 0, then zeroed
        h = F.embedding(local, weight) * inside.unsqueeze(1).to(weight.dtype)
        return self.all_reduce(h)

    def gather_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [S, V/N] (this rank's vocabulary rows) -> [S, V], every rank's in vocabulary order."""
        num_rows, shard = logits.shape
        out = torch.empty((self.world_size * num_rows, shard), dtype=logits.dtype, device=logits.device)
        try:
            _all_gather(out, logits.contiguous(), group=self.group)
        except RuntimeError as exc:
            raise rank_lost(exc, "logits gather") from exc
        full = out.view(self.world_size, num_rows, shard).permute(1, 0, 2).reshape(num_rows, -1)
        vocab = self.plan.config.vocab_size
        return full if full.shape[1] == vocab else full[:, :vocab].contiguous()

    def agree_num_blocks(self, num_blocks: int) -> int:
        """The KV pool's size on every rank: the smallest any rank can hold (block ids are shared)."""
        t = torch.tensor([num_blocks], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.host_group)
        return int(t.item())
