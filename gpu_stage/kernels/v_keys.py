"""Jit helper of the attention kernels over the V-transposed 8-bit layout (gpu_stage/kv/layout.py:
V as [head, dim, token] in each block, keys contiguous), so that a V tile's loads are wide.

Triton vectorizes a load along a dimension only as far as it can prove the addresses contiguous
and the mask constant there. Along the keys of a tile, the block id comes from the block table (a
load: the compiler knows nothing of it) and the mask from the sequence's ends (anywhere in a
block), so both cut every key apart: one byte per load. Here the block ids are loaded per whole
block (every key of a block the tile's keys [first, end) touch gets its block's id, the others 0)
and declared constant over BLOCK_SIZE keys, and V's mask is that block mask: a V tile is then read
in runs of BLOCK_SIZE bytes. The keys of those blocks outside [first, end) are read too (another
sequence's or never-written bytes: finite, the pool holds only quantized values and zeros) and
weigh nothing: their scores are -inf and their scales 0 (the kernels mask both by the key mask).
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def whole_block_ids(bt_row_ptr, pos, first, end, bs, BLOCK_SIZE: tl.constexpr):
    """pos [BLOCK_N] key positions, tile-aligned -> (block ids int64, mask of the keys whose block
    is touched by [first, end)): both constant over each block's keys."""
    blk = pos // bs
    blk_ok = (blk * bs < end) & ((blk + 1) * bs > first)
    block = tl.load(bt_row_ptr + blk, mask=blk_ok, other=0).to(tl.int64)
    if BLOCK_SIZE > 0:  # BLOCK_SIZE keys of a tile aligned to it share their block (and mask)
        block = tl.max_constancy(block, [BLOCK_SIZE])
    return block, blk_ok
