"""Jit helpers shared by the attention kernels."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import interpreting


def dot_flags(dtype: torch.dtype) -> dict:
    """IEEE: float32 operands get exact float32 dots (Triton's default is tf32).
    UPCAST: Triton's CPU interpreter multiplies bf16/fp16 operands as their raw bit patterns (it
    stores them as uint16), so under the interpreter they are upcast to float32 first; the kernels
    still round p to the value dtype before that, so the arithmetic tested is the GPU's."""
    half = dtype in (torch.bfloat16, torch.float16)
    return {"IEEE": dtype == torch.float32, "UPCAST": half and interpreting()}


@triton.jit
def mma(a, b, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """a @ b with float32 accumulation."""
    if UPCAST:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif IEEE:
        out = tl.dot(a, b, input_precision="ieee")
    else:
        out = tl.dot(a, b)
    return out


@triton.jit
def store_split(out, m_i, l_i, nonempty, out_ptr, part_out_ptr, part_lse_ptr, seq, head, split, d, hd_mask, h_ok,
                stride_o_t, stride_o_h, num_heads, HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr):
    """A decode program's normalized output [BLOCK_H, BLOCK_D]: the answer itself with one split, else
    its split's partial and log-sum-exp (base 2) for decode_attention._reduce_kernel."""
    if NUM_SPLITS == 1:
        tl.store(out_ptr + seq * stride_o_t + head[:, None] * stride_o_h + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=hd_mask)
    else:
        part = (seq * num_heads + head) * NUM_SPLITS + split  # [BLOCK_H] row of the partials
        tl.store(part_out_ptr + part[:, None] * HEAD_DIM + d[None, :], out, mask=hd_mask)
        lse = tl.where(nonempty, m_i + tl.log2(tl.where(nonempty, l_i, 1.0)), float("-inf"))
        tl.store(part_lse_ptr + part, lse, mask=h_ok)
