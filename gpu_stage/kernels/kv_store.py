"""Store the step's new K/V into the paged cache: one program per token, both K and V.

The cache view is one layer of the block-first pool, [num_blocks, 2, block_size, kv_heads, head_dim]
with arbitrary strides for the first two dimensions (other layers sit between blocks). A slot is
block_id * block_size + offset; a negative slot skips its token (padding rows of a CUDA graph may
use that; the null block 0 works too). Block offsets are computed in int64: at 8B-model shapes a
block's stride times 30k blocks overflows int32.

An 8-bit pool (QUANT, gpu_stage/kv/layout.py) gets each token-head's values divided by its scale
(amax / qmax, in bfloat16) and rounded (kernels/kv_quant.py), and the scale beside them. V is
written through its own strides (`value_strides`): the V-transposed layout puts a token's values
one byte per (head, dim) row of its block, keys contiguous. With WRITE_BACK the dequantized
values (code * scale, in k's and v's dtype) are written back over k and v: a fresh prefill that
attends to the step's own K/V then reads the pool's values (attention/fresh_kv.py).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import next_pow2
from gpu_stage.kernels.kv_quant import ON_GPU, kv_inverse, kv_quantize, kv_scale, quant_constexprs, round_to_bf16
from gpu_stage.kv.layout import QuantKvLayer


@triton.jit
def _store_kv_kernel(
    k_ptr, v_ptr, cache_ptr, slot_ptr,
    stride_k_t, stride_k_h, stride_v_t, stride_v_h,
    stride_c_block, stride_c_kv, stride_c_tok, stride_c_head,
    block_size, num_kv_heads,
    scale_ptr, stride_s_block, stride_s_kv, stride_s_tok,
    stride_v_tok, stride_v_head, stride_v_d,
    HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
    QUANT: tl.constexpr, FMT: tl.constexpr, QMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr,
    WRITE_BACK: tl.constexpr = False,
):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int32)  # a slot fits 32 bits (KvCache's MAX_SLOTS)
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    mask = (h < num_kv_heads) & (d < HEAD_DIM) & ((h * 0 + slot) >= 0)
    slot = tl.maximum(slot, 0)
    block = (slot // block_size).to(tl.int64)  # 32-bit division: a 64-bit one is a long routine
    offset = slot % block_size
    k_src = k_ptr + t * stride_k_t + h * stride_k_h + d
    v_src = v_ptr + t * stride_v_t + h * stride_v_h + d
    k = tl.load(k_src, mask=mask, other=0.0)
    v = tl.load(v_src, mask=mask, other=0.0)
    dst = cache_ptr + block * stride_c_block + offset * stride_c_tok + h * stride_c_head + d
    v_dst = (cache_ptr + stride_c_kv + block * stride_c_block + offset * stride_v_tok + h * stride_v_head
             + d * stride_v_d)
    if QUANT:
        heads = tl.arange(0, BLOCK_H)
        s_mask = (heads < num_kv_heads) & ((heads * 0 + slot) >= 0)
        s_dst = scale_ptr + block * stride_s_block + offset * stride_s_tok + heads
        k = k.to(tl.float32)
        v = v.to(tl.float32)
        k_scale = kv_scale(tl.max(tl.abs(k), 1), QMAX)  # [BLOCK_H]
        v_scale = kv_scale(tl.max(tl.abs(v), 1), QMAX)
        k = kv_quantize(k, k_scale[:, None], kv_inverse(k_scale)[:, None], QMAX, FMT, MBITS, EMIN)
        v = kv_quantize(v, v_scale[:, None], kv_inverse(v_scale)[:, None], QMAX, FMT, MBITS, EMIN)
        tl.store(s_dst, k_scale.to(scale_ptr.dtype.element_ty), mask=s_mask)
        tl.store(s_dst + stride_s_kv, v_scale.to(scale_ptr.dtype.element_ty), mask=s_mask)
        if WRITE_BACK:
            write_back(k_src, k, k_scale, mask)
            write_back(v_src, v, v_scale, mask)
    tl.store(dst, k.to(cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_dst, v.to(cache_ptr.dtype.element_ty), mask=mask)


@triton.jit
def write_back(src, code, scale, mask):
    """code [heads, D] (kv_quantize's) * scale [heads] -> src in its own dtype: the value the pool
    gives a read, over the step's own."""
    x = code.to(tl.float32) * scale[:, None]
    if not ON_GPU:  # the interpreter's float32 -> bfloat16 conversion truncates (kv_quant.py)
        if src.dtype.element_ty == tl.bfloat16:
            x = round_to_bf16(x)
    tl.store(src, x.to(src.dtype.element_ty), mask=mask)


def cache_args(kv_layer: torch.Tensor | QuantKvLayer) -> tuple[tuple, dict]:
    """(values view, scales view and scale strides (block, kv, token)) and the QUANT constexprs of
    a layer, for the kernels that store into or read the pool. A plain layer passes itself as the
    (unused) scales pointer."""
    if isinstance(kv_layer, QuantKvLayer):
        s = kv_layer.scales
        assert s.stride(3) == 1
        return (kv_layer.data, s, s.stride(0), s.stride(1), s.stride(2)), quant_constexprs(kv_layer.fmt.name)
    return (kv_layer, kv_layer, 0, 0, 0), quant_constexprs(None)


def value_strides(kv_layer: torch.Tensor | QuantKvLayer) -> tuple[int, int, int]:
    """(token, head, dim) element strides of a layer's V values, for the kernels that read them
    (a value's address: the K tile's pointer + stride_c_kv + block * stride_c_block + these): a
    plain pool's and the row layout's are K's; the V-transposed layout has keys contiguous."""
    if isinstance(kv_layer, QuantKvLayer):
        v = kv_layer.v_data
        assert v.storage_offset() - kv_layer.data.storage_offset() == kv_layer.data.stride(1)
        return v.stride(1), v.stride(2), v.stride(3)
    return kv_layer.stride(2), kv_layer.stride(3), kv_layer.stride(4)


def store_kv(kv_layer: torch.Tensor | QuantKvLayer, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor, write_back: bool = False) -> None:
    """k, v [T, kv_heads, head_dim] (last dim contiguous) -> kv_layer at slot_mapping [T].
    `write_back` (an 8-bit layer): k and v become the values the pool gives back."""
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    (cache, *scale_args), quant = cache_args(kv_layer)
    assert cache.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
    assert slot_mapping.shape[0] >= num_tokens
    _store_kv_kernel[(num_tokens,)](
        k, v, cache, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        cache.stride(0), cache.stride(1), cache.stride(2), cache.stride(3),
        cache.shape[2], num_kv_heads, *scale_args, *value_strides(kv_layer),
        HEAD_DIM=head_dim, BLOCK_H=next_pow2(num_kv_heads), BLOCK_D=next_pow2(head_dim),
        num_warps=4, WRITE_BACK=write_back and quant["QUANT"], **quant,
    )
