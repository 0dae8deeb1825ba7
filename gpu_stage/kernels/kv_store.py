"""Store the step's new K/V into the paged cache: one program per token, both K and V.

The cache view is one layer of the block-first pool, [num_blocks, 2, block_size, kv_heads, head_dim]
with arbitrary strides for the first two dimensions (other layers sit between blocks). A slot is
block_id * block_size + offset; a negative slot skips its token (padding rows of a CUDA graph may
use that; the null block 0 works too). Block offsets are computed in int64: at 8B-model shapes a
block's stride times 30k blocks overflows int32.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import next_pow2


@triton.jit
def _store_kv_kernel(
    k_ptr, v_ptr, cache_ptr, slot_ptr,
    stride_k_t, stride_k_h, stride_v_t, stride_v_h,
    stride_c_block, stride_c_kv, stride_c_tok, stride_c_head,
    block_size, num_kv_heads,
    HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    mask = (h < num_kv_heads) & (d < HEAD_DIM) & ((h * 0 + slot) >= 0)
    slot = tl.maximum(slot, 0)
    block = slot // block_size
    offset = slot % block_size
    k = tl.load(k_ptr + t * stride_k_t + h * stride_k_h + d, mask=mask)
    v = tl.load(v_ptr + t * stride_v_t + h * stride_v_h + d, mask=mask)
    dst = cache_ptr + block * stride_c_block + offset * stride_c_tok + h * stride_c_head + d
    tl.store(dst, k.to(cache_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + stride_c_kv, v.to(cache_ptr.dtype.element_ty), mask=mask)


def store_kv(kv_layer: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """k, v [T, kv_heads, head_dim] (last dim contiguous) -> kv_layer at slot_mapping [T]."""
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    assert kv_layer.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
    assert slot_mapping.shape[0] >= num_tokens
    _store_kv_kernel[(num_tokens,)](
        k, v, kv_layer, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        kv_layer.stride(0), kv_layer.stride(1), kv_layer.stride(2), kv_layer.stride(3),
        kv_layer.shape[2], num_kv_heads,
        HEAD_DIM=head_dim, BLOCK_H=next_pow2(num_kv_heads), BLOCK_D=next_pow2(head_dim),
        num_warps=4,
    )
