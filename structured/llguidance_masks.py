"""Bitmask rows filled by llguidance straight into torch tensors.

The same calls as `llguidance.torch`, whose import is avoided on purpose: it defines a
`torch.compile`d function at import time, which imports torch._dynamo and triton (seconds of a
server's start-up, and triton's own library compiled outside the interpreter in tests).
"""
from __future__ import annotations

import llguidance
import torch


def allocate_bitmask(batch: int, vocab_size: int) -> torch.Tensor:
    """A (batch, ceil(vocab/32)) int32 host tensor, every token allowed."""
    return torch.full((batch, (vocab_size + 31) // 32), -1, dtype=torch.int32)


def fill_row(matcher: llguidance.LLMatcher, bitmask: torch.Tensor, row: int) -> None:
    """`matcher`'s next-token mask into row `row` of a contiguous int32 host `bitmask`."""
    assert bitmask.dtype == torch.int32 and bitmask.is_cpu and bitmask.dim() == 2
    v = bitmask[row]
    assert v.is_contiguous()
    matcher.unsafe_compute_mask_ptr(v.data_ptr(), v.numel() * v.element_size())


def fill_rows_parallel(executor: llguidance.LLExecutor, matchers: list[tuple[llguidance.LLMatcher, int]],
                       bitmask: torch.Tensor) -> None:
    """Each (matcher, row)'s mask, filled on llguidance's own threads."""
    assert bitmask.dtype == torch.int32 and bitmask.is_cpu and bitmask.is_contiguous()
    batch, words = bitmask.shape
    executor.unsafe_compute_mask_ptr(matchers, bitmask.data_ptr(), words * 4, batch)
