"""Attention whose result for a query does not depend on the step it was computed in: the torch
path over an 8-bit pool on the CPU (kv/invariance.py says why).

SDPA's CPU kernels and MKL's products choose their blocking from the shapes: a query's output
changes in its last bits with the number of queries beside it, the keys' count past its own
position, the number of decodes in the batch (their padding) and the thread count. Here every
product has one shape whatever the step:
- keys are taken in tiles of KEY_TILE positions counted from position 0; a tile's scores are one
  [rows, head_dim] x [head_dim, KEY_TILE] product and its weighted values one [rows, KEY_TILE] x
  [KEY_TILE, head_dim] product (per KV head, batched over sequences and tiles);
- a query's rows (its GROUP query heads of a KV head) sit among the sequence's other queries'
  rows, padded to a multiple of ROW_QUANTUM: MKL's small-row kernels below 4 rows, and its split
  of odd row counts over two threads, sum in another order (`test_invariant_attention.py`
  checks the property on the machine that runs the tests);
- the softmax's maximum is exact in any order; the row sums over a tile have a fixed length; the
  tiles' sums and weighted values are added by a halving tree over a power-of-two count, which
  the tiles a query cannot see (all masked: exact zeros) leave unchanged.
So a query's bits depend only on its sequence's keys up to its position: the same alone, among 20
requests, in a chunk of any size, as a decode, or recomputed after a preemption.
Keys past a sequence's end read position 0's row (written, so finite) and are masked.

Cost: a prefill is attended in slices of one tile of query positions, each over the key tiles up
to its own (the causal skip, at tile granularity); its scores are materialized per slice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

KEY_TILE = 64
ROW_QUANTUM = 4
PAST_EVERY_KEY = 1 << 40  # a padding row's position: it sees every key, so its softmax stays finite

Gather = Callable[[object, torch.Tensor, int], torch.Tensor]  # (rows, index, K or V) -> [N, Hkv * D]


@dataclass
class Group:
    """Sequences attended together: B sequences with the same number Tq of queries (the step's
    decodes, or one prefill chunk's slice)."""

    q_rows: torch.Tensor  # [B * Tq] int64: the queries' rows in the step
    q_pos: torch.Tensor  # [B, Tq] int64: their positions
    k_rows: torch.Tensor  # [B, num_tiles * KEY_TILE] int64: pool row of each key position


def key_rows(table: torch.Tensor, seq_len: int, num_keys: int, block_rows: int, block_size: int) -> torch.Tensor:
    """Pool rows of key positions [0, num_keys) of a sequence (its block table's first row of each
    block, [num_blocks]); positions from seq_len on read position 0's row."""
    pos = torch.arange(num_keys, device=table.device)
    cols = (pos // block_size).clamp_(max=table.shape[0] - 1)
    rows = table[cols] * block_rows + pos % block_size
    return torch.where(pos < seq_len, rows, rows[0])


def plan_groups(query_lens: list[int], seq_lens: list[int], tables: torch.Tensor, block_rows: int, block_size: int,
                num_kv_heads: int, group: int) -> list[Group]:
    """The step's groups: its decodes as one, each prefill chunk in query slices."""
    device = tables.device
    starts = [0]
    for n in query_lens:
        starts.append(starts[-1] + n)
    groups = []
    decodes = [i for i, n in enumerate(query_lens) if n == 1]
    if decodes:
        num_keys = _tiles(max(seq_lens[i] for i in decodes)) * KEY_TILE
        groups.append(Group(torch.tensor([starts[i] for i in decodes], device=device),
                            torch.tensor([[seq_lens[i] - 1] for i in decodes], device=device),
                            torch.stack([key_rows(tables[i], seq_lens[i], num_keys, block_rows, block_size)
                                         for i in decodes])))
    for i, q_len in enumerate(query_lens):
        if q_len == 1:
            continue
        first_pos = seq_lens[i] - q_len
        rows = key_rows(tables[i], seq_lens[i], _tiles(seq_lens[i]) * KEY_TILE, block_rows, block_size)
        # one slice per tile of query positions: it reads the tiles up to its own only
        bounds = [first_pos, *range(_tiles(first_pos + 1) * KEY_TILE, seq_lens[i], KEY_TILE), seq_lens[i]]
        for lo, hi in zip(bounds, bounds[1:]):
            groups.append(Group(torch.arange(starts[i] + lo - first_pos, starts[i] + hi - first_pos, device=device),
                                torch.arange(lo, hi, device=device)[None], rows[None, : _tiles(hi) * KEY_TILE]))
    return groups


def forward(q: torch.Tensor, rows, gather: Gather, groups: list[Group], v_delta: int, num_kv_heads: int,
            window: int | None = None) -> torch.Tensor:
    """q [T, H, D] -> [T, H, D]: each group's queries over their keys (`rows`, `gather`: what
    torch_backend reads the pool through)."""
    out = torch.empty_like(q)
    for g in groups:
        num_seqs, num_keys = g.k_rows.shape
        k = gather(rows, g.k_rows.reshape(-1), 0).view(num_seqs, num_keys, num_kv_heads, -1)
        v = gather(rows, g.k_rows.reshape(-1) + v_delta, 1).view(num_seqs, num_keys, num_kv_heads, -1)
        out[g.q_rows] = attend(q[g.q_rows].view(num_seqs, g.q_pos.shape[1], q.shape[1], q.shape[2]), g.q_pos, k, v,
                               window).flatten(0, 1)
    return out


def attend(q: torch.Tensor, q_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           window: int | None = None) -> torch.Tensor:
    """q [B, Tq, H, D] at positions q_pos [B, Tq]; k, v [B, L, Hkv, D] of key positions [0, L),
    L a multiple of KEY_TILE -> [B, Tq, H, D]. A query sees keys at positions <= its own (and,
    with `window`, > its own - window)."""
    num_seqs, num_q, num_heads, head_dim = q.shape
    num_keys, num_kv_heads = k.shape[1], k.shape[2]
    group, num_tiles = num_heads // num_kv_heads, num_keys // KEY_TILE
    num_rows = num_q * group
    padded = -(-num_rows // ROW_QUANTUM) * ROW_QUANTUM
    # rows (query, head of the KV group), KV heads first: [B, Hkv, rows, D], the scale folded in
    rows = q.view(num_seqs, num_q, num_kv_heads, group, head_dim).permute(0, 2, 1, 3, 4).reshape(
        num_seqs, num_kv_heads, num_rows, head_dim) * head_dim**-0.5
    row_pos = q_pos.repeat_interleave(group, dim=1)  # [B, rows]
    if padded != num_rows:
        rows = torch.cat([rows, rows.new_zeros(num_seqs, num_kv_heads, padded - num_rows, head_dim)], dim=2)
        row_pos = torch.cat([row_pos, row_pos.new_full((num_seqs, padded - num_rows), PAST_EVERY_KEY)], dim=1)
    key_pos = torch.arange(num_keys, device=q.device).view(num_tiles, 1, KEY_TILE)
    hidden = key_pos > row_pos[:, None, :, None]  # [B, n, rows, C]
    if window is not None:
        hidden |= key_pos <= row_pos[:, None, :, None] - window
    batch = num_seqs * num_tiles
    out = []
    for h in range(num_kv_heads):  # per KV head, a tile of K or V is a strided matrix: no copy of the keys
        k_tiles = k[:, :, h].reshape(batch, KEY_TILE, head_dim)
        v_tiles = v[:, :, h].reshape(batch, KEY_TILE, head_dim)
        q_rows = rows[:, h, None].expand(num_seqs, num_tiles, padded, head_dim).reshape(batch, padded, head_dim)
        scores = torch.bmm(q_rows, k_tiles.transpose(1, 2)).view(num_seqs, num_tiles, padded, KEY_TILE)
        scores.masked_fill_(hidden, float("-inf"))
        weights = scores.sub_(scores.amax(dim=(1, 3), keepdim=True)).exp_()  # the maximum is exact
        total = tree_sum(weights.sum(-1), dim=1)  # [B, rows]
        values = torch.bmm(weights.view(batch, padded, KEY_TILE), v_tiles).view(num_seqs, num_tiles, padded, head_dim)
        out.append(tree_sum(values, dim=1) / total[..., None])  # [B, rows, D]
    out = torch.stack(out, dim=1)[:, :, :num_rows].reshape(num_seqs, num_kv_heads, num_q, group, head_dim)
    return out.permute(0, 2, 1, 3, 4).reshape(num_seqs, num_q, num_heads, head_dim)


def tree_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x summed over `dim` by halving (a power-of-two count, zero-padded): trailing zeros along
    `dim` do not change the bits of the result."""
    count = x.shape[dim]
    width = 1 << max(0, count - 1).bit_length()
    if width != count:
        pad = list(x.shape)
        pad[dim] = width - count
        x = torch.cat([x, x.new_zeros(pad)], dim=dim)
    while x.shape[dim] > 1:
        low, high = x.chunk(2, dim=dim)
        x = low + high
    return x.squeeze(dim)


def _tiles(num_keys: int) -> int:
    return -(-num_keys // KEY_TILE)
