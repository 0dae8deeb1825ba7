"""Rotary embedding (neox / HF rotate_half layout) on q and k in place, one program per token.

cos/sin are the step's [T, head_dim] tables from RotaryEmbedding.cos_sin, in the model dtype as HF
has them; both halves of a row are equal, so only the first half is read. The reference computes
x * cos + rotate_half(x) * sin with a rounding after each product and after the sum; the kernel
rounds at the same places. q and k may be strided views of the fused qkv output.

`rope_store_kv_` also writes the rotated k and v to their paged-cache slots (kv_store.py's layout
and slot rules) in the same program: one kernel per layer instead of two; into an 8-bit pool
quantized as kv_store.py does (the rotated k as rounded to the model dtype, then quantized),
with its WRITE_BACK of the dequantized values over k and v.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import next_pow2
from gpu_stage.kernels.kv_quant import kv_inverse, kv_quantize, kv_scale, quant_constexprs
from gpu_stage.kernels.kv_store import cache_args, value_strides, write_back
from gpu_stage.kernels.pdl import pdl_args
from gpu_stage.kv.layout import QuantKvLayer


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
    scale_ptr, stride_s_block, stride_s_kv, stride_s_tok,
    stride_vc_tok, stride_vc_head, stride_vc_d,
    HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
    STORE: tl.constexpr, USE_PDL: tl.constexpr,
    QUANT: tl.constexpr, FMT: tl.constexpr, QMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
    WRITE_BACK: tl.constexpr = False,
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
    k_row = k_ptr + t * stride_k_t + hk * stride_k_h + j[None, :]
    k1, k2 = _rotate(k_row, cos, sin, k_mask, HALF)
    if STORE:  # a negative slot skips the token (padding rows)
        raw_slot = tl.load(slot_ptr + t).to(tl.int32)  # a slot fits 32 bits (KvCache's MAX_SLOTS)
        mask = k_mask & ((hk * 0 + raw_slot) >= 0)
        slot = tl.maximum(raw_slot, 0)
        block = (slot // block_size).to(tl.int64)  # 32-bit division: a 64-bit one is a long routine
        offset = slot % block_size
        dst = cache_ptr + block * stride_c_block + offset * stride_c_tok + hk * stride_c_head + j[None, :]
        v_dst = (cache_ptr + stride_c_kv + block * stride_c_block + offset * stride_vc_tok
                 + hk * stride_vc_head + j[None, :] * stride_vc_d)  # V by its own strides (kv_store.py)
        elem = cache_ptr.dtype.element_ty
        v_row = v_ptr + t * stride_v_t + hk * stride_v_h + j[None, :]
        if QUANT:
            _store_quantized(k1, k2, tl.load(v_row, mask=mask, other=0.0), tl.load(v_row + HALF, mask=mask, other=0.0),
                             dst, v_dst, HALF * stride_vc_d, mask, scale_ptr + block * stride_s_block
                             + offset * stride_s_tok, stride_s_kv, raw_slot, num_kv_heads, k_row, v_row,
                             HALF, BLOCK_HK, QMAX, FMT, MBITS, EMIN, WRITE_BACK)
        else:
            tl.store(dst, k1.to(elem), mask=mask)
            tl.store(dst + HALF, k2.to(elem), mask=mask)
            tl.store(v_dst, tl.load(v_row, mask=mask).to(elem), mask=mask)
            tl.store(v_dst + HALF * stride_vc_d, tl.load(v_row + HALF, mask=mask).to(elem), mask=mask)


@triton.jit
def _store_quantized(k1, k2, v1, v2, dst, v_dst, v_half, mask, s_dst, stride_s_kv, raw_slot, num_kv_heads, k_row,
                     v_row, HALF: tl.constexpr, BLOCK_HK: tl.constexpr, QMAX: tl.constexpr, FMT: tl.constexpr,
                     MBITS: tl.constexpr, EMIN: tl.constexpr, WRITE_BACK: tl.constexpr):
    """Both halves of each head's rotated k (and of v) under one scale per token-head; with
    WRITE_BACK their dequantized values over k_row and v_row (the step's own rows)."""
    elem = dst.dtype.element_ty
    heads = tl.arange(0, BLOCK_HK)
    s_mask = (heads < num_kv_heads) & ((heads * 0 + raw_slot) >= 0)
    k1, k2 = k1.to(tl.float32), k2.to(tl.float32)
    v1, v2 = v1.to(tl.float32), v2.to(tl.float32)
    k_scale = kv_scale(tl.maximum(tl.max(tl.abs(k1), 1), tl.max(tl.abs(k2), 1)), QMAX)  # [BLOCK_HK]
    v_scale = kv_scale(tl.maximum(tl.max(tl.abs(v1), 1), tl.max(tl.abs(v2), 1)), QMAX)
    k_scale2, k_inverse = k_scale[:, None], kv_inverse(k_scale)[:, None]
    v_scale2, v_inverse = v_scale[:, None], kv_inverse(v_scale)[:, None]
    qk1 = kv_quantize(k1, k_scale2, k_inverse, QMAX, FMT, MBITS, EMIN)
    qk2 = kv_quantize(k2, k_scale2, k_inverse, QMAX, FMT, MBITS, EMIN)
    qv1 = kv_quantize(v1, v_scale2, v_inverse, QMAX, FMT, MBITS, EMIN)
    qv2 = kv_quantize(v2, v_scale2, v_inverse, QMAX, FMT, MBITS, EMIN)
    tl.store(dst, qk1.to(elem), mask=mask)
    tl.store(dst + HALF, qk2.to(elem), mask=mask)
    tl.store(v_dst, qv1.to(elem), mask=mask)
    tl.store(v_dst + v_half, qv2.to(elem), mask=mask)
    if WRITE_BACK:
        write_back(k_row, qk1, k_scale, mask)
        write_back(k_row + HALF, qk2, k_scale, mask)
        write_back(v_row, qv1, v_scale, mask)
        write_back(v_row + HALF, qv2, v_scale, mask)
    tl.store(s_dst + heads, k_scale.to(s_dst.dtype.element_ty), mask=s_mask)
    tl.store(s_dst + stride_s_kv + heads, v_scale.to(s_dst.dtype.element_ty), mask=s_mask)


def rope_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], k [T, Hkv, D] rotated in place; cos/sin [T, D] -> (q, k)."""
    _launch(q, k, cos, sin, None, None, None)
    return q, k


def rope_store_kv_(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   kv_layer: torch.Tensor | QuantKvLayer, slot_mapping: torch.Tensor,
                   write_back: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """rope_(q, k, cos, sin), then the rotated k and v [T, Hkv, D] to kv_layer at slot_mapping [T];
    `write_back` (an 8-bit layer): k and v become the values the pool gives back."""
    assert v.stride(-1) == 1 and slot_mapping.shape[0] >= q.shape[0]
    _launch(q, k, cos, sin, v, kv_layer, slot_mapping, write_back)
    return q, k


def _launch(q, k, cos, sin, v, kv_layer, slot_mapping, write_back: bool = False) -> None:
    num_tokens, num_heads, head_dim = q.shape
    if num_tokens == 0:
        return
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and cos.stride(-1) == 1 and sin.stride() == cos.stride()
    half = head_dim // 2
    store = kv_layer is not None
    if store:
        (cache, *scale_args), quant = cache_args(kv_layer)
        assert cache.stride(-1) == 1
        store_args = (v, cache, slot_mapping, v.stride(0), v.stride(1), cache.stride(0), cache.stride(1),
                      cache.stride(2), cache.stride(3), cache.shape[2], *scale_args, *value_strides(kv_layer))
    else:  # unused pointers (STORE=False): any tensor will do
        store_args, quant = (k, k, cos, 0, 0, 0, 0, 0, 0, 1, k, 0, 0, 0, 0, 0, 0), quant_constexprs(None)
    _rope_kernel[(num_tokens,)](
        q, k, cos, sin, q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos.stride(0),
        num_heads, k.shape[1], *store_args,
        HALF=half, BLOCK_HALF=next_pow2(half), BLOCK_HQ=next_pow2(num_heads), BLOCK_HK=next_pow2(k.shape[1]),
        STORE=store, num_warps=4, WRITE_BACK=write_back and quant["QUANT"], **pdl_args(q), **quant,
    )
