"""Rotary embedding (neox / HF rotate_half layout) on q and k in place, one program per token.

cos/sin are the step's [T, head_dim] tables from RotaryEmbedding.cos_sin, in the model dtype as HF
has them; both halves of a row are equal, so only the first half is read. The reference computes
x * cos + rotate_half(x) * sin with a rounding after each product and after the sum; the kernel
rounds at the same places. q and k may be strided views of the fused qkv output.

`rope_store_kv_` also writes the rotated k and v to their paged-cache slots (kv_store.py's layout
and slot rules) in the same program: one kernel per layer instead of two.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import next_pow2
from gpu_stage.kernels.pdl import pdl_args


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
    out1 = (a1 + b1).to(dtype)
    out2 = (a2 + b2).to(dtype)
    tl.store(base, out1, mask=mask)
    tl.store(base + HALF, out2, mask=mask)
    return out1, out2


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, stride_q_t, stride_q_h, stride_k_t, stride_k_h, stride_cs,
    num_heads, num_kv_heads,
    v_ptr, cache_ptr, slot_ptr, stride_v_t, stride_v_h, stride_c_block, stride_c_kv, stride_c_tok,
    stride_c_head, block_size,
    HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
    STORE: tl.constexpr, USE_PDL: tl.constexpr,
):
    if USE_PDL:  # see pdl.py
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    t = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK_HALF)
    j_ok = j < HALF
    cos = tl.load(cos_ptr + t * stride_cs + j, mask=j_ok, other=0.0).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + t * stride_cs + j, mask=j_ok, other=0.0).to(tl.float32)[None, :]
    hq = tl.arange(0, BLOCK_HQ)[:, None]
    _rotate(q_ptr + t * stride_q_t + hq * stride_q_h + j[None, :], cos, sin,
            (hq < num_heads) & j_ok[None, :], HALF)
    hk = tl.arange(0, BLOCK_HK)[:, None]
    k_mask = (hk < num_kv_heads) & j_ok[None, :]
    k1, k2 = _rotate(k_ptr + t * stride_k_t + hk * stride_k_h + j[None, :], cos, sin, k_mask, HALF)
    if STORE:  # a negative slot skips the token (padding rows)
        slot = tl.load(slot_ptr + t).to(tl.int64)
        mask = k_mask & ((hk * 0 + slot) >= 0)
        slot = tl.maximum(slot, 0)
        dst = (cache_ptr + (slot // block_size) * stride_c_block + (slot % block_size) * stride_c_tok
               + hk * stride_c_head + j[None, :])
        elem = cache_ptr.dtype.element_ty
        tl.store(dst, k1.to(elem), mask=mask)
        tl.store(dst + HALF, k2.to(elem), mask=mask)
        v_row = v_ptr + t * stride_v_t + hk * stride_v_h + j[None, :]
        tl.store(dst + stride_c_kv, tl.load(v_row, mask=mask).to(elem), mask=mask)
        tl.store(dst + stride_c_kv + HALF, tl.load(v_row + HALF, mask=mask).to(elem), mask=mask)


def rope_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], k [T, Hkv, D] rotated in place; cos/sin [T, D] -> (q, k)."""
    _launch(q, k, cos, sin, None, None, None)
    return q, k


def rope_store_kv_(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   kv_layer: torch.Tensor, slot_mapping: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rope_(q, k, cos, sin), then the rotated k and v [T, Hkv, D] to kv_layer at slot_mapping [T]."""
    assert kv_layer.stride(-1) == 1 and v.stride(-1) == 1 and slot_mapping.shape[0] >= q.shape[0]
    _launch(q, k, cos, sin, v, kv_layer, slot_mapping)
    return q, k


def _launch(q, k, cos, sin, v, kv_layer, slot_mapping) -> None:
    num_tokens, num_heads, head_dim = q.shape
    if num_tokens == 0:
        return
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and cos.stride(-1) == 1 and sin.stride() == cos.stride()
    half = head_dim // 2
    store = kv_layer is not None
    if store:
        cache_args = (v, kv_layer, slot_mapping, v.stride(0), v.stride(1), kv_layer.stride(0), kv_layer.stride(1),
                      kv_layer.stride(2), kv_layer.stride(3), kv_layer.shape[2])
    else:  # unused pointers (STORE=False): any tensor will do
        cache_args = (k, k, cos, 0, 0, 0, 0, 0, 0, 1)
    _rope_kernel[(num_tokens,)](
        q, k, cos, sin, q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos.stride(0),
        num_heads, k.shape[1], *cache_args,
        HALF=half, BLOCK_HALF=next_pow2(half), BLOCK_HQ=next_pow2(num_heads), BLOCK_HK=next_pow2(k.shape[1]),
        STORE=store, num_warps=4, **pdl_args(q),
    )
