"""TorchOps: the elementwise pieces of a decoder layer and its matrix products in torch (the CPU
path and the reference); triton_ops.TritonOps is the same interface on the Triton kernels
(gpu_stage/kernels, fused and in place where that saves passes). `get_layer_ops` picks one.

    rms_norm(x, weight, eps)                 -> normed
    add_rms_norm(x, residual, weight, eps)   -> (rms_norm(residual + x), residual + x)
    rope(q, k, cos, sin)                     -> (q, k) rotated (the Triton ops rotate in place)
    silu_and_mul(gate_up)                    -> silu(gate) * up
    linear(x, weight, bias)                  -> x @ weight.T + bias
    gate_up_silu(x, gate_up_weight)          -> silu_and_mul(linear(x, gate_up_weight))
    rope_store_rows(q, k, v, cos, sin, rows, k_rows, v_delta) -> whether it rotated and stored them

Callers use only the returned tensors: whether an op reused its input's memory is its own business.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from gpu_stage.model.rotary import apply_rope


class TorchOps:
    name = "torch"
    fuses_rope_store = False  # rope_store_rows may do the work (True only where a kernel is built)

    @staticmethod
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x [N, hidden]; the variance in float32 as in HF."""
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        return weight * x32.to(x.dtype)

    @staticmethod
    def add_rms_norm(
        x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = residual + x
        return TorchOps.rms_norm(h, weight, eps), h

    @staticmethod
    def rope(
        q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    @staticmethod
    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    linear = staticmethod(F.linear)

    @staticmethod
    def gate_up_silu(x: torch.Tensor, gate_up_weight: torch.Tensor) -> torch.Tensor:
        return TorchOps.silu_and_mul(F.linear(x, gate_up_weight))

    @staticmethod
    def rope_store_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                        rows: torch.Tensor, k_rows: torch.Tensor, v_delta: int) -> bool:
        """RoPE on q and k in place and k, v stored at pool rows k_rows (+ v_delta) in one pass, where
        the ops have such a kernel (model/cpu_ops.py's); False: nothing done, the caller rotates
        and stores."""
        return False
