"""Speculative decoding's CUDA graph shapes, handed to a CudaGraphRunner as its families
(gpu_stage/graph_families.py): the target's verification graphs and the draft model's catch-up graphs.

Verification (VerifyShapes, for k drafts per row): one graph per decode bucket b whose rows of up to
k + 1 tokens, b * (k + 1) in all, fit the step budget and VERIFY_MAX_TOKENS; logits for every token.
A step with drafts (ScheduledChunk.num_draft) is the family's: it takes the smallest bucket that
holds its rows when none is longer than k + 1 tokens (decodes and verifying rows), else runs eagerly
(a prefill chunk beside verifying rows, more rows than the largest bucket). A row with fewer than k
drafts leaves its spare tokens to the pad tokens after the real rows, whose logits rows are never
sampled.

Catch-up (CatchUpShapes, for the draft model's runner): one graph per decode bucket b whose rows of
up to n tokens fit the step budget, for the draft's first forward of a step: a verifying row's input
beside the last guess whose KV the draft lacks after a full acceptance. Padded and sampled as a
mixed step; tried after the decode graphs (a row of one token each takes those), before prefill's.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence

from gpu_stage.graph_families import FamilyFactory, GraphBuckets
from gpu_stage.step_layout import Chunk, GraphShape
from stages.messages import ScheduledChunk

VERIFY = "verify"
CATCH_UP = "catch_up"
# Verification graphs stop at this many tokens (b * (k + 1)): a larger verifying step runs eagerly.
# Their logits are [tokens, vocab] float32 (all of them sampled), written into one buffer that
# every verification graph shares (at 640 x 128,256: 328 MB), so the bucket count costs no memory.
VERIFY_MAX_TOKENS = 640


def verify_shape(num_tokens: int, num_seqs: int, width: int) -> GraphShape:
    """A verification graph's shape: a mixed shape whose every token is a logits row."""
    return GraphShape(num_tokens, num_seqs, width, False, mixed=True, family=VERIFY, all_logits=True)


def catch_up_shape(num_tokens: int, num_seqs: int, width: int) -> GraphShape:
    """A catch-up graph's shape: a mixed shape of the catch-up family (its logits buffer its own)."""
    return GraphShape(num_tokens, num_seqs, width, False, mixed=True, family=CATCH_UP)


def _fitting(decode_sizes: Sequence[int], tokens_per_row: int, max_tokens: int) -> list[int]:
    """The decode buckets whose rows of `tokens_per_row` tokens fit `max_tokens`."""
    return [b for b in decode_sizes if b * tokens_per_row <= max_tokens]


@dataclass
class _RowBuckets:
    """Graphs of `sizes` rows (sequence counts) of up to `row_tokens` tokens each."""

    width: int  # block-table columns
    row_tokens: int
    sizes: list[int]

    def shapes(self) -> list[GraphShape]:
        return [self.shape(b) for b in self.sizes]

    def shape(self, num_seqs: int) -> GraphShape:
        raise NotImplementedError

    def fit(self, chunks: Sequence[Chunk]) -> GraphShape | None:
        """The smallest bucket that holds these rows, none longer than row_tokens; else None."""
        if any(len(c.token_ids) > self.row_tokens for c in chunks):
            return None
        i = bisect.bisect_left(self.sizes, len(chunks))
        return self.shape(self.sizes[i]) if i < len(self.sizes) else None


class VerifyShapes(_RowBuckets):
    """The verification graphs of k drafts per row (rows of k + 1 tokens)."""

    name = VERIFY

    @property
    def k(self) -> int:
        return self.row_tokens - 1

    def shape(self, num_seqs: int) -> GraphShape:
        return verify_shape(num_seqs * self.row_tokens, num_seqs, self.width)

    def owns(self, chunks: Sequence[Chunk]) -> bool:
        """Verifying rows: logits at several positions per sequence, which only these graphs compute."""
        return any(c.num_draft for c in chunks)

    def shape_for(self, chunks: Sequence[Chunk]) -> GraphShape | None:
        return self.fit(chunks) if self.owns(chunks) else None

    def dummy_chunks(self, shape: GraphShape, block_size: int) -> list[ScheduledChunk]:
        """Every row k + 1 tokens (k drafts), all of them sampled."""
        n = shape.num_tokens // shape.num_seqs
        return [ScheduledChunk(f"pad{i}", [0] * n, 0, [0] * -(-n // block_size), True, n - 1)
                for i in range(shape.num_seqs)]

    def reserve_bytes(self, vocab_size: int) -> int:
        """The shared logits buffer [T, vocab] float32 and, inside the pool, the largest graph's own
        logits (bf16 and float32) before the copy."""
        return max(self.sizes, default=0) * self.row_tokens * vocab_size * (4 + 6)

    def describe(self) -> str:
        return f"verify k={self.k} {self.sizes}" if self.sizes else ""


def verify_graphs(k: int, sizes: Sequence[int] | None = None) -> FamilyFactory:
    """The verification family for k drafts per row: at the decode buckets whose b * (k + 1) tokens
    fit the step budget and VERIFY_MAX_TOKENS (none when k is 0), or at exactly `sizes` (a bench's
    sweep over k)."""

    def make(buckets: GraphBuckets) -> VerifyShapes:
        if sizes is not None:
            chosen = sorted(sizes)
        elif k > 0:
            chosen = _fitting(buckets.decode_sizes, k + 1, min(buckets.max_num_tokens, VERIFY_MAX_TOKENS))
        else:
            chosen = []
        return VerifyShapes(buckets.width, k + 1, chosen)

    return make


class CatchUpShapes(_RowBuckets):
    """The draft model's catch-up graphs: rows of up to row_tokens tokens."""

    name = CATCH_UP

    def shape(self, num_seqs: int) -> GraphShape:
        return catch_up_shape(num_seqs * self.row_tokens, num_seqs, self.width)

    def owns(self, chunks: Sequence[Chunk]) -> bool:
        return False

    def shape_for(self, chunks: Sequence[Chunk]) -> GraphShape | None:
        return self.fit(chunks)

    def dummy_chunks(self, shape: GraphShape, block_size: int) -> None:
        return None  # padded as a mixed step

    def reserve_bytes(self, vocab_size: int) -> int:
        return 0  # the draft's pools are sized with the target's, by no memory profile of their own

    def describe(self) -> str:
        return f"catch-up {self.row_tokens} {self.sizes}" if self.sizes else ""


def catch_up_graphs(tokens: int) -> FamilyFactory:
    """The catch-up family for rows of up to `tokens` tokens (0 or 1: none; a row of one token
    takes the decode graph)."""

    def make(buckets: GraphBuckets) -> CatchUpShapes:
        sizes = _fitting(buckets.decode_sizes, tokens, buckets.max_num_tokens) if tokens > 1 else []
        return CatchUpShapes(buckets.width, tokens, sizes)

    return make
