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
def mma_acc(a, b, acc, UPCAST: tl.constexpr):
    """acc + a @ b, accumulated by the tensor cores (8-bit or 16-bit operands, float32 acc)."""
    if UPCAST:
        out = acc + tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        out = tl.dot(a, b, acc=acc)
    return out
