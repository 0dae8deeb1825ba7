"""attention/metadata.py: locating rows of a step, and the one-token metadata of chosen rows."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu_stage.attention import torch_backend
from gpu_stage.attention.metadata import build_metadata, locate_rows, rows_metadata


def test_locate_rows_gives_each_rows_sequence_and_position_plus_one() -> None:
    # sequences of 3 (positions 4..6), 1 (position 0) and 5 (positions 0..4) new tokens
    cu, seq_lens = np.array([0, 3, 4, 9]), np.array([7, 1, 5])
    seq_index, lens = locate_rows(np.array([0, 2, 3, 4, 8]), cu, seq_lens)
    assert seq_index.tolist() == [0, 0, 1, 2, 2]
    assert lens.tolist() == [5, 7, 1, 1, 5]


def test_locate_rows_rejects_a_row_past_the_step() -> None:
    with pytest.raises(AssertionError, match="outside"):
        locate_rows(np.array([9]), np.array([0, 3, 4, 9]), np.array([7, 1, 5]))


def test_rows_metadata_is_a_decode_step_of_the_chosen_rows() -> None:
    tables = [[9, 2], [5], [3, 4]]
    meta = build_metadata([3, 1, 5], [7, 1, 5], tables, 4, "cpu", sample_rows=[8, 1])
    rows = torch.tensor([8, 1], dtype=torch.int32)
    sub = rows_metadata(meta, rows)
    assert sub.query_lens_host == [1, 1] and sub.seq_lens_host == [5, 6] and sub.max_query_len == 1
    assert sub.seq_lens.tolist() == [5, 6] and sub.cu_seqlens_q.tolist() == [0, 1, 2]
    assert sub.block_tables.tolist() == [[3, 4], [9, 2]]
    assert sub.positions.tolist() == [4, 5] and sub.slot_mapping.tolist() == meta.slot_mapping[[8, 1]].tolist()


def test_attention_from_chosen_rows_equals_those_rows_of_the_full_step() -> None:
    torch.manual_seed(0)
    num_heads, num_kv_heads, head_dim, bs = 4, 2, 8, 4
    kv_layer = torch.zeros(12, 2, bs, num_kv_heads, head_dim)
    # sequence 0 has 4 cached tokens and 3 new ones; sequence 1 is a 5-token fresh prefill
    prior = build_metadata([4], [4], [[9]], bs, "cpu")
    torch_backend.store_kv(kv_layer, torch.randn(4, num_kv_heads, head_dim), torch.randn(4, num_kv_heads, head_dim), prior)
    meta = build_metadata([3, 5], [7, 5], [[9, 2], [3, 4]], bs, "cpu", sample_rows=[7, 2, 0])
    q = torch.randn(8, num_heads, head_dim)
    torch_backend.store_kv(kv_layer, torch.randn(8, num_kv_heads, head_dim), torch.randn(8, num_kv_heads, head_dim), meta)
    full = torch_backend.forward(q, kv_layer, meta)
    rows = torch.tensor([7, 2, 0])
    part = torch_backend.forward(q[rows], kv_layer, rows_metadata(meta, rows))
    torch.testing.assert_close(part, full[rows], atol=1e-6, rtol=1e-5)
