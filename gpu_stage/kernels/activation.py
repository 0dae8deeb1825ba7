"""SiLU-and-multiply of the fused gate_up output: [T, 2I] -> [T, I], one read, one write.

Reference: F.silu(gate) * up in the model dtype: silu computed in float32 and rounded, then the
product rounded. The kernel rounds at the same two places.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels.pdl import pdl_args

BLOCK = 1024


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_o, num_cols, BLOCK: tl.constexpr,
                         USE_PDL: tl.constexpr):
    if USE_PDL:  # see pdl.py
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < num_cols
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    up = tl.load(x_ptr + row * stride_x + num_cols + cols, mask=mask, other=0.0).to(tl.float32)
    g = gate.to(tl.float32)
    silu = (g / (1.0 + tl.exp(-g))).to(gate.dtype).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (silu * up).to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [T, 2 * I] (gate | up) -> [T, I]."""
    num_rows, width = x.shape
    num_cols = width // 2
    out = torch.empty((num_rows, num_cols), dtype=x.dtype, device=x.device)
    if num_rows == 0:
        return out
    assert x.stride(-1) == 1
    block = min(BLOCK, 1 << max(0, num_cols - 1).bit_length())
    _silu_and_mul_kernel[(num_rows, triton.cdiv(num_cols, block))](
        x, out, x.stride(0), out.stride(0), num_cols, BLOCK=block, num_warps=4, **pdl_args(x),
    )
    return out
