"""Sliding-window masks for the torch reference backend (True = attend).

transformers' convention (masking_utils.sliding_window_overlay): a query at position p sees the
key at position k when k <= p (causal) and k > p - window, i.e. the `window` most recent keys,
its own included. The Triton kernels apply the same rule (and skip the key tiles wholly before it).
"""
from __future__ import annotations

import torch


def decode_window_mask(seq_lens: list[int], max_len: int, window: int, device: torch.device) -> torch.Tensor:
    """[Bd, 1, 1, Ld] for one query per sequence at position seq_lens[i] - 1 over keys 0..Ld-1
    (padded past each length, as the backend's gather)."""
    pos = torch.arange(max_len, device=device)[None, :]  # [1, Ld]
    lens = torch.tensor(seq_lens, device=device)[:, None]  # [Bd, 1]
    return ((pos < lens) & (pos >= lens - window))[:, None, None, :]


def prefill_window_mask(query_len: int, seq_len: int, window: int, device: torch.device) -> torch.Tensor:
    """[Tq, L] for the queries at positions seq_len - query_len .. seq_len - 1 over keys 0..L-1."""
    keys = torch.arange(seq_len, device=device)[None, :]  # [1, L]
    queries = torch.arange(seq_len - query_len, seq_len, device=device)[:, None]  # [Tq, 1]
    return (keys <= queries) & (keys > queries - window)
