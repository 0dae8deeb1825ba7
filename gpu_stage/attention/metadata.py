"""AttentionMetadata: what every attention layer of one step needs, built once per step.

The tokens of all sequences of a step are flattened into one dimension T (no padding). Sequence i
owns rows cu_seqlens_q[i]:cu_seqlens_q[i+1] of q; its new tokens sit at the absolute positions
seq_lens[i] - query_len .. seq_lens[i] - 1, and its earlier context is already in the paged cache.

`sampled` names the step's sampled rows (the model's logits_indices, in order) with what a
one-token query at each of them needs: the model's last layer attends from those rows only
(`rows_metadata`), since no other row of its output is ever read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class SampledRows:
    """Sampled row j of the step belongs to sequence seq_index[j] and sits at position seq_lens[j] - 1."""

    seq_index: torch.Tensor  # [S] int32
    seq_lens: torch.Tensor  # [S] int32: the context row j attends to, itself included
    cu_seqlens_q: torch.Tensor  # [S + 1] int32: 0, 1, .., S (one query each)
    seq_lens_host: list[int]


@dataclass
class AttentionMetadata:
    cu_seqlens_q: torch.Tensor  # [B + 1] int32: query start offsets into the flattened tokens
    seq_lens: torch.Tensor  # [B] int32: context length of each sequence, new tokens included
    block_tables: torch.Tensor  # [B, max_num_blocks] int32, padded with block 0 (never read unmasked)
    slot_mapping: torch.Tensor  # [T] int64 or int32: block_id * block_size + offset of each new token
    positions: torch.Tensor  # [T] int64 or int32: absolute position of each new token
    max_query_len: int
    max_seq_len: int
    block_size: int
    # Host copies of the per-sequence lengths, so backends can plan without a device sync.
    query_lens_host: list[int] = field(default_factory=list)
    seq_lens_host: list[int] = field(default_factory=list)
    # The slot of each new token split into (block, offset). Optional: build_metadata fills them,
    # StepInputs does not (backends derive what they need from slot_mapping).
    slot_blocks: torch.Tensor | None = None  # [T] int64
    slot_offsets: torch.Tensor | None = None  # [T] int64
    # Backend-private data computed once per step on first use and reused by every layer.
    backend_plan: Any = None
    # The K/V the current layer just stored (set by store_kv, read by forward of the same layer):
    # a fresh prefill attends to exactly these, so it needs no gather from the paged cache.
    fresh_kv: Any = None
    # Split count for split-K decode attention; None lets the backend choose from the batch. Set by
    # the CUDA graph runner so that a graph's split count depends on its batch bucket only.
    decode_num_splits: int | None = None
    # A CUDA graph's metadata: its plan must serve every step of its shape, so nothing may be
    # planned from this step's host lengths (the fresh-prefill SDPA path loops over them).
    static_shape: bool = False
    sampled: SampledRows | None = None
    # attention/long_backend.py's choice for this step, made on first use: a LongPlan, or False
    # when no chunk of the step is over a long context.
    long_plan: Any = None

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_host)

    @property
    def num_tokens(self) -> int:
        return int(self.slot_mapping.shape[0])


def rows_metadata(meta: AttentionMetadata, rows: torch.Tensor) -> AttentionMetadata:
    """Metadata for attending from `rows` of the step only (meta.sampled describes them), each a
    one-token query over its sequence's context up to itself: a decode-only step's metadata, whose
    K/V the full step has stored. A few gathers on the device, no host sync, so a CUDA graph
    captures it with the step."""
    sampled = meta.sampled
    assert sampled is not None and rows.shape[0] == sampled.seq_lens.shape[0]
    num_rows = rows.shape[0]
    return AttentionMetadata(
        cu_seqlens_q=sampled.cu_seqlens_q, seq_lens=sampled.seq_lens,
        block_tables=meta.block_tables.index_select(0, sampled.seq_index),
        slot_mapping=meta.slot_mapping.index_select(0, rows), positions=meta.positions.index_select(0, rows),
        max_query_len=1, max_seq_len=meta.max_seq_len, block_size=meta.block_size,
        query_lens_host=[1] * num_rows, seq_lens_host=list(sampled.seq_lens_host), static_shape=meta.static_shape,
    )


def locate_rows(rows: np.ndarray, cu_seqlens_q: np.ndarray, seq_lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows of a step's flattened tokens: (the sequence of each, its position + 1), from the
    step's query offsets [B + 1] and context lengths [B] (host arrays)."""
    rows = np.asarray(rows, np.int64)
    seq_index = np.searchsorted(cu_seqlens_q, rows, side="right") - 1
    assert len(rows) == 0 or (seq_index.min() >= 0 and seq_index.max() < len(seq_lens)), "row outside the step"
    return seq_index, np.asarray(seq_lens, np.int64)[seq_index] - (cu_seqlens_q[seq_index + 1] - 1 - rows)


def build_metadata(
    query_lens: list[int],
    seq_lens: list[int],
    block_tables: list[list[int]],
    block_size: int,
    device: torch.device | str,
    sample_rows: list[int] | None = None,
) -> AttentionMetadata:
    """Metadata for sequences computing `query_lens[i]` new tokens that end at `seq_lens[i]`.

    `block_tables[i]` must cover positions [0, seq_lens[i]). `sample_rows`: the rows the model
    will produce logits for (its logits_indices), so that its last layer computes only those.
    """
    num_seqs = len(query_lens)
    assert num_seqs == len(seq_lens) == len(block_tables) and num_seqs > 0
    for q_len, s_len, table in zip(query_lens, seq_lens, block_tables):
        assert 0 < q_len <= s_len, (q_len, s_len)
        assert len(table) * block_size >= s_len, (len(table), block_size, s_len)
    max_num_blocks = max(len(t) for t in block_tables)
    padded = [t + [0] * (max_num_blocks - len(t)) for t in block_tables]
    tables = torch.tensor(padded, dtype=torch.int64)  # [B, max_num_blocks]
    q_lens = torch.tensor(query_lens, dtype=torch.int64)  # [B]
    s_lens = torch.tensor(seq_lens, dtype=torch.int64)  # [B]
    cu = torch.zeros(num_seqs + 1, dtype=torch.int64)
    torch.cumsum(q_lens, 0, out=cu[1:])
    num_tokens = int(cu[-1])
    seq_of_token = torch.repeat_interleave(torch.arange(num_seqs), q_lens)  # [T]
    start = s_lens - q_lens  # [B]: first new position of each sequence
    positions = torch.arange(num_tokens) - cu[seq_of_token] + start[seq_of_token]  # [T]
    slot_blocks = tables[seq_of_token, positions // block_size]  # [T]
    slot_offsets = positions % block_size  # [T]
    slot_mapping = slot_blocks * block_size + slot_offsets  # [T]

    def dev(t: torch.Tensor, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return t.to(device=device, dtype=dtype)

    return AttentionMetadata(
        cu_seqlens_q=dev(cu, torch.int32),
        seq_lens=dev(s_lens, torch.int32),
        block_tables=dev(tables, torch.int32),
        slot_mapping=dev(slot_mapping),
        positions=dev(positions),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        block_size=block_size,
        query_lens_host=list(query_lens),
        seq_lens_host=list(seq_lens),
        slot_blocks=dev(slot_blocks),
        slot_offsets=dev(slot_offsets),
        sampled=None if sample_rows is None else _sampled_rows(sample_rows, cu.numpy(), seq_lens, device),
    )


def _sampled_rows(rows: list[int], cu_seqlens_q: np.ndarray, seq_lens: list[int], device) -> SampledRows:
    seq_index, lens = locate_rows(np.asarray(rows), cu_seqlens_q, np.asarray(seq_lens))

    def dev(values: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(values.astype(np.int32)).to(device)

    return SampledRows(dev(seq_index), dev(lens), dev(np.arange(len(rows) + 1)), lens.tolist())
