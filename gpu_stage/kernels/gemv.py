"""One-row matrix products (decode at batch 1): y = x @ W.T (+ b), streaming W once at full width.

At batch 1 a decode step is a weight read: every layer's four products are matrix-vector products
bound by memory bandwidth. cuBLAS runs them at 3.1-4.2 TB/s on an H200 and splits the small ones
over K (a second reduction kernel per product). This kernel gives each program BLOCK_N whole rows
of W (no split over K, no second kernel) and keeps a [BLOCK_N, BLOCK_K] float32 accumulator that is
summed once at the end; x is re-read from L2 by every program.

`act="silu_mul"` fuses the MLP's activation: W is gate_up [2I, K] and a program computes rows n and
n + I together, so the output is silu(gate) * up [1, I] and the activation kernel disappears.
Roundings follow the reference (F.linear then silu_and_mul in the model dtype): each dot product
accumulates in float32 and is rounded to the dtype once; silu and the product round as in
kernels/activation.py.

Which shapes use it is measured per GPU at start-up (tuning/gemv_tuning.py): cuBLAS keeps every
shape where it is as fast.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels.pdl import pdl_args

# Candidates timed per shape at start-up on the GPU (BLOCK_N, BLOCK_K, num_warps, num_stages).
GPU_CONFIGS: tuple[dict, ...] = (
    {"BLOCK_N": 4, "BLOCK_K": 1024, "num_warps": 4, "num_stages": 4},
    {"BLOCK_N": 8, "BLOCK_K": 512, "num_warps": 4, "num_stages": 4},
    {"BLOCK_N": 16, "BLOCK_K": 256, "num_warps": 4, "num_stages": 4},
    {"BLOCK_N": 8, "BLOCK_K": 1024, "num_warps": 8, "num_stages": 3},
    {"BLOCK_N": 2, "BLOCK_K": 2048, "num_warps": 8, "num_stages": 3},
    {"BLOCK_N": 4, "BLOCK_K": 512, "num_warps": 4, "num_stages": 6},
    {"BLOCK_N": 2, "BLOCK_K": 1024, "num_warps": 4, "num_stages": 4},
    {"BLOCK_N": 1, "BLOCK_K": 2048, "num_warps": 4, "num_stages": 4},
    {"BLOCK_N": 4, "BLOCK_K": 2048, "num_warps": 8, "num_stages": 3},
    {"BLOCK_N": 2, "BLOCK_K": 512, "num_warps": 2, "num_stages": 6},
)
INTERPRETER_CONFIG = {"BLOCK_N": 4, "BLOCK_K": 16, "num_warps": 4, "num_stages": 1}


@triton.jit
def _gemv_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, N, K, stride_w, half_rows,
    HAS_BIAS: tl.constexpr, SILU_MUL: tl.constexpr, EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr,
):
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # output rows
    n_ok = rn < N
    rk = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_w + rk[None, :]
    w_up = w_rows + half_rows * stride_w  # SILU_MUL: rows n (gate) and n + I (up) of gate_up
    # The first K tile of W is loaded before x: weights never change, so under PDL (pdl.py) these
    # loads overlap the previous kernel's tail; x, its output, is read only after the wait.
    if EVEN_K:
        k_ok = rk < BLOCK_K
        mask = n_ok[:, None]
    else:
        k_ok = rk < K
        mask = n_ok[:, None] & k_ok[None, :]
    w = tl.load(w_rows, mask=mask, other=0.0, eviction_policy="evict_first")
    if SILU_MUL:
        w2 = tl.load(w_up, mask=mask, other=0.0, eviction_policy="evict_first")
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    x = tl.load(x_ptr + rk, mask=k_ok, other=0.0).to(tl.float32)
    acc = w.to(tl.float32) * x[None, :]
    if SILU_MUL:
        acc_up = w2.to(tl.float32) * x[None, :]
    for k in range(BLOCK_K, K, BLOCK_K):
        if EVEN_K:
            x = tl.load(x_ptr + k + rk).to(tl.float32)
            mask = n_ok[:, None]
        else:
            k_ok = k + rk < K
            x = tl.load(x_ptr + k + rk, mask=k_ok, other=0.0).to(tl.float32)
            mask = n_ok[:, None] & k_ok[None, :]
        w = tl.load(w_rows + k, mask=mask, other=0.0, eviction_policy="evict_first")
        acc += w.to(tl.float32) * x[None, :]
        if SILU_MUL:
            w2 = tl.load(w_up + k, mask=mask, other=0.0, eviction_policy="evict_first")
            acc_up += w2.to(tl.float32) * x[None, :]
    dtype = out_ptr.dtype.element_ty
    y = tl.sum(acc, 1)
    if HAS_BIAS:
        y += tl.load(b_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)
    if SILU_MUL:
        g = y.to(dtype).to(tl.float32)
        up = tl.sum(acc_up, 1).to(dtype).to(tl.float32)
        silu = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
        y = silu * up
    tl.store(out_ptr + rn, y.to(dtype), mask=n_ok)


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
         act: str = "none", config: dict | None = None) -> torch.Tensor:
    """x [1, K], weight [N, K] (+ bias [N]) -> [1, N]; act="silu_mul": -> silu(gate) * up [1, N/2]."""
    assert x.shape[0] == 1 and x.shape[1] == weight.shape[1], (x.shape, weight.shape)
    assert x.stride(1) == 1 and weight.stride(1) == 1 and act in ("none", "silu_mul")
    silu_mul = act == "silu_mul"
    assert not (silu_mul and bias is not None)
    rows, k = weight.shape
    n = rows // 2 if silu_mul else rows
    cfg = dict(config or INTERPRETER_CONFIG)
    block_n, block_k = cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K")
    out = torch.empty((1, n), dtype=x.dtype, device=x.device)
    _gemv_kernel[(triton.cdiv(n, block_n),)](
        x, weight, x if bias is None else bias, out, n, k, weight.stride(0), n,
        HAS_BIAS=bias is not None, SILU_MUL=silu_mul, EVEN_K=k % block_k == 0,
        BLOCK_N=block_n, BLOCK_K=block_k, **cfg, **pdl_args(x),
    )
    return out
