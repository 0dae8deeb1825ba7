"""TritonOps: the layer_ops interface backed by the Triton kernels of this package.

One instance per model: `gemv_plan` holds the one-row products that the gemv kernel runs faster
than cuBLAS on this GPU (kernels/gemv_tuning.py fills it at start-up; empty: cuBLAS everywhere),
`lt_products` the (rows, product) pairs that cuBLASLt runs faster than cuBLAS
(kernels/blas_tuning.py; empty: cuBLAS).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F

from gpu_stage.kernels import activation as _activation
from gpu_stage.kernels import rms_norm as _rms_norm
from gpu_stage.kernels import rope as _rope
from gpu_stage.kernels.gemv import gemv

GemvKey = tuple[int, int, str]  # (weight rows, weight columns, "none" | "silu_mul")
LtKey = tuple[int, int, int]  # (rows of x, weight rows, weight columns)


@contextmanager
def cublaslt() -> Iterator[None]:
    """torch's products go to cuBLASLt inside (a process-wide setting: the launch thread is the
    only one that runs products while serving)."""
    before = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(before)


class TritonOps:
    name = "triton"
    rms_norm = staticmethod(_rms_norm.rms_norm)
    add_rms_norm = staticmethod(_rms_norm.add_rms_norm)
    rope = staticmethod(_rope.rope_)
    silu_and_mul = staticmethod(_activation.silu_and_mul)

    def __init__(self) -> None:
        self.gemv_plan: dict[GemvKey, dict] = {}  # key -> the kernel config that won
        self.lt_products: set[LtKey] = set()

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if x.shape[0] == 1 and x.stride(1) == 1 and (cfg := self.gemv_plan.get((*weight.shape, "none"))):
            return gemv(x, weight, bias, config=cfg)
        return self._blas_linear(x, weight, bias)

    def _blas_linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.lt_products and (x.shape[0], *weight.shape) in self.lt_products:
            with cublaslt():
                return F.linear(x, weight, bias)
        return F.linear(x, weight, bias)

    def gate_up_silu(self, x: torch.Tensor, gate_up_weight: torch.Tensor) -> torch.Tensor:
        """silu(x @ gate.T) * (x @ up.T), gate_up_weight = [gate; up]."""
        if x.shape[0] == 1 and x.stride(1) == 1 and (cfg := self.gemv_plan.get((*gate_up_weight.shape, "silu_mul"))):
            return gemv(x, gate_up_weight, act="silu_mul", config=cfg)
        return _activation.silu_and_mul(self._blas_linear(x, gate_up_weight))
