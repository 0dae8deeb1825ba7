"""The 8-bit pool's layout (gpu_stage/kv/layout.py) through KvCache: one uint8 slab per block with
each token's scales in its row, typed views that alias it, and the sizes the memory profile uses."""
from __future__ import annotations

import pytest
import torch

from gpu_stage.kv.cache import KvCache, blocks_for_memory, bytes_per_token
from gpu_stage.kv.format import KvFormat
from gpu_stage.kv.layout import QuantKvLayer
from gpu_stage.loaders.dummy_loader import PRESETS
from gpu_stage.model.config import ModelConfig

CONFIG = ModelConfig("llama", 100, 64, 128, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16)
ROW = 2 * (16 + 2)  # one token's K (or V) of one layer: 2 heads x 16 values, then 2 bf16 scales


@pytest.mark.parametrize("name", ["int8", "fp8_e4m3", "fp8_e5m2"])
def test_one_slab_per_block_and_views_that_alias_it(name: str) -> None:
    fmt = KvFormat(name)
    cache = KvCache(CONFIG, num_blocks=5, block_size=4, device="cpu", dtype=torch.float32, kv_format=fmt)
    assert cache.is_quantized and cache.dtype == torch.uint8 and cache.kv_dtype == name
    assert cache.kv.shape == (5, 3 * 2 * 4 * ROW) and cache.num_bytes_per_block == 3 * 2 * 4 * ROW
    layer = cache.layer(1)
    assert isinstance(layer, QuantKvLayer) and layer.fmt == fmt
    assert layer.data.shape == (5, 2, 4, 2, 16) and layer.data.dtype == fmt.torch_dtype
    assert layer.scales.shape == (5, 2, 4, 2) and layer.scales.dtype == torch.bfloat16
    assert layer.rows.shape == (5, 2, 4, ROW)
    # block 3, layer 1, V, token 2: values of head 1 and the scale of head 1
    layer.data[3, 1, 2, 1] = torch.full((16,), 2.0).to(fmt.torch_dtype)
    layer.scales[3, 1, 2, 1] = 0.5
    row_start = (1 * 2 * 4 + 1 * 4 + 2) * ROW  # (layer, V, token) inside the block's slab
    slab = cache.block(3)
    assert slab.is_contiguous() and slab.shape == (3 * 2 * 4 * ROW,)
    assert slab.data_ptr() == cache.kv.data_ptr() + 3 * slab.numel()
    assert torch.equal(slab[row_start + 16: row_start + 32], torch.full((16,), 2.0).to(fmt.torch_dtype).view(torch.uint8))
    assert torch.equal(slab[row_start + 32 + 2: row_start + 32 + 4], torch.tensor([0.5], dtype=torch.bfloat16).view(torch.uint8))
    assert torch.equal(layer.rows[3, 1, 2], slab[row_start: row_start + ROW])
    assert int(cache.kv.count_nonzero()) == int(slab.count_nonzero())  # nothing else written
    assert torch.equal(cache.value_cache(1)[3, 2, 1].view(torch.uint8), slab[row_start + 16: row_start + 32])


def test_a_plain_pool_is_unchanged() -> None:
    cache = KvCache(CONFIG, 5, 4, "cpu", torch.bfloat16)
    assert not cache.is_quantized and cache.kv_dtype == "bfloat16" and cache.dtype == torch.bfloat16
    assert isinstance(cache.layer(0), torch.Tensor) and cache.kv.shape == (5, 3, 2, 4, 2, 16)
    assert cache.fingerprint_fields() == ("torch.bfloat16", (3, 2, 4, 2, 16), 1)
    other = KvCache(CONFIG, 5, 4, "cpu", torch.float32, KvFormat("bfloat16"))  # explicit, model fp32
    assert other.dtype == torch.bfloat16 and other.fingerprint_fields() == cache.fingerprint_fields()


def test_fingerprint_fields_name_the_format_and_its_scales() -> None:
    fields = {name: KvCache(CONFIG, 2, 4, "cpu", torch.bfloat16, KvFormat(name)).fingerprint_fields()
              for name in ("int8", "fp8_e4m3", "fp8_e5m2")}
    fields["bfloat16"] = KvCache(CONFIG, 2, 4, "cpu", torch.bfloat16).fingerprint_fields()
    assert len({f[0] for f in fields.values()}) == 4
    assert fields["int8"] == ("int8+scales:bfloat16/token-head/in-row", (3, 2, 4, 2, 16), 2)


def test_pool_tokens_at_the_llama_3_8b_shape_are_1_95x_bf16s() -> None:
    config = PRESETS["llama-3-8b"]
    assert bytes_per_token(config, torch.bfloat16) == 131_072  # 128 KiB (PERFORMANCE.md)
    assert bytes_per_token(config, KvFormat("fp8_e4m3")) == 32 * 2 * 8 * (128 + 2)
    budget = 60 * 2**30
    plain = blocks_for_memory(config, 16, torch.bfloat16, budget)
    for name in ("fp8_e4m3", "int8"):
        assert blocks_for_memory(config, 16, KvFormat(name), budget) / plain >= 1.95


def test_describe_reports_format_and_size() -> None:
    cache = KvCache(CONFIG, 9, 4, "cpu", torch.float32, KvFormat("int8"))
    assert cache.describe() == {"dtype": "int8", "quantized": True, "scales": "bfloat16/token-head",
                                "v_layout": "token-head-dim",
                                "bytes_per_token": 3 * 2 * ROW, "block_size": 4, "num_blocks": 9,
                                "pool_tokens": 8 * 4, "pool_bytes": 9 * 4 * 3 * 2 * ROW}
    assert "int8, 216 bytes per token, 9 blocks of 4 = 32 tokens" in cache.summary()


@pytest.mark.parametrize("name", ["int8", "fp8_e4m3"])
def test_v_transposed_layout_offsets_inside_the_slab(name: str) -> None:
    """Layer 1 of block 3: K values [token, head, dim] then K scales [token, head]; V values
    [head, dim, token] then V scales [token, head]; each half as many bytes as the row layout's."""
    fmt = KvFormat(name)
    cache = KvCache(CONFIG, num_blocks=5, block_size=4, device="cpu", dtype=torch.float32, kv_format=fmt,
                    v_transposed=True)
    assert cache.v_transposed and cache.kv.shape == (5, 3 * 2 * 4 * ROW)
    layer = cache.layer(1)
    assert layer.v_transposed and layer.v_data.shape == (5, 4, 2, 16) and layer.v_data.stride()[1:] == (1, 64, 4)
    vals = torch.arange(16, dtype=torch.float32).to(fmt.torch_dtype)
    layer.k_data[3, 2, 1] = vals
    layer.v_data[3, 2, 1] = vals
    layer.scales[3, 0, 2, 1] = 0.5
    layer.scales[3, 1, 2, 1] = 0.25
    slab = cache.block(3)
    base, half, values_bytes = 1 * 2 * 4 * ROW, 4 * ROW, 4 * 2 * 16
    k_at = base + (2 * 2 + 1) * 16
    assert torch.equal(slab[k_at: k_at + 16], vals.view(torch.uint8))
    v_at = base + half + 1 * 16 * 4 + torch.arange(16) * 4 + 2  # head 1, dim d, token 2
    assert torch.equal(slab[v_at], vals.view(torch.uint8))
    for kv, scale in ((0, 0.5), (1, 0.25)):
        at = base + kv * half + values_bytes + 2 * (2 * 2 + 1)
        assert torch.equal(slab[at: at + 2], torch.tensor([scale], dtype=torch.bfloat16).view(torch.uint8))
    assert int(cache.kv.count_nonzero()) == int(slab.count_nonzero())  # nothing else written
    assert torch.equal(cache.value_cache(1)[3, 2, 1].float(), vals.float())


def test_v_transposed_layout_has_its_own_fingerprint() -> None:
    rows = KvCache(CONFIG, 2, 4, "cpu", torch.bfloat16, KvFormat("fp8_e4m3"), v_transposed=False)
    vt = KvCache(CONFIG, 2, 4, "cpu", torch.bfloat16, KvFormat("fp8_e4m3"), v_transposed=True)
    assert rows.fingerprint_fields() != vt.fingerprint_fields()
    assert vt.fingerprint_fields()[2] == 3 and rows.fingerprint_fields()[2] == 2
    plain = KvCache(CONFIG, 2, 4, "cpu", torch.bfloat16, v_transposed=True)  # a plain pool has one layout
    assert not plain.v_transposed and plain.fingerprint_fields() == ("torch.bfloat16", (3, 2, 4, 2, 16), 1)


def test_only_e4m3_pools_on_a_gpu_take_the_v_transposed_layout_by_default() -> None:
    """fp8 e4m3's decode reads V^T on the fp8 tensor cores; int8, e5m2 and CPU pools keep the rows."""
    from gpu_stage.kv.layout import v_transposed_by_default

    assert v_transposed_by_default(KvFormat("fp8_e4m3"), "cuda")
    assert v_transposed_by_default(KvFormat("fp8_e4m3"), torch.device("cuda", 1))
    assert not v_transposed_by_default(KvFormat("fp8_e4m3"), "cpu")
    assert not v_transposed_by_default(KvFormat("int8"), "cuda")
    assert not v_transposed_by_default(KvFormat("fp8_e5m2"), "cuda")
