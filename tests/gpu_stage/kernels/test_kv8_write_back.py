"""The store kernels' WRITE_BACK (attention/fresh_kv.py): the pool gets the same bytes, and the
step's own k and v become the values the pool gives back, dequantize(quantize(x)) to the bit;
padding rows (negative slots) are left alone; the backends write back where the rule says."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from gpu_stage.attention import fresh_kv, triton_backend  # noqa: E402
from gpu_stage.attention.metadata import build_metadata  # noqa: E402
from gpu_stage.kernels import rope_store as rope  # noqa: E402
from gpu_stage.kernels.kv_store import store_kv  # noqa: E402
from gpu_stage.kv.format import KvFormat  # noqa: E402
from gpu_stage.kv.invariance import ENV  # noqa: E402
from gpu_stage.kv.quant import dequantize, quantize  # noqa: E402
from gpu_stage.model.rotary import RotaryEmbedding  # noqa: E402
from tests.gpu_stage.kernels.test_kv8_kernels import DEVICE, FORMATS, LAYOUTS, _config, _kv, _pool  # noqa: E402

SLOTS = [9, -1, 20, 4, 13]  # slot -1: a padding row


def _pool_values(x: torch.Tensor, fmt: str) -> torch.Tensor:
    return dequantize(*quantize(x, KvFormat(fmt)), x.dtype)


@LAYOUTS
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_store_writes_the_pool_s_values_back(fmt: str, dtype: torch.dtype, vt: bool) -> None:
    gen = torch.Generator().manual_seed(5)
    k, v = _kv(5, 2, 16, gen, dtype), _kv(5, 2, 16, gen, dtype)
    slots = torch.tensor(SLOTS, dtype=torch.int32, device=DEVICE)
    plain, written = _pool(fmt, 6, 4, 2, 2, 16, dtype, vt), _pool(fmt, 6, 4, 2, 2, 16, dtype, vt)
    store_kv(plain.layer(1), k, v, slots)
    kk, vv = k.clone(), v.clone()
    store_kv(written.layer(1), kk, vv, slots, write_back=True)
    assert torch.equal(written.kv, plain.kv)
    keep = slots >= 0
    for new, old in ((kk, k), (vv, v)):
        assert torch.equal(new[keep], _pool_values(old[keep], fmt))
        assert torch.equal(new[~keep], old[~keep])
        assert not torch.equal(new[keep], old[keep])  # quantization moved them


@LAYOUTS
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_store_writes_the_rotated_k_s_pool_values_back(fmt: str, dtype: torch.dtype, vt: bool) -> None:
    tokens, heads, kv_heads, head_dim = 5, 4, 2, 16
    gen = torch.Generator().manual_seed(6)
    config = _config(heads, kv_heads, head_dim, num_layers=2)
    cos, sin = RotaryEmbedding(config, DEVICE).cos_sin(torch.arange(3, 3 + tokens, device=DEVICE), dtype)
    qkv = (torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=gen) * 4).to(dtype=dtype, device=DEVICE)
    slots = torch.tensor(SLOTS, dtype=torch.int32, device=DEVICE)
    outs = []
    for write_back in (False, True):
        buf = qkv.clone()
        cache = _pool(fmt, 6, 4, heads, kv_heads, head_dim, dtype, vt)
        q, k, v = (x.view(tokens, -1, head_dim) for x in buf.split([heads * head_dim, kv_heads * head_dim,
                                                                     kv_heads * head_dim], dim=-1))
        rope.rope_store_kv_(q, k, v, cos, sin, cache.layer(1), slots, write_back=write_back)
        outs.append((q, k, v, cache.kv))
    (q0, k0, v0, pool0), (q1, k1, v1, pool1) = outs
    assert torch.equal(pool1, pool0) and torch.equal(q1, q0)
    keep = slots >= 0
    for new, old in ((k1, k0), (v1, v0)):
        assert torch.equal(new[keep], _pool_values(old[keep], fmt))
        assert torch.equal(new[~keep], old[~keep])


@pytest.mark.parametrize("flag,expected", [("1", True), ("0", False)])
def test_the_backend_writes_back_over_8_bit_pools_unless_switched_off(flag: str, expected: bool, monkeypatch) -> None:
    monkeypatch.setenv(ENV, flag)
    cache = _pool("fp8_e4m3", 6, 4, 2, 2, 16, torch.float32)
    assert fresh_kv.dequantize_fresh(cache.layer(0)) == expected
    assert not fresh_kv.dequantize_fresh(torch.zeros(6, 2, 4, 2, 16, device=DEVICE))  # a plain pool
    gen = torch.Generator().manual_seed(7)
    k, v = _kv(3, 2, 16, gen, torch.float32), _kv(3, 2, 16, gen, torch.float32)
    kk, vv = k.clone(), v.clone()
    meta = build_metadata([3], [3], [[2]], 4, DEVICE)
    triton_backend.store_kv(cache.layer(0), kk, vv, meta)
    assert meta.fresh_kv[0] is kk
    assert torch.equal(kk, _pool_values(k, "fp8_e4m3") if expected else k)
