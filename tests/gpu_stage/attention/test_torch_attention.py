"""Paged torch attention against a naive dense causal attention, and the metadata it runs on."""
from __future__ import annotations

import math
import random

import pytest
import torch

from gpu_stage.attention import torch_backend
from gpu_stage.attention.metadata import build_metadata


def _dense_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """q [Tq, H, D] at positions start.., k/v [L, Hkv, D] at 0..L-1 -> [Tq, H, D], with explicit
    loops over heads and a float64 softmax: nothing shared with the code under test."""
    num_heads, num_kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty(q.shape, dtype=torch.float64)
    for h in range(num_heads):
        kh, vh = k[:, h // group].double(), v[:, h // group].double()  # [L, D]
        scores = q[:, h].double() @ kh.T / math.sqrt(head_dim)  # [Tq, L]
        for t in range(q.shape[0]):
            scores[t, start + t + 1 :] = float("-inf")
        out[:, h] = torch.softmax(scores, dim=-1) @ vh
    return out


def _run_paged(
    specs: list[tuple[int, int]], num_heads: int, num_kv_heads: int, block_size: int = 4,
    head_dim: int = 16, dtype: torch.dtype = torch.float32, seed: int = 0,
):
    """specs: (cached context length, new query length) per sequence. Writes every sequence's full
    K/V through store_kv (context in an earlier "step"), then attends the new queries in one batch.
    Returns (ours [T, H, D], reference [T, H, D])."""
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    num_blocks = sum(-(-(c + n) // block_size) for c, n in specs) + 5
    free = list(range(num_blocks))
    rng.shuffle(free)  # non-contiguous, shuffled block tables
    kv = torch.zeros(num_blocks, 3, 2, block_size, num_kv_heads, head_dim, dtype=dtype)
    kv_layer = kv[:, 1]  # a middle layer's strided view, as the model passes it
    tables, qs, ks, vs = [], [], [], []
    for context, new in specs:
        total = context + new
        tables.append([free.pop() for _ in range(-(-total // block_size))])
        ks.append(torch.randn(total, num_kv_heads, head_dim, generator=gen).to(dtype))
        vs.append(torch.randn(total, num_kv_heads, head_dim, generator=gen).to(dtype))
        qs.append(torch.randn(new, num_heads, head_dim, generator=gen).to(dtype))
    prior = [i for i, (c, _) in enumerate(specs) if c > 0]
    if prior:  # the cached context, written by an earlier step
        meta = build_metadata([specs[i][0] for i in prior], [specs[i][0] for i in prior], [tables[i] for i in prior], block_size, "cpu")
        torch_backend.store_kv(kv_layer, torch.cat([ks[i][: specs[i][0]] for i in prior]), torch.cat([vs[i][: specs[i][0]] for i in prior]), meta)
    meta = build_metadata([n for _, n in specs], [c + n for c, n in specs], tables, block_size, "cpu")
    new_k = torch.cat([k[c:] for k, (c, _) in zip(ks, specs)])
    new_v = torch.cat([v[c:] for v, (c, _) in zip(vs, specs)])
    torch_backend.store_kv(kv_layer, new_k, new_v, meta)
    out = torch_backend.forward(torch.cat(qs), kv_layer, meta)
    ref = torch.cat([_dense_reference(q, k, v, c) for q, k, v, (c, _) in zip(qs, ks, vs, specs)])
    assert (kv[:, 0] == 0).all() and (kv[:, 2] == 0).all()  # other layers untouched
    return out, ref


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (4, 2), (8, 2), (6, 1)])
def test_mixed_batch_matches_dense(num_heads: int, num_kv_heads: int) -> None:
    # fresh prefill, prefill chunk after cached context, decodes of various lengths, 1-token prompt
    specs = [(0, 11), (9, 7), (5, 1), (17, 1), (0, 1), (3, 4), (30, 1)]
    out, ref = _run_paged(specs, num_heads, num_kv_heads)
    assert out.shape == ref.shape == (sum(n for _, n in specs), num_heads, 16)
    assert _rel(out, ref) < 1e-5


@pytest.mark.parametrize("lengths", [[5, 9, 1, 33], [12, 12, 12]])
def test_decode_only_batches(lengths: list[int]) -> None:
    specs = [(n - 1, 1) for n in lengths]
    out, ref = _run_paged(specs, 8, 2, block_size=8)
    assert _rel(out, ref) < 1e-5


def test_single_long_prefill_and_block_size_one() -> None:
    out, ref = _run_paged([(0, 70)], 4, 2, block_size=16)
    assert _rel(out, ref) < 1e-5
    out, ref = _run_paged([(6, 3), (2, 1)], 4, 2, block_size=1)
    assert _rel(out, ref) < 1e-5


def test_bfloat16_within_tolerance() -> None:
    out, ref = _run_paged([(0, 9), (12, 5), (20, 1)], 8, 2, dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert _rel(out, ref) < 1e-2


def test_metadata_slots_positions_and_offsets() -> None:
    # seq 0: 3 new tokens at positions 4..6 with table [9, 2]; seq 1: one token at position 0.
    meta = build_metadata([3, 1], [7, 1], [[9, 2], [5]], 4, "cpu")
    assert meta.cu_seqlens_q.tolist() == [0, 3, 4]
    assert meta.seq_lens.tolist() == [7, 1]
    assert meta.positions.tolist() == [4, 5, 6, 0]
    assert meta.slot_mapping.tolist() == [2 * 4 + 0, 2 * 4 + 1, 2 * 4 + 2, 5 * 4 + 0]
    assert meta.block_tables.tolist() == [[9, 2], [5, 0]]
    assert meta.block_tables.dtype == torch.int32
    assert (meta.max_query_len, meta.max_seq_len, meta.num_seqs, meta.num_tokens) == (3, 7, 2, 4)


def test_plan_is_built_once_per_step() -> None:
    meta = build_metadata([2, 1], [5, 3], [[0, 1], [2]], 4, "cpu")
    kv_layer = torch.zeros(3, 2, 4, 1, 8)
    q = torch.randn(3, 2, 8)
    torch_backend.forward(q, kv_layer, meta)
    plan = meta.backend_plan
    torch_backend.forward(q, kv_layer, meta)
    assert meta.backend_plan is plan
