"""KvCache: the paged KV pool, one tensor allocated at start-up.

Layout, block first: `[num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]`. One block's
K and V for every layer is then a single contiguous slab (`kv[block_id]`), so moving a block between
GPU, host and disk tiers is one copy, not 2 * num_layers small ones. The price is that a layer's view
(`kv[:, layer]`) is strided across blocks; attention indexes it with (block, offset) pairs, which
costs the same as a flat slot index.
"""
from __future__ import annotations

import torch

from gpu_stage.model.config import ModelConfig


class KvCache:
    def __init__(
        self,
        config: ModelConfig,
        num_blocks: int,
        block_size: int,
        device: torch.device | str,
        dtype: torch.dtype,
    ) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"need num_blocks > 0 and block_size > 0, got {num_blocks}, {block_size}")
        self.config = config
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_layers = config.num_layers
        self.dtype = dtype
        # [num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]; zeros so that padded
        # reads of unwritten slots are finite (they are masked, but NaN * 0 would still be NaN).
        self.kv = torch.zeros(
            (num_blocks, config.num_layers, 2, block_size, config.num_kv_heads, config.head_dim),
            dtype=dtype,
            device=device,
        )
        # Per-layer views, built once: [num_blocks, 2, block_size, num_kv_heads, head_dim].
        self._layer_views = [self.kv[:, layer] for layer in range(config.num_layers)]

    @property
    def device(self) -> torch.device:
        return self.kv.device

    def layer(self, layer: int) -> torch.Tensor:
        """[num_blocks, 2, block_size, num_kv_heads, head_dim] view of one layer (index 0 = K, 1 = V)."""
        return self._layer_views[layer]

    def key_cache(self, layer: int) -> torch.Tensor:
        """[num_blocks, block_size, num_kv_heads, head_dim] view of one layer's keys."""
        return self._layer_views[layer][:, 0]

    def value_cache(self, layer: int) -> torch.Tensor:
        """[num_blocks, block_size, num_kv_heads, head_dim] view of one layer's values."""
        return self._layer_views[layer][:, 1]

    def block(self, block_id: int) -> torch.Tensor:
        """[num_layers, 2, block_size, num_kv_heads, head_dim]: one block, contiguous, all layers."""
        return self.kv[block_id]

    @property
    def num_bytes_per_block(self) -> int:
        return bytes_per_block(self.config, self.block_size, self.dtype)

    @property
    def num_bytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()


def bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    element_size = torch.empty((), dtype=dtype).element_size()
    return block_size * config.kv_bytes_per_token(element_size)


def blocks_for_memory(
    config: ModelConfig, block_size: int, dtype: torch.dtype, budget_bytes: int
) -> int:
    """How many whole blocks fit in `budget_bytes` (0 when not even one does)."""
    return max(0, int(budget_bytes) // bytes_per_block(config, block_size, dtype))
