"""KvCache: the paged KV pool, one tensor allocated at start-up.

Layout, block first: `[num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]`. One block's
K and V for every layer is then a single contiguous slab (`kv[block_id]`), so moving a block between
GPU, host and disk tiers is one copy, not 2 * num_layers small ones. The price is that a layer's view
(`kv[:, layer]`) is strided across blocks; attention indexes it with (block, offset) pairs, which
costs the same as a flat slot index.

An 8-bit pool (`--kv-cache-dtype fp8|fp8_e4m3|fp8_e5m2|int8`) is one uint8 tensor
`[num_blocks, block_bytes]` instead, block first too, with each token's scales beside its values
(gpu_stage/kv/layout.py); `layer(i)` then returns a QuantKvLayer of typed views rather than a
tensor, and the attention backends quantize on store and dequantize on read.
"""
from __future__ import annotations

import torch

from gpu_stage.kv.format import KvFormat
from gpu_stage.kv import layout as kv_layout
from gpu_stage.kv.layout import QuantKvLayer, layer_views, layout_name, layout_version, quantized_bytes_per_token
from gpu_stage.model.config import ModelConfig

PLAIN_LAYOUT_VERSION = 1  # the block-file fingerprint's layout version of a plain float pool
MAX_SLOTS = 2**31 - 1  # slots are int32 in the store kernels (kernels/kv_store.py, rope_store.py)


class KvCache:
    def __init__(
        self,
        config: ModelConfig,
        num_blocks: int,
        block_size: int,
        device: torch.device | str,
        dtype: torch.dtype,  # the model's dtype
        kv_format: KvFormat | None = None,  # None: the model's dtype (a plain pool)
        v_transposed: bool | None = None,  # an 8-bit pool's V layout (kv/layout.py); None: the default
    ) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"need num_blocks > 0 and block_size > 0, got {num_blocks}, {block_size}")
        if num_blocks * block_size > MAX_SLOTS:
            raise ValueError(f"a pool of {num_blocks} blocks of {block_size} tokens has more than {MAX_SLOTS} "
                             "slots (the store kernels divide a slot in 32 bits)")
        self.config = config
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_layers = config.num_layers
        self.kv_format = kv_format or KvFormat(str(dtype).removeprefix("torch."))
        self.is_quantized = self.kv_format.is_quantized
        if v_transposed is None:
            v_transposed = kv_layout.v_transposed_by_default(self.kv_format, device)
        self.v_transposed = bool(v_transposed) and self.is_quantized
        # The storage's element dtype: the float dtype of a plain pool, uint8 for an 8-bit one.
        self.dtype = torch.uint8 if self.is_quantized else self.kv_format.torch_dtype
        # Zeros so that padded reads of unwritten slots are finite (they are masked, but NaN * 0 would
        # still be NaN); an 8-bit pool's zero bytes are zero values with zero scales.
        if self.is_quantized:
            self.kv = torch.zeros((num_blocks, bytes_per_block(config, block_size, self.kv_format)),
                                  dtype=torch.uint8, device=device)
            self._layer_views: list = [
                layer_views(self.kv, layer, block_size, config.num_kv_heads, config.head_dim, self.kv_format,
                            self.v_transposed)
                for layer in range(config.num_layers)]
        else:
            # [num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]
            self.kv = torch.zeros(
                (num_blocks, config.num_layers, 2, block_size, config.num_kv_heads, config.head_dim),
                dtype=self.dtype, device=device)
            # Per-layer views, built once: [num_blocks, 2, block_size, num_kv_heads, head_dim].
            self._layer_views = [self.kv[:, layer] for layer in range(config.num_layers)]

    @property
    def device(self) -> torch.device:
        return self.kv.device

    @property
    def kv_dtype(self) -> str:
        """The KV format's name: bfloat16, float16, float32, fp8_e4m3, fp8_e5m2 or int8."""
        return self.kv_format.name

    def layer(self, layer: int) -> torch.Tensor | QuantKvLayer:
        """One layer: a plain pool's [num_blocks, 2, block_size, num_kv_heads, head_dim] view (index
        0 = K, 1 = V), or an 8-bit pool's QuantKvLayer (values, scales and whole rows)."""
        return self._layer_views[layer]

    def key_cache(self, layer: int) -> torch.Tensor:
        """[num_blocks, block_size, num_kv_heads, head_dim] view of one layer's keys (the values of
        an 8-bit pool)."""
        view = self._layer_views[layer]
        return (view.data if self.is_quantized else view)[:, 0]

    def value_cache(self, layer: int) -> torch.Tensor:
        """[num_blocks, block_size, num_kv_heads, head_dim] view of one layer's values."""
        view = self._layer_views[layer]
        return view.v_data if self.is_quantized else view[:, 1]

    def block(self, block_id: int) -> torch.Tensor:
        """One block, contiguous, all layers: [num_layers, 2, block_size, num_kv_heads, head_dim],
        or an 8-bit pool's [block_bytes]."""
        return self.kv[block_id]

    @property
    def num_bytes_per_block(self) -> int:
        return bytes_per_block(self.config, self.block_size, self.kv_format)

    @property
    def num_bytes_per_token(self) -> int:
        return bytes_per_token(self.config, self.kv_format)

    @property
    def num_bytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()

    @property
    def num_tokens(self) -> int:
        """Tokens the pool holds for requests: block 0 is the null block (scheduler/block_pool.py)."""
        return (self.num_blocks - 1) * self.block_size

    def describe(self) -> dict:
        """The pool's format and size, as /metrics and /debug/kv report them."""
        return {"dtype": self.kv_dtype, "quantized": self.is_quantized,
                "scales": "bfloat16/token-head" if self.is_quantized else None,
                "v_layout": (("head-dim-token" if self.v_transposed else "token-head-dim")
                             if self.is_quantized else None),
                "bytes_per_token": self.num_bytes_per_token, "block_size": self.block_size,
                "num_blocks": self.num_blocks, "pool_tokens": self.num_tokens, "pool_bytes": self.num_bytes}

    def fingerprint_fields(self) -> tuple[str, tuple[int, ...], int]:
        """(dtype name, block shape, layout version) for kv_tiers.fingerprint.model_fingerprint: a
        plain pool's are what they always were, so its block files stay valid; an 8-bit pool names
        its format and scale layout, so no block file of another format is ever read."""
        if not self.is_quantized:
            return str(self.dtype), tuple(self.block(0).shape), PLAIN_LAYOUT_VERSION
        c = self.config
        shape = (c.num_layers, 2, self.block_size, c.num_kv_heads, c.head_dim)
        return layout_name(self.kv_format, self.v_transposed), shape, layout_version(self.v_transposed)

    def summary(self) -> str:
        return (f"KV cache: {self.kv_dtype}, {self.num_bytes_per_token} bytes per token, {self.num_blocks} blocks "
                f"of {self.block_size} = {self.num_tokens} tokens, {self.num_bytes / 2**30:.2f} GiB")


def _plain_format(kv_format: KvFormat | torch.dtype) -> KvFormat:
    return kv_format if isinstance(kv_format, KvFormat) else KvFormat(str(kv_format).removeprefix("torch."))


def bytes_per_token(config: ModelConfig, kv_format: KvFormat | torch.dtype) -> int:
    """K and V of every layer for one token, scales included. `kv_format`: a KvFormat, or a float
    dtype (a plain pool of that dtype)."""
    fmt = _plain_format(kv_format)
    if fmt.is_quantized:
        return quantized_bytes_per_token(config)
    return config.kv_bytes_per_token(torch.empty((), dtype=fmt.torch_dtype).element_size())


def bytes_per_block(config: ModelConfig, block_size: int, kv_format: KvFormat | torch.dtype) -> int:
    return block_size * bytes_per_token(config, kv_format)


def blocks_for_memory(
    config: ModelConfig, block_size: int, kv_format: KvFormat | torch.dtype, budget_bytes: int
) -> int:
    """How many whole blocks fit in `budget_bytes` (0 when not even one does)."""
    return max(0, int(budget_bytes) // bytes_per_block(config, block_size, kv_format))
