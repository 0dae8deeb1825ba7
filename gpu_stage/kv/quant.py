"""Quantize and dequantize K/V for an 8-bit pool, in torch: the CPU path and the kernels' oracle.

The arithmetic is fixed to the bit (the Triton store kernels reproduce it): in float32,
    scale = bf16(amax(|x|) * float32(1 / qmax))              per token and KV head
    y     = clamp(x / scale, -qmax, qmax)                    (0 where the scale is 0)
    q     = round_half_even(y) as int8, or y rounded to the nearest fp8 value (ties to even; a
            negative value that rounds to zero stored as +0, so that every path writes one zero)
and a value reads back as float32(q) * float32(scale). Only conversions and float32 math are used:
torch's CPU float8 tensors support little else.
"""
from __future__ import annotations

import torch

from gpu_stage.kv.format import KvFormat
from gpu_stage.kv.layout import SCALE_DTYPE

NEGATIVE_ZERO = 0x80  # the byte of -0 in both fp8 formats


def quantize(x: torch.Tensor, fmt: KvFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] (any float dtype) -> (values [..., D] in fmt.torch_dtype, scales [...] bfloat16)."""
    x32 = x.to(torch.float32)
    inv_qmax = torch.tensor(1.0 / fmt.qmax, dtype=torch.float32, device=x.device)
    scale = (x32.abs().amax(-1) * inv_qmax).to(SCALE_DTYPE)
    s32 = scale.to(torch.float32)[..., None]
    y = torch.where(s32 > 0, x32 / torch.where(s32 > 0, s32, 1.0), 0.0).clamp_(-fmt.qmax, fmt.qmax)
    if fmt.torch_dtype == torch.int8:
        return y.round_().to(torch.int8), scale
    values = y.to(fmt.torch_dtype)
    values.view(torch.uint8).masked_fill_(values.view(torch.uint8) == NEGATIVE_ZERO, 0)  # one zero: +0
    return values, scale


def dequantize(values: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """values [..., D] (8-bit), scales [...] -> [..., D] in `dtype` (computed in float32)."""
    return (values.to(torch.float32) * scales.to(torch.float32)[..., None]).to(dtype)


def pack_rows(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """values [T, H, D], scales [T, H] -> uint8 [T, H * (D + 2)]: the pool's row layout (kv_layout)."""
    num_tokens = values.shape[0]
    return torch.cat([values.reshape(num_tokens, -1).view(torch.uint8),
                      scales.contiguous().view(torch.uint8).reshape(num_tokens, -1)], dim=1)


def unpack_rows(rows: torch.Tensor, num_kv_heads: int, fmt: KvFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 [N, H * (D + 2)] -> (values [N, H, D] in fmt.torch_dtype, scales [N, H] bfloat16), views."""
    num_rows, width = rows.shape
    head_dim = width // num_kv_heads - 2
    split = num_kv_heads * head_dim
    values = rows[:, :split].view(fmt.torch_dtype).view(num_rows, num_kv_heads, head_dim)
    return values, rows[:, split:].view(SCALE_DTYPE)


def quantize_rows(x: torch.Tensor, fmt: KvFormat) -> torch.Tensor:
    """x [T, H, D] -> its uint8 rows [T, H * (D + 2)]."""
    return pack_rows(*quantize(x, fmt))


def dequantize_rows(rows: torch.Tensor, num_kv_heads: int, fmt: KvFormat, dtype: torch.dtype) -> torch.Tensor:
    """uint8 rows [N, H * (D + 2)] -> [N, H * D] in `dtype`."""
    values, scales = unpack_rows(rows, num_kv_heads, fmt)
    return dequantize(values, scales, dtype).reshape(rows.shape[0], -1)


def error_bound(fmt: KvFormat) -> float:
    """The largest |x - dequantize(quantize(x))| / amax over a token-head: half a step at amax for
    int8 (0.5 / 127), half an ulp at the top binade for fp8 (2^-4 for e4m3, 2^-3 for e5m2), plus
    the scale's bf16 rounding (at most 2^-8 relative: a step that much wider, and the largest value
    saturated by up to that much)."""
    half_step = {"int8": 0.5 / 127, "fp8_e4m3": 2.0**-4, "fp8_e5m2": 2.0**-3}[fmt.name]
    return half_step * (1 + 2.0**-8) + 2.0**-8
