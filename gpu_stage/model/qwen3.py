"""Qwen3 (dense): the Llama layer with an RMSNorm over each head of q and of k (one weight of
head_dim values each, shared by the heads), applied to the q/k/v product before RoPE, as
transformers' Qwen3Attention does. No q/k/v bias unless config.json sets attention_bias (then
o_proj has one too, as in Llama); `head_dim` is the config's, which need not be hidden / heads.

The norms go through the layer ops, so the CPU reference and the GPU path norm in the same place:
before `attention.rope_store_kv`. On the Triton backend that is one fused kernel (RoPE and the
KV store) which has no norm in it, so the norms run just before it, as two kernels of their own:
q and k arrive as strided views of the fused product and leave as contiguous [T, heads, D]
tensors, which the fused kernel takes as well. Under tensor parallelism each rank holds the whole
norm weights (shard_plan.py keeps tensors it does not split whole).
"""
from __future__ import annotations

from types import ModuleType

import torch

from gpu_stage.model.config import ModelConfig
from gpu_stage.model.interface import WeightShapes
from gpu_stage.model.llama import LlamaDecoderLayer, LlamaForCausalLM, RMSNorm
from gpu_stage.model.torch_ops import TorchOps


class Qwen3DecoderLayer(LlamaDecoderLayer):
    def __init__(self, config: ModelConfig, attention: ModuleType, device, dtype, ops=TorchOps,
                 window: int | None = None, parallel=None) -> None:
        super().__init__(config, attention, device, dtype, ops, window, parallel)
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps, device, dtype)
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps, device, dtype)

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = super().project_qkv(x)
        return self._norm_heads(q, self.q_norm), self._norm_heads(k, self.k_norm), v

    def _norm_heads(self, x: torch.Tensor, norm: RMSNorm) -> torch.Tensor:
        """x [T, heads, D] -> each head's D values RMS-normed, [T, heads, D]."""
        num_tokens, num_heads, head_dim = x.shape
        return self.ops.rms_norm(x.reshape(num_tokens * num_heads, head_dim), norm.weight, norm.eps).view(x.shape)

    def named_weights(self) -> dict[str, torch.Tensor | None]:
        return {**super().named_weights(), "self_attn.q_norm.weight": self.q_norm.weight,
                "self_attn.k_norm.weight": self.k_norm.weight}


class Qwen3ForCausalLM(LlamaForCausalLM):
    layer_class = Qwen3DecoderLayer

    @classmethod
    def _layer_weight_shapes(cls, config: ModelConfig, prefix: str) -> WeightShapes:
        norms = [(prefix + "self_attn.q_norm.weight", (config.head_dim,)),
                 (prefix + "self_attn.k_norm.weight", (config.head_dim,))]
        return super()._layer_weight_shapes(config, prefix) + norms
