"""KvCache: block-first layout, per-layer views, sizes."""
from __future__ import annotations

import pytest
import torch

from gpu_stage.kv.cache import KvCache, blocks_for_memory
from gpu_stage.model.config import ModelConfig

CONFIG = ModelConfig("llama", 100, 64, 128, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16)


def test_layout_and_views_alias_one_tensor() -> None:
    cache = KvCache(CONFIG, num_blocks=5, block_size=4, device="cpu", dtype=torch.float32)
    assert cache.kv.shape == (5, 3, 2, 4, 2, 16)
    assert cache.layer(1).shape == (5, 2, 4, 2, 16)
    assert cache.key_cache(2).shape == cache.value_cache(2).shape == (5, 4, 2, 16)
    cache.key_cache(1)[3, 2] = 1.0
    cache.value_cache(2)[0, 1, 1] = 2.0
    assert cache.kv[3, 1, 0, 2].eq(1.0).all() and cache.kv[0, 2, 1, 1, 1].eq(2.0).all()
    assert float(cache.kv.sum()) == 2 * 16 * 1.0 + 16 * 2.0
    block = cache.block(3)  # all layers of one block: one contiguous slab
    assert block.is_contiguous() and block.shape == (3, 2, 4, 2, 16)
    assert block.data_ptr() == cache.kv.data_ptr() + 3 * block.numel() * 4


def test_sizes() -> None:
    per_block = 4 * 2 * 3 * 2 * 16 * 2  # tokens * (K,V) * layers * kv_heads * head_dim * bf16 bytes
    cache = KvCache(CONFIG, 7, 4, "cpu", torch.bfloat16)
    assert cache.num_bytes_per_block == per_block
    assert cache.num_bytes == 7 * per_block
    assert blocks_for_memory(CONFIG, 4, torch.bfloat16, 10 * per_block + per_block - 1) == 10
    assert blocks_for_memory(CONFIG, 4, torch.float32, 2 * per_block) == 1
    assert blocks_for_memory(CONFIG, 4, torch.float32, 10) == 0


def test_rejects_empty_pool() -> None:
    with pytest.raises(ValueError):
        KvCache(CONFIG, 0, 16, "cpu", torch.float32)


def test_rejects_a_pool_whose_slots_overflow_32_bits() -> None:
    """The store kernels divide slots in int32: such a pool is refused before any allocation."""
    with pytest.raises(ValueError, match="32 bits"):
        KvCache(CONFIG, 2**27, 16, "cpu", torch.float32)  # 2^31 slots: one too many
