"""The byte layout of an 8-bit KV pool (fp8 e4m3, fp8 e5m2, int8), and its typed views.

The pool is one uint8 tensor [num_blocks, block_bytes], block first as the plain pool, so a block
is still one contiguous slab and a tier move one copy. Inside a block:

    [num_layers, 2 (K, V), block_size, row_bytes]      row_bytes = H * (D + 2)
    one row = one token's K (or V) in one layer:
        bytes 0 .. H*D - 1          the 8-bit values, [H, D] (H = KV heads, D = head_dim)
        bytes H*D .. H*D + 2H - 1   H bfloat16 scales, one per KV head

A token-head's D values x are stored as q = round(x / s), saturated to the format's largest
finite magnitude qmax (int8: round half to even, clamp to [-127, 127]), with s = bf16(amax(|x|)
* (1 / qmax)); they read back as q * s. The scale is per token and head, computed as the token is
stored, so nothing is calibrated and an outlier token costs only its own precision.

Why these choices:
- Scales beside their values, in each row: the torch path gathers one row per token and gets
  values and scales in one index_select, with the same row arithmetic as the plain pool.
- bfloat16 scales: 2 bytes (per token-head 128 + 2 bytes against bf16's 256 at D = 128: 1.97x the
  tokens; float32 scales would give 1.94x), with float32's range: a float16 scale of a small
  token-head underflows for e5m2 (amax / 57344 < 6e-5 for amax < 3.5). Values are divided by the
  rounded scale, so its 8-bit precision costs nothing but a saturation of at most 0.4% of amax.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from gpu_stage.kv.format import KvFormat
from gpu_stage.model.config import ModelConfig

LAYOUT_VERSION = 2  # the plain pool's layout is version 1 (pipeline/build_tiers.py)
LAYOUT_VERSION_V_TRANSPOSED = 3
# The formats whose pools take the V-transposed layout on a GPU (KvCache's default): fp8 e4m3, whose
# decode then runs both products on the fp8 tensor cores (kernels/decode_e4m3_mma.py; 116.6 against
# 130.8 us per layer at 64 x 2,048 on an H100). int8 and e5m2 keep the row layout (their kernels
# convert codes either way); the torch path on CPU decodes ~7% slower on V^T, so CPU pools keep it
# too.
V_TRANSPOSED_FORMATS = frozenset({"fp8_e4m3"})
SCALE_DTYPE = torch.bfloat16
SCALE_BYTES = 2


def row_bytes(num_kv_heads: int, head_dim: int) -> int:
    """Bytes of one token's K (or V) of one layer: values, then one scale per KV head."""
    return num_kv_heads * (head_dim + SCALE_BYTES)


def quantized_bytes_per_token(config: ModelConfig) -> int:
    return 2 * config.num_layers * row_bytes(config.num_kv_heads, config.head_dim)


def v_transposed_by_default(fmt: KvFormat, device: torch.device | str) -> bool:
    """Whether a new pool of `fmt` on `device` takes the V-transposed layout."""
    return fmt.name in V_TRANSPOSED_FORMATS and torch.device(device).type == "cuda"


def layout_name(fmt: KvFormat, v_transposed: bool = False) -> str:
    """What the block-file fingerprint records for this layout (with layout_version)."""
    if v_transposed:
        return f"{fmt.name}+scales:bfloat16/token-head/per-half+v:head-dim-token"
    return f"{fmt.name}+scales:bfloat16/token-head/in-row"


def layout_version(v_transposed: bool) -> int:
    return LAYOUT_VERSION_V_TRANSPOSED if v_transposed else LAYOUT_VERSION


@dataclass(frozen=True)
class QuantKvLayer:
    """One layer of an 8-bit pool: the views attention reads and writes (all alias the pool).

    rows    uint8 [num_blocks, 2, block_size, row_bytes]: whole rows (the torch path); in the
            V-transposed layout only the geometry of the layer's bytes (rows hold no tokens)
    data    [num_blocks, 2, block_size, H, D] in fmt.torch_dtype: the values (the kernels); in the
            V-transposed layout data[:, 0] is K and data[:, 1] is not V (use v_data)
    scales  bfloat16 [num_blocks, 2, block_size, H]: the scales (the kernels)
    v_data  [num_blocks, block_size, H, D]: the V values (data[:, 1], or strided with keys
            contiguous in the V-transposed layout)
    """

    rows: torch.Tensor
    data: torch.Tensor
    scales: torch.Tensor
    fmt: KvFormat
    v_data: torch.Tensor | None = None
    v_transposed: bool = False

    def __post_init__(self) -> None:
        if self.v_data is None:
            object.__setattr__(self, "v_data", self.data[:, 1])

    @property
    def k_data(self) -> torch.Tensor:
        """[num_blocks, block_size, H, D]: the K values."""
        return self.data[:, 0]

    def values(self, kv: int) -> torch.Tensor:
        """K (kv 0) or V (kv 1) values, [num_blocks, block_size, H, D], in either layout."""
        return self.k_data if kv == 0 else self.v_data

    @property
    def num_kv_heads(self) -> int:
        return self.data.shape[3]

    @property
    def head_dim(self) -> int:
        return self.data.shape[4]


def layer_views(storage: torch.Tensor, layer: int, block_size: int, num_kv_heads: int, head_dim: int,
                fmt: KvFormat, v_transposed: bool = False) -> QuantKvLayer:
    """The views of `layer` in a pool `storage` (uint8 [num_blocks, block_bytes], contiguous)."""
    assert storage.dtype == torch.uint8 and storage.is_contiguous() and head_dim % 2 == 0
    num_blocks, block_bytes = storage.shape
    width = row_bytes(num_kv_heads, head_dim)
    offset = layer * 2 * block_size * width
    rows = storage.as_strided((num_blocks, 2, block_size, width), (block_bytes, block_size * width, width, 1), offset)
    if v_transposed:
        return _v_transposed_views(storage, rows, offset, block_size, num_kv_heads, head_dim, fmt)
    data = storage.view(fmt.torch_dtype).as_strided(
        (num_blocks, 2, block_size, num_kv_heads, head_dim),
        (block_bytes, block_size * width, width, head_dim, 1), offset)
    half = storage.view(SCALE_DTYPE)  # [num_blocks, block_bytes / 2]: every offset below is even
    scales = half.as_strided(
        (num_blocks, 2, block_size, num_kv_heads),
        (block_bytes // 2, block_size * width // 2, width // 2, 1), (offset + num_kv_heads * head_dim) // 2)
    return QuantKvLayer(rows, data, scales, fmt)


def _v_transposed_views(storage: torch.Tensor, rows: torch.Tensor, offset: int, block_size: int,
                        num_kv_heads: int, head_dim: int, fmt: KvFormat) -> QuantKvLayer:
    """The V-transposed layout's views (module docstring); `offset`: the layer's first byte."""
    num_blocks, block_bytes = storage.shape
    half_bytes = block_size * row_bytes(num_kv_heads, head_dim)
    values_bytes = block_size * num_kv_heads * head_dim
    typed = storage.view(fmt.torch_dtype)
    data = typed.as_strided((num_blocks, 2, block_size, num_kv_heads, head_dim),
                            (block_bytes, half_bytes, num_kv_heads * head_dim, head_dim, 1), offset)
    v_data = typed.as_strided((num_blocks, block_size, num_kv_heads, head_dim),
                              (block_bytes, 1, head_dim * block_size, block_size), offset + half_bytes)
    scales = storage.view(SCALE_DTYPE).as_strided(
        (num_blocks, 2, block_size, num_kv_heads), (block_bytes // 2, half_bytes // 2, num_kv_heads, 1),
        (offset + values_bytes) // 2)
    return QuantKvLayer(rows, data, scales, fmt, v_data, True)
