"""attention/invariant.py: a query's output has the same bits whatever its step (alone, chunked
from any position, as a decode among others of other lengths, at one or two threads), and is
causal attention within the exactness rule's kernel norm; through torch_backend over 8-bit pools."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from gpu_stage.attention import invariant, torch_backend
from gpu_stage.attention.metadata import build_metadata
from gpu_stage.kv.cache import KvCache
from gpu_stage.kv.format import KvFormat
from gpu_stage.kv.invariance import ENV
from gpu_stage.model.config import ModelConfig

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64  # SmolLM2's attention shape


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _sequence(length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(length, HEADS, HEAD_DIM, generator=gen)
    k, v = (torch.randn(length, KV_HEADS, HEAD_DIM, generator=gen) for _ in range(2))
    return q, k, v


def _keys(x: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Keys [0, num_keys) of one sequence, positions past its end as position 0 (invariant.key_rows)."""
    tiles = -(-num_keys // invariant.KEY_TILE) * invariant.KEY_TILE
    index = torch.arange(tiles)
    return x[torch.where(index < num_keys, index, 0)][None]


def _chunk(q, k, v, start: int, end: int, window: int | None = None) -> torch.Tensor:
    """Queries [start, end) of one sequence, as one prefill chunk."""
    pos = torch.arange(start, end)[None]
    return invariant.attend(q[start:end][None], pos, _keys(k, end), _keys(v, end), window)[0]


@pytest.mark.parametrize("window", [None, 37])
def test_it_is_causal_attention(window: int | None) -> None:
    q, k, v = _sequence(300, 0)
    out = _chunk(q, k, v, 0, 300, window)
    mask = None
    if window is not None:
        pos = torch.arange(300)
        mask = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - window)
    ref = F.scaled_dot_product_attention(q.double().transpose(0, 1)[None], k.double().transpose(0, 1)[None],
                                         v.double().transpose(0, 1)[None], attn_mask=mask, is_causal=mask is None,
                                         enable_gqa=True)[0].transpose(0, 1)
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-5


def test_a_query_has_the_same_bits_in_every_chunk_and_as_a_decode(threads) -> None:
    rng = random.Random(1)
    q, k, v = _sequence(700, 1)
    torch.set_num_threads(1)
    whole = _chunk(q, k, v, 0, 700)
    for _ in range(40):
        torch.set_num_threads(rng.choice([1, 2]))
        start = rng.randrange(700)
        end = min(700, start + rng.choice([1, 2, 3, 5, 16, 63, 64, 65, 300]))
        assert torch.equal(_chunk(q, k, v, start, end), whole[start:end]), (start, end)


def test_decodes_batched_with_other_lengths_keep_their_bits(threads) -> None:
    """A batch pads every sequence's keys to the longest one's tiles."""
    seqs = [_sequence(n, 10 + n) for n in (5, 64, 65, 200, 513)]
    alone = [_chunk(q, k, v, len(q) - 1, len(q)) for q, k, v in seqs]
    longest = max(len(q) for q, _, _ in seqs)
    for num_threads in (1, 2):
        torch.set_num_threads(num_threads)
        out = invariant.attend(torch.stack([q[-1:] for q, _, _ in seqs]),
                               torch.tensor([[len(q) - 1] for q, _, _ in seqs]),
                               torch.cat([_pad(k, longest) for _, k, _ in seqs]),
                               torch.cat([_pad(v, longest) for _, _, v in seqs]))
        for i, ref in enumerate(alone):
            assert torch.equal(out[i], ref), i


def _pad(x: torch.Tensor, longest: int) -> torch.Tensor:
    """One sequence's keys padded with position 0's to the longest sequence's tiles."""
    tiles = -(-longest // invariant.KEY_TILE) * invariant.KEY_TILE
    index = torch.arange(tiles)
    return x[torch.where(index < x.shape[0], index, 0)][None]


def test_tree_sum_ignores_trailing_zeros() -> None:
    x = torch.randn(5, 7, dtype=torch.float32) * 1e3
    ref = invariant.tree_sum(x, 0)
    assert torch.allclose(ref, x.double().sum(0).float(), rtol=1e-5, atol=1e-2)
    for extra in (1, 3, 11):
        assert torch.equal(invariant.tree_sum(torch.cat([x, torch.zeros(extra, 7)]), 0), ref)


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_torch_backend_takes_it_over_8_bit_pools_and_chunking_keeps_the_bits(fmt: str, monkeypatch) -> None:
    """A 40-token prompt stored and attended as one step, or as chunks of 16, 16, 7 and one decode
    beside another sequence: the same bits; the old path (TTFT_KV8_INVARIANT=0) agrees within the
    kernel norm."""
    config = ModelConfig("llama", 10, HEADS * HEAD_DIM, 8, 1, HEADS, KV_HEADS, HEAD_DIM)
    q, k, v = _sequence(40, 3)
    other_q, other_k, other_v = _sequence(70, 4)
    table, other_table = [1, 2, 3], [4, 5, 6, 7, 8]

    def run(chunks: list[tuple[int, int]], env: str = "1") -> torch.Tensor:
        monkeypatch.setenv(ENV, env)
        cache = KvCache(config, 10, 16, "cpu", torch.float32, KvFormat(fmt))
        layer = cache.layer(0)
        meta = build_metadata([70], [70], [other_table], 16, "cpu")
        torch_backend.store_kv(layer, other_k, other_v, meta)
        outs = []
        for start, end in chunks:
            with_other = end - start == 1  # a decode step beside the other sequence's decode
            if with_other:
                meta = build_metadata([1, 1], [end, 70], [table, other_table], 16, "cpu")
                kk, vv = torch.cat([k[start:end], other_k[69:]]), torch.cat([v[start:end], other_v[69:]])
                qq = torch.cat([q[start:end], other_q[69:]])
            else:
                meta = build_metadata([end - start], [end], [table], 16, "cpu")
                kk, vv, qq = k[start:end], v[start:end], q[start:end]
            torch_backend.store_kv(layer, kk, vv, meta)
            outs.append(torch_backend.forward(qq, layer, meta)[: end - start])
        return torch.cat(outs)

    whole = run([(0, 40)])
    assert torch.equal(run([(0, 16), (16, 32), (32, 39), (39, 40)]), whole)
    old = run([(0, 40)], env="0")
    assert float((old - whole).norm() / old.norm()) < 1e-5
