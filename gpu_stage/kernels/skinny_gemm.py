"""Matrix products with few rows (decode steps of 2-128 sequences): y = x @ W.T (+ b), x [M, K].

At these batch sizes a decode step is still mostly a weight read: each program owns BLOCK_N rows of
W and streams them once over K, multiplying them on the tensor cores against all M rows of x
(padded to BLOCK_M, re-read from L2 by every program). No split over K, so no second kernel. Under
PDL (pdl.py) the first K tile of W is loaded before the wait for x, as in gemv.py.

`act="silu_mul"`: W is gate_up [2I, K], a program computes rows n and n + I together, and the
output is silu(gate) * up [M, I], as in gemv.py. Roundings follow the reference (F.linear, then
silu_and_mul in the model dtype): float32 accumulation, one rounding of each product.

Which (M, shape) pairs use it is measured per GPU at start-up (kernels/gemv_tuning.py).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import next_pow2
from gpu_stage.kernels.common import dot_flags, mma
from gpu_stage.kernels.pdl import pdl_args

MAX_ROWS = 128  # the most rows of x the kernel takes (BLOCK_M <= 128)
# Candidates timed per (rows, shape) at start-up on the GPU.
GPU_CONFIGS: tuple[dict, ...] = (
    {"BLOCK_N": 16, "BLOCK_K": 256, "num_warps": 4, "num_stages": 4},
    {"BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
    {"BLOCK_N": 32, "BLOCK_K": 256, "num_warps": 8, "num_stages": 3},
)
INTERPRETER_CONFIG = {"BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 4, "num_stages": 1}


@triton.jit
def _skinny_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_x, stride_w, stride_o, half_rows,
    HAS_BIAS: tl.constexpr, SILU_MUL: tl.constexpr, EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_PDL: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
):
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # output columns (rows of W)
    n_ok = rn < N
    rm = tl.arange(0, BLOCK_M)
    m_ok = rm < M
    rk = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_w + rk[None, :]
    w_up = w_rows + half_rows * stride_w  # SILU_MUL: rows n (gate) and n + I (up) of gate_up
    x_rows = x_ptr + rm.to(tl.int64)[:, None] * stride_x + rk[None, :]
    if EVEN_K:
        k_ok = rk < BLOCK_K
        w_mask = n_ok[:, None]
    else:
        k_ok = rk < K
        w_mask = n_ok[:, None] & k_ok[None, :]
    # The first K tile of W before x: weights never change (see pdl.py).
    w = tl.load(w_rows, mask=w_mask, other=0.0, eviction_policy="evict_first")
    if SILU_MUL:
        w2 = tl.load(w_up, mask=w_mask, other=0.0, eviction_policy="evict_first")
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    x = tl.load(x_rows, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
    acc = mma(x, tl.trans(w), IEEE, UPCAST)  # [BLOCK_M, BLOCK_N] float32
    if SILU_MUL:
        acc_up = mma(x, tl.trans(w2), IEEE, UPCAST)
    for k in range(BLOCK_K, K, BLOCK_K):
        if EVEN_K:
            x_mask = m_ok[:, None]
            w_mask = n_ok[:, None]
        else:
            k_ok = k + rk < K
            x_mask = m_ok[:, None] & k_ok[None, :]
            w_mask = n_ok[:, None] & k_ok[None, :]
        x = tl.load(x_rows + k, mask=x_mask, other=0.0)
        w = tl.load(w_rows + k, mask=w_mask, other=0.0, eviction_policy="evict_first")
        acc += mma(x, tl.trans(w), IEEE, UPCAST)
        if SILU_MUL:
            w2 = tl.load(w_up + k, mask=w_mask, other=0.0, eviction_policy="evict_first")
            acc_up += mma(x, tl.trans(w2), IEEE, UPCAST)
    dtype = out_ptr.dtype.element_ty
    y = acc
    if HAS_BIAS:
        y += tl.load(b_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    if SILU_MUL:
        g = y.to(dtype).to(tl.float32)
        up = acc_up.to(dtype).to(tl.float32)
        silu = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
        y = silu * up
    out = out_ptr + rm.to(tl.int64)[:, None] * stride_o + rn[None, :]
    tl.store(out, y.to(dtype), mask=m_ok[:, None] & n_ok[None, :])


def skinny_gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                act: str = "none", config: dict | None = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS), weight [N, K] (+ bias [N]) -> [M, N];
    act="silu_mul": -> silu(gate) * up [M, N/2]."""
    rows, k = x.shape
    assert 1 <= rows <= MAX_ROWS and k == weight.shape[1], (x.shape, weight.shape)
    assert x.stride(1) == 1 and weight.stride(1) == 1 and act in ("none", "silu_mul")
    silu_mul = act == "silu_mul"
    assert not (silu_mul and bias is not None)
    n = weight.shape[0] // 2 if silu_mul else weight.shape[0]
    cfg = dict(config or INTERPRETER_CONFIG)
    block_n, block_k = cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K")
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    _skinny_kernel[(triton.cdiv(n, block_n),)](
        x, weight, x if bias is None else bias, out, rows, n, k, x.stride(0), weight.stride(0), out.stride(0), n,
        HAS_BIAS=bias is not None, SILU_MUL=silu_mul, EVEN_K=k % block_k == 0,
        BLOCK_M=max(16, next_pow2(rows)), BLOCK_N=block_n, BLOCK_K=block_k,
        **dot_flags(x.dtype), **cfg, **pdl_args(x),
    )
    return out
