"""`--skinny-gemm`: the model's products of 2-512 rows on the split-K kernel (kernels/skinny_gemm.py).

Off by default: whether it beats cuBLAS at each (rows, shape) on a GPU is lab/skinny_gemm_gpu.py's
to say. On, the Triton layer ops (triton_ops.TritonOps) hold a SkinnyProducts as `skinny` and ask it
first for every product of MIN_ROWS..MAX_ROWS rows (one row stays the gemv's or cuBLAS's, more than
512 cuBLAS's); it answers None for what it does not take, and the product runs as before. Only the
Triton ops have the hook, so the flag needs the Triton backend (`check_skinny_gemm`, before any
weight is loaded). The residual-add epilogue is not used by the model: add_rms_norm already fuses
that add into the next norm, which reads the sum anyway.

Eager steps pay a Triton launch's host cost per product; the CUDA graphs (decode, short prefills,
mixed steps) do not, and the graphs capture the kernel like any other.
"""
from __future__ import annotations

import torch

from gpu_stage.kernels.skinny_configs import MAX_ROWS, MIN_ROWS, SkinnyConfig, config_for

SKINNY_GEMM_MODES = ("off", "on")


def check_skinny_gemm(mode: str, attention_backend: str) -> None:
    """ValueError for a mode that cannot run with the backend (a resolved one: 'torch' or 'triton')."""
    if mode not in SKINNY_GEMM_MODES:
        raise ValueError(f"--skinny-gemm {mode!r}: must be one of {', '.join(SKINNY_GEMM_MODES)}")
    if mode == "on" and attention_backend != "triton":
        raise ValueError("--skinny-gemm on runs the products in a Triton kernel: it needs --attention-backend "
                         "triton (auto picks torch on CPU)")


class SkinnyProducts:
    """The products the skinny kernel takes, with their configurations looked up once per shape."""

    def __init__(self) -> None:
        from gpu_stage.kernels.skinny_gemm import skinny_linear  # needs triton: imported once it is on

        self._run = skinny_linear
        self._configs: dict[tuple[int, int, int, bool], SkinnyConfig] = {}

    def takes(self, x: torch.Tensor, weight: torch.Tensor) -> bool:
        return (MIN_ROWS <= x.shape[0] <= MAX_ROWS and x.dtype == weight.dtype and x.stride(1) == 1
                and weight.stride(1) == 1)

    def _config(self, rows: int, weight: torch.Tensor, silu_mul: bool) -> SkinnyConfig:
        key = (rows, weight.shape[0], weight.shape[1], silu_mul)
        cfg = self._configs.get(key)
        if cfg is None:
            cfg = self._configs[key] = config_for(*key)
        return cfg

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor | None:
        """x @ weight.T (+ bias), or None where the caller's product should run it."""
        if not self.takes(x, weight):
            return None
        return self._run(x, weight, bias, config=self._config(x.shape[0], weight, False))

    def gate_up_silu(self, x: torch.Tensor, gate_up_weight: torch.Tensor) -> torch.Tensor | None:
        """silu(x @ gate.T) * (x @ up.T) in one kernel, or None."""
        if not self.takes(x, gate_up_weight):
            return None
        return self._run(x, gate_up_weight, act="silu_mul", config=self._config(x.shape[0], gate_up_weight, True))


def attach_skinny_products(ops, mode: str) -> None:
    """Give the layer ops the skinny kernel when `mode` is 'on' (checked by check_skinny_gemm)."""
    if mode == "on":
        ops.skinny = SkinnyProducts()
