"""ShardPlan: which part of each Hugging Face tensor one rank of a tensor-parallel group holds.

Megatron-style, per decoder layer (N = world size, r = rank):
  q_proj (weight, bias)     rows of heads [r*H/N, (r+1)*H/N)            column-parallel
  k_proj, v_proj            rows of KV heads: [r*K/N, (r+1)*K/N) when N divides K; when K divides N
                            (N > K) one head, r // (N/K), shared by N/K ranks (replicated, as vLLM)
  gate_proj, up_proj        rows [r*I/N, (r+1)*I/N)                      column-parallel
  o_proj, down_proj weight  columns (input features) of the same ranges  row-parallel: all-reduce after
  o_proj bias               rank 0 only (the all-reduce would add it N times)
  embed_tokens, lm_head     rows of the vocabulary [r*Vs, (r+1)*Vs), Vs = ceil(V/N), the last shard
                            padded with zero rows (vocabulary-parallel)
  norms                     whole (replicated)
so the fused qkv of a rank is its own heads' q | k | v rows, and its gate_up its gate | up rows,
exactly the single-GPU layout of a smaller model: `local_config` is that model's shape (heads, KV
heads and MLP width divided; hidden size and vocabulary whole, the vocabulary shard being the
model's own business), and the same model code and KvCache run it.

A rank's query heads always read the KV head(s) it holds: with G = H/K queries per KV head, rank r's
first query head r*H/N lies in group r*K/N (split) or r // (N/K) (replicated).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from gpu_stage.model.config import ModelConfig

_COLUMN = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
_ROW = {"self_attn.o_proj.weight": "q", "mlp.down_proj.weight": "mlp"}
_VOCAB = ("model.embed_tokens.weight", "lm_head.weight")


def check_shardable(config: ModelConfig, world_size: int) -> None:
    """Raise ValueError (naming the head counts) when `world_size` ranks cannot shard `config`."""
    n, h, k, inter = world_size, config.num_heads, config.num_kv_heads, config.intermediate_size
    if n < 1:
        raise ValueError(f"--tensor-parallel-size must be at least 1, got {n}")
    problems = []
    if h % n:
        problems.append(f"{h} attention heads do not divide by {n}")
    if k % n and n % k:
        problems.append(f"{k} KV heads neither divide by {n} nor divide {n}")
    if inter % n:
        problems.append(f"the MLP width {inter} does not divide by {n}")
    if problems:
        raise ValueError(
            f"--tensor-parallel-size {n} cannot shard this model ({h} attention heads, {k} KV heads, "
            f"MLP width {inter}): {'; '.join(problems)}. It must divide the attention heads and the MLP "
            f"width, and either divide the KV heads or be a multiple of them")


@dataclass(frozen=True)
class Rule:
    """Keep [start, stop) of dimension `dim` (None: keep the whole tensor), padded with zeros to
    `length` along it."""

    dim: int | None = None
    start: int = 0
    stop: int = 0
    length: int = 0


WHOLE = Rule()


@dataclass(frozen=True)
class ShardPlan:
    config: ModelConfig  # the whole model's shape
    rank: int
    world_size: int

    def __post_init__(self) -> None:
        check_shardable(self.config, self.world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside a world of {self.world_size}")

    @property
    def num_local_heads(self) -> int:
        return self.config.num_heads // self.world_size

    @property
    def num_local_kv_heads(self) -> int:
        return max(1, self.config.num_kv_heads // self.world_size)

    @property
    def kv_head_start(self) -> int:
        """The first KV head this rank holds (in the whole model's numbering)."""
        k, n = self.config.num_kv_heads, self.world_size
        return self.rank * (k // n) if k % n == 0 else self.rank // (n // k)

    @property
    def vocab_shard_size(self) -> int:
        return -(-self.config.vocab_size // self.world_size)

    @property
    def vocab_start(self) -> int:
        return self.rank * self.vocab_shard_size

    @property
    def local_config(self) -> ModelConfig:
        """The shape of this rank's shard as a model of its own (see the module docstring)."""
        c = self.config
        return replace(c, num_heads=self.num_local_heads, num_kv_heads=self.num_local_kv_heads,
                       intermediate_size=c.intermediate_size // self.world_size)

    def rule(self, name: str) -> Rule | None:
        """What this rank keeps of the HF tensor `name`; None: nothing (o_proj's bias off rank 0)."""
        c, r, d = self.config, self.rank, self.config.head_dim
        if name in _VOCAB:
            start = self.vocab_start
            return Rule(0, min(start, c.vocab_size), min(start + self.vocab_shard_size, c.vocab_size),
                        self.vocab_shard_size)
        module, _, kind = name.rpartition(".")
        part = module.partition(".layers.")[2].partition(".")[2]  # "self_attn.q_proj"
        if part in _COLUMN:
            if part == "self_attn.q_proj":
                start, size = r * self.num_local_heads * d, self.num_local_heads * d
            elif part.startswith("self_attn."):
                start, size = self.kv_head_start * d, self.num_local_kv_heads * d
            else:
                size = c.intermediate_size // self.world_size
                start = r * size
            return Rule(0, start, start + size, size)
        row = _ROW.get(f"{part}.{kind}")
        if row is not None:
            size = (self.num_local_heads * d) if row == "q" else c.intermediate_size // self.world_size
            return Rule(1, r * size, (r + 1) * size, size)
        if part == "self_attn.o_proj" and kind == "bias":
            return WHOLE if r == 0 else None
        return WHOLE

    def take(self, name: str, full: Any) -> torch.Tensor | None:
        """This rank's part of `full` (a torch tensor, a numpy array or a safetensors slice: anything
        indexable by slices), as a new torch tensor on full's device; None when it keeps nothing.
        Only the kept part is read from a safetensors slice."""
        rule = self.rule(name)
        if rule is None:
            return None
        if rule.dim is None:
            tensor = _as_tensor(full if isinstance(full, (torch.Tensor, np.ndarray)) else full[...], copy=False)
        else:
            part = full[(slice(None),) * rule.dim + (slice(rule.start, rule.stop),)]
            # A view of a tensor or array would keep the whole one alive: copy it out.
            tensor = _as_tensor(part, copy=isinstance(full, (torch.Tensor, np.ndarray)))
        missing = rule.length - (rule.stop - rule.start) if rule.dim is not None else 0
        if missing:
            pad_shape = list(tensor.shape)
            pad_shape[rule.dim] = missing
            tensor = torch.cat([tensor, tensor.new_zeros(pad_shape)], dim=rule.dim)
        return tensor


def _as_tensor(part: Any, copy: bool) -> torch.Tensor:
    if isinstance(part, np.ndarray):
        return torch.from_numpy(np.array(part, copy=True, order="C") if copy or not part.flags.writeable else part)
    return part.clone(memory_format=torch.contiguous_format) if copy else part.contiguous()
