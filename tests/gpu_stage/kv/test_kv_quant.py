"""The torch quantize / dequantize reference (gpu_stage/kv/quant.py): round trips within each
format's error bound, saturation without inf or NaN, ties to even, and the row packing."""
from __future__ import annotations

import pytest
import torch

from gpu_stage.kv.format import KvFormat
from gpu_stage.kv.quant import (dequantize, dequantize_rows, error_bound, pack_rows, quantize, quantize_rows,
                                unpack_rows)

FORMATS = ["int8", "fp8_e4m3", "fp8_e5m2"]


def _samples(gen: torch.Generator) -> torch.Tensor:
    """[T, H, D] token-heads over 12 decades of magnitude, with outliers, zeros and a constant row."""
    x = torch.randn(64, 4, 32, generator=gen) * torch.logspace(-6, 6, 64)[:, None, None]
    x[3, 1] = 0.0
    x[5, 2] = -7.25
    x[9, 0, 7] = 1e4  # one outlier in an otherwise small token-head
    return x


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_round_trip_within_the_bound(name: str, dtype: torch.dtype) -> None:
    fmt = KvFormat(name)
    x = _samples(torch.Generator().manual_seed(len(name))).clamp(-6e4, 6e4).to(dtype)
    values, scales = quantize(x, fmt)
    assert values.dtype == fmt.torch_dtype and scales.dtype == torch.bfloat16 and scales.shape == x.shape[:2]
    back = dequantize(values, scales, torch.float32)
    x32 = x.float()
    amax = x32.abs().amax(-1, keepdim=True)
    err = (back - x32).abs()
    assert torch.isfinite(back).all()
    assert (err <= error_bound(fmt) * amax + 1e-30).all(), float((err / amax.clamp_min(1e-30)).max())
    assert torch.equal(back[3, 1], torch.zeros(32))  # an all-zero token-head stays exactly zero


@pytest.mark.parametrize("name", FORMATS)
def test_the_largest_value_maps_to_qmax_and_nothing_overflows(name: str) -> None:
    fmt = KvFormat(name)
    # float32's extremes (a scale of 1e-30 / qmax is still a normal bfloat16)
    x = torch.tensor([[[3.0e38, -3.0e38, 1.0, 0.0]], [[1e-30, -1e-30, 0.0, 5e-31]]])
    values, scales = quantize(x, fmt)
    q = values.float()
    assert torch.isfinite(q).all() and torch.isfinite(scales.float()).all()
    assert q.abs().max() <= fmt.qmax
    assert (q[:, 0].abs().amax(-1) >= fmt.qmax * (1 - 2.0**-7)).all()  # the range is used


def test_int8_rounds_half_to_even() -> None:
    fmt = KvFormat("int8")
    # amax 127 -> scale exactly 1 (bf16(127 / 127)): values are their own codes
    x = torch.tensor([[[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, 3.49, -126.51]]])
    values, scales = quantize(x, fmt)
    assert float(scales) == 1.0
    assert values.flatten().tolist() == [127, 0, 2, 2, 0, -2, 3, -127]


def test_scales_are_amax_over_qmax_in_bfloat16() -> None:
    x = torch.randn(10, 3, 16, generator=torch.Generator().manual_seed(1))
    for name in FORMATS:
        fmt = KvFormat(name)
        _, scales = quantize(x, fmt)
        expect = (x.abs().amax(-1) * torch.tensor(1 / fmt.qmax)).to(torch.bfloat16)
        assert torch.equal(scales, expect)


@pytest.mark.parametrize("name", FORMATS)
def test_rows_pack_values_then_scales(name: str) -> None:
    fmt = KvFormat(name)
    x = torch.randn(7, 3, 16, generator=torch.Generator().manual_seed(2))
    values, scales = quantize(x, fmt)
    rows = pack_rows(values, scales)
    assert rows.dtype == torch.uint8 and rows.shape == (7, 3 * (16 + 2))
    assert torch.equal(rows[:, :48], values.reshape(7, 48).view(torch.uint8))
    got_values, got_scales = unpack_rows(rows, 3, fmt)
    assert torch.equal(got_values.view(torch.uint8), values.view(torch.uint8)) and torch.equal(got_scales, scales)
    assert torch.equal(quantize_rows(x, fmt), rows)
    assert torch.equal(dequantize_rows(rows, 3, fmt, torch.float32), dequantize(values, scales, torch.float32).reshape(7, 48))
