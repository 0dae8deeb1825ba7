"""TritonOps: the layer_ops interface backed by the Triton kernels of this package.

One instance per model: `gemv_plan` holds the one-row products that the gemv kernel runs (faster
than cuBLAS on this GPU, or within its margin), `skinny_plan` the few-row ones (decode batch
buckets) that the skinny kernel runs faster; kernels/gemv_tuning.py fills both at start-up (empty:
cuBLAS everywhere).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from gpu_stage.kernels import activation as _activation
from gpu_stage.kernels import rms_norm as _rms_norm
from gpu_stage.kernels import rope as _rope
from gpu_stage.kernels.gemv import gemv
from gpu_stage.kernels.skinny_gemm import skinny_gemm

GemvKey = tuple[int, int, str]  # (weight rows, weight columns, "none" | "silu_mul")
SkinnyKey = tuple[int, int, int, str]  # (rows of x, weight rows, weight columns, "none" | "silu_mul")


class TritonOps:
    name = "triton"
    rms_norm = staticmethod(_rms_norm.rms_norm)
    add_rms_norm = staticmethod(_rms_norm.add_rms_norm)
    rope = staticmethod(_rope.rope_)
    silu_and_mul = staticmethod(_activation.silu_and_mul)

    def __init__(self) -> None:
        self.gemv_plan: dict[GemvKey, dict] = {}  # key -> the kernel config that won
        self.skinny_plan: dict[SkinnyKey, dict] = {}

    def _planned(self, x: torch.Tensor, weight: torch.Tensor, act: str, bias: torch.Tensor | None):
        """The planned kernel's output, or None where cuBLAS runs the product."""
        if x.stride(1) != 1:
            return None
        rows = x.shape[0]
        if rows == 1:
            cfg = self.gemv_plan.get((*weight.shape, act))
            return None if cfg is None else gemv(x, weight, bias, act=act, config=cfg)
        cfg = self.skinny_plan.get((rows, *weight.shape, act))
        return None if cfg is None else skinny_gemm(x, weight, bias, act=act, config=cfg)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        out = self._planned(x, weight, "none", bias) if (self.gemv_plan or self.skinny_plan) else None
        return F.linear(x, weight, bias) if out is None else out

    def gate_up_silu(self, x: torch.Tensor, gate_up_weight: torch.Tensor) -> torch.Tensor:
        """silu(x @ gate.T) * (x @ up.T), gate_up_weight = [gate; up]."""
        out = self._planned(x, gate_up_weight, "silu_mul", None) if (self.gemv_plan or self.skinny_plan) else None
        return _activation.silu_and_mul(F.linear(x, gate_up_weight)) if out is None else out
