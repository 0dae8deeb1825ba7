"""TritonOps: the layer ops interface of torch_ops.TorchOps, backed by the Triton kernels (gpu_stage/kernels).

One instance per model: `gemv_plan` holds the one-row products that the gemv kernel runs faster
than cuBLAS on this GPU (tuning/gemv_tuning.py fills it at start-up; empty: cuBLAS everywhere), and
`lt_plan` the cuBLASLt algorithm chosen for the others where it beats F.linear's (tuning/gemm_tuning.py;
None: F.linear everywhere). `skinny` (--skinny-gemm on: model/skinny_products.py) takes the products of
2-512 rows before either; None: off.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from gpu_stage.kernels import activation as _activation
from gpu_stage.kernels import rms_norm as _rms_norm
from gpu_stage.kernels import rope_store as _rope
from gpu_stage.kernels.gemv import gemv

GemvKey = tuple[int, int, str]  # (weight rows, weight columns, "none" | "silu_mul")


class TritonOps:
    name = "triton"
    rms_norm = staticmethod(_rms_norm.rms_norm)
    add_rms_norm = staticmethod(_rms_norm.add_rms_norm)
    rope = staticmethod(_rope.rope_)
    silu_and_mul = staticmethod(_activation.silu_and_mul)

    def __init__(self) -> None:
        self.gemv_plan: dict[GemvKey, dict] = {}  # key -> the kernel config that won
        self.lt_plan = None  # gemm_tuning.LtPlan, filled at start-up on CUDA
        self.skinny = None  # skinny_products.SkinnyProducts with --skinny-gemm on

    def _product(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.skinny is not None and (out := self.skinny.linear(x, weight, bias)) is not None:
            return out
        if bias is None and self.lt_plan is not None and (out := self.lt_plan.linear(x, weight)) is not None:
            return out
        return F.linear(x, weight, bias)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if x.shape[0] == 1 and x.stride(1) == 1 and (cfg := self.gemv_plan.get((*weight.shape, "none"))):
            return gemv(x, weight, bias, config=cfg)
        return self._product(x, weight, bias)

    def gate_up_silu(self, x: torch.Tensor, gate_up_weight: torch.Tensor) -> torch.Tensor:
        """silu(x @ gate.T) * (x @ up.T), gate_up_weight = [gate; up]."""
        if x.shape[0] == 1 and x.stride(1) == 1 and (cfg := self.gemv_plan.get((*gate_up_weight.shape, "silu_mul"))):
            return gemv(x, gate_up_weight, act="silu_mul", config=cfg)
        if self.skinny is not None and (out := self.skinny.gate_up_silu(x, gate_up_weight)) is not None:
            return out
        return _activation.silu_and_mul(self._product(x, gate_up_weight))
