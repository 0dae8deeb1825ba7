"""CausalLM: what the rest of the GPU stage uses of a model, whatever its architecture.

The runner builder, the CUDA graphs, the warm-ups, the memory profile, the start-up tuners, the
tensor-parallel workers and the draft model hold a model through this interface only; which class
runs a checkpoint is the registry's business (registry.py). A model is an nn.Module that runs a
flattened step over the paged KV cache and loads Hugging Face-named, unfused weights.

`layers` is part of the interface because the start-up tuners and the CPU layout (tuning/,
cpu_ops.py) time and lay out each decoder layer's four matrix products, which every architecture
here fuses the same way (q|k|v, o, gate|up, down).
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Protocol, Sequence, runtime_checkable

import torch

from gpu_stage.attention.metadata import AttentionMetadata
from gpu_stage.kv.cache import KvCache
from gpu_stage.model.config import ModelConfig

WeightShapes = list[tuple[str, tuple[int, ...]]]  # (Hugging Face name, shape), in load order


class DecoderLayerProducts(Protocol):
    """A decoder layer's matrix products, fused as the model runs them ([out, in] each)."""

    qkv_weight: torch.Tensor  # [q_size + 2 * kv_size, hidden]: rows q | k | v
    qkv_bias: torch.Tensor | None
    o_weight: torch.Tensor  # [hidden, q_size]
    o_bias: torch.Tensor | None
    gate_up_weight: torch.Tensor  # [2 * intermediate, hidden]: rows gate | up
    down_weight: torch.Tensor  # [hidden, intermediate]


@runtime_checkable
class CausalLM(Protocol):
    config: ModelConfig  # this rank's shape (its shard's under tensor parallelism)
    ops: Any  # the layer ops: torch_ops.TorchOps, a triton_ops.TritonOps or a cpu_ops.CpuOps
    layers: Sequence[DecoderLayerProducts]

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_cache: KvCache,
                 meta: AttentionMetadata, logits_indices: torch.Tensor) -> torch.Tensor:
        """A step's tokens [T] at their positions [T] -> logits [S, vocab] float32 of the rows
        `logits_indices` [S], every token's K/V stored in `kv_cache`."""

    def hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_cache: KvCache,
                      meta: AttentionMetadata, logits_indices: torch.Tensor) -> torch.Tensor:
        """The same step -> what the lm_head reads at `logits_indices` [S, hidden]."""

    def compute_logits(self, h: torch.Tensor) -> torch.Tensor:
        """The lm_head: [S, hidden] -> logits [S, vocab] float32."""

    @property
    def head_weight(self) -> torch.Tensor:
        """The lm_head's weight [vocab (a shard's), hidden] (the embedding's when tied)."""

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face-named, unfused weights in; ValueError on an unknown or missing one."""

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        """nn.Module's (the KV tiers count them to price a recompute)."""


class CausalLMClass(Protocol):
    """A model class as the registry hands it out: built from a shape, it lists its checkpoint."""

    def __call__(self, config: ModelConfig, device: torch.device | str, dtype: torch.dtype, attention: Any,
                 ops: Any, parallel: Any) -> CausalLM:
        """`attention`: a backend (gpu_stage.attention); `ops`: layer ops; `parallel`: a
        parallel.TensorParallel (then `config` is its local_config), or None."""

    def weight_shapes(self, config: ModelConfig) -> WeightShapes:
        """Every tensor a checkpoint of shape `config` holds, in Hugging Face naming and shape."""
