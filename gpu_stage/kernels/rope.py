"""Rotary embedding (neox / HF rotate_half layout) on q and k in place, one program per token.

cos/sin are the step's [T, head_dim] tables from RotaryEmbedding.cos_sin, in the model dtype as HF
has them; both halves of a row are equal, so only the first half is read. The reference computes
x * cos + rotate_half(x) * sin with a rounding after each product and after the sum; the kernel
rounds at the same places. q and k may be strided views of the fused qkv output.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import next_pow2


@triton.jit
def _rotate(base, cos, sin, mask, HALF: tl.constexpr):
    x1 = tl.load(base, mask=mask, other=0.0)
    x2 = tl.load(base + HALF, mask=mask, other=0.0)
    dtype = x1.dtype
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    # out1 = x1*cos + (-x2)*sin ; out2 = x2*cos + x1*sin, each product rounded as torch does
    a1 = (x1 * cos).to(dtype).to(tl.float32)
    b1 = (-x2 * sin).to(dtype).to(tl.float32)
    a2 = (x2 * cos).to(dtype).to(tl.float32)
    b2 = (x1 * sin).to(dtype).to(tl.float32)
    tl.store(base, (a1 + b1).to(dtype), mask=mask)
    tl.store(base + HALF, (a2 + b2).to(dtype), mask=mask)


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, stride_q_t, stride_q_h, stride_k_t, stride_k_h, stride_cs,
    num_heads, num_kv_heads,
    HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK_HALF)
    j_ok = j < HALF
    cos = tl.load(cos_ptr + t * stride_cs + j, mask=j_ok, other=0.0).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + t * stride_cs + j, mask=j_ok, other=0.0).to(tl.float32)[None, :]
    hq = tl.arange(0, BLOCK_HQ)[:, None]
    _rotate(q_ptr + t * stride_q_t + hq * stride_q_h + j[None, :], cos, sin,
            (hq < num_heads) & j_ok[None, :], HALF)
    hk = tl.arange(0, BLOCK_HK)[:, None]
    _rotate(k_ptr + t * stride_k_t + hk * stride_k_h + j[None, :], cos, sin,
            (hk < num_kv_heads) & j_ok[None, :], HALF)


def rope_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], k [T, Hkv, D] rotated in place; cos/sin [T, D] -> (q, k)."""
    num_tokens, num_heads, head_dim = q.shape
    if num_tokens == 0:
        return q, k
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and cos.stride(-1) == 1 and sin.stride() == cos.stride()
    half = head_dim // 2
    _rope_kernel[(num_tokens,)](
        q, k, cos, sin, q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos.stride(0),
        num_heads, k.shape[1],
        HALF=half, BLOCK_HALF=next_pow2(half), BLOCK_HQ=next_pow2(num_heads), BLOCK_HK=next_pow2(k.shape[1]),
        num_warps=4,
    )
    return q, k
