"""RMSNorm, optionally fused with the residual add that precedes it (one read of each input, one
write of each output, instead of torch's ~8 kernels).

Reference arithmetic (LlamaDecoderLayer / HF): h = residual + x rounded to the model dtype; then
weight * (h32 * rsqrt(mean(h32^2) + eps)).to(dtype), the product rounded to the dtype. The kernel
reproduces each rounding; only the order of the sum of squares differs. One program per row; a
row of 4096-8192 elements fits one block.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import next_pow2
from gpu_stage.kernels.pdl import pdl_args


@triton.jit
def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, stride_x, stride_r, stride_o, num_cols, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, USE_PDL: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < num_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # a weight: safe before the wait
    if USE_PDL:  # see pdl.py
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(res_ptr.dtype.element_ty)
        tl.store(res_ptr + row * stride_r + cols, x, mask=mask)
    x32 = x.to(tl.float32)
    variance = tl.sum(x32 * x32, 0) / num_cols
    normed = (x32 * tl.rsqrt(variance + eps)).to(x.dtype).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float) -> torch.Tensor:
    num_rows, num_cols = x.shape
    out = torch.empty_like(x)
    if num_rows == 0:
        return out
    assert x.stride(-1) == 1 and weight.is_contiguous()
    block = next_pow2(num_cols)
    res = x if residual is None else residual
    assert res.stride(-1) == 1
    _rms_norm_kernel[(num_rows,)](
        x, res, weight, out, x.stride(0), res.stride(0), out.stride(0), num_cols, eps,
        HAS_RESIDUAL=residual is not None, BLOCK=block, num_warps=min(16, max(1, block // 512)), **pdl_args(x),
    )
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [N, hidden] -> [N, hidden]."""
    return _launch(x, None, weight, eps)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual += x (in place, rounded to the dtype); -> (rms_norm(residual), residual)."""
    assert x.shape == residual.shape and x.dtype == residual.dtype
    return _launch(x, residual, weight, eps), residual
