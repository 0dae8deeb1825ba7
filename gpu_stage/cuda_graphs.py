"""CudaGraphRunner: CUDA graphs that remove the launch overhead of small steps.

One graph per decode batch bucket (1, 2, 4, 8, 16, 24, 32, 48, 64, ... up to max_num_seqs), one per
single-sequence prefill token bucket (32, 64, 128, 256 by default: a 128-token prefill is ~350
launches, which eager Python cannot issue inside the GPU time), and one per (tokens, sequences)
bucket of mixed steps, a prefill chunk beside running decodes (MIXED_TOKEN_BUCKETS x
MIXED_SEQ_BUCKETS), and with speculation of k tokens one per verification bucket (verify_buckets:
decode buckets of rows carrying up to k drafts, b * (k + 1) tokens, logits for every one), and for
a draft model one per catch-up bucket (catch_up_tokens: decode buckets of rows of up to n tokens,
the draft's first forward of a step, which feeds a verifying row's input beside the last guess whose
KV the draft lacks after a full acceptance). An eager step costs tens of milliseconds of host time
whatever its size, so below ~1,000 tokens every eager step waits on the host; above, the GPU's own
time hides it. The general attention kernel's grid depends on (tokens, sequences) only, so one
graph serves every mix that fits its bucket. Captured at start-up, largest first,
in one shared memory pool (a graph's activations are dead once its replay is consumed, so all graphs
can share them). Every graph reads its inputs from the StepInputs device buffer at the offsets of
its GraphShape; `replay` stages the step padded to that shape (one H2D copy) and replays.

Padded rows are computed and ignored: decode pads are one-token sequences on the null block 0;
prefill pad tokens belong to no sequence and store nothing; a mixed shape has both, and so has a
verification shape (a row with fewer than k drafts leaves its spare tokens to the pad tokens after
the real rows: the general kernel reads each sequence's length from cu_seqlens on the device, and
the pads' logits rows are never sampled). The decode split count of a graph is
chosen for its bucket and the longest context (`max_model_len`), so a replay serves any length.
Graphs need the Triton backend: the torch backend plans with host lists and makes H2D copies.
"""
from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass
from typing import Sequence

import torch

from gpu_stage.graph_capture import capturing, gc_frozen
from gpu_stage.kv.cache import KvCache
from gpu_stage.model.interface import CausalLM
from gpu_stage.step_inputs import StagedStep, StepInputs, forward_step
from gpu_stage.step_layout import Chunk, GraphShape
from stages.messages import ScheduledChunk

log = logging.getLogger("ttft.gpu")

DECODE_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)
PREFILL_BUCKETS = (32, 64, 128, 256)
MIXED_TOKEN_BUCKETS = (256, 384, 512, 640, 768, 896, 1024)
# Few: a missing sequence costs one padded token, and each graph keeps logits [sequences, vocab].
MIXED_SEQ_BUCKETS = (8, 32)
# Verification graphs stop at this many tokens (b * (k + 1)): a larger verifying step runs eagerly.
# Their logits are [tokens, vocab] float32 (all of them sampled), written into one buffer that
# every verification graph shares (at 640 x 128,256: 328 MB), so the bucket count costs no memory.
VERIFY_MAX_TOKENS = 640


def decode_buckets(max_num_seqs: int) -> list[int]:
    return sorted({b for b in DECODE_BUCKETS if b < max_num_seqs} | {max_num_seqs})


def verify_buckets(max_num_seqs: int, max_num_tokens: int, k: int, max_tokens: int = VERIFY_MAX_TOKENS) -> list[int]:
    """The sequence counts of the verification graphs for k drafts per row: the decode buckets
    whose b * (k + 1) tokens fit the step budget and `max_tokens` (none when k is 0)."""
    if k <= 0:
        return []
    return [b for b in decode_buckets(max_num_seqs) if b * (k + 1) <= min(max_num_tokens, max_tokens)]


def verify_reserve_bytes(max_num_seqs: int, max_num_tokens: int, k: int, vocab_size: int) -> int:
    """Memory the verification graphs add to the graph pool: the shared logits buffer [T, vocab]
    float32 and, inside the pool, the largest graph's own logits (bf16 and float32) before the copy."""
    sizes = verify_buckets(max_num_seqs, max_num_tokens, k)
    return max(sizes, default=0) * (k + 1) * vocab_size * (4 + 6)


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    logits: torch.Tensor  # [S, vocab] float32, written by each replay
    staged: StagedStep  # the capture's inputs and plan (its workspace must stay alive)


class CudaGraphRunner:
    def __init__(self, model: CausalLM, kv_cache: KvCache, inputs: StepInputs, max_num_seqs: int,
                 max_num_tokens: int, max_model_len: int, prefill_buckets: Sequence[int] = PREFILL_BUCKETS,
                 mixed_token_buckets: Sequence[int] = MIXED_TOKEN_BUCKETS,
                 mixed_seq_buckets: Sequence[int] = MIXED_SEQ_BUCKETS, verify_tokens: int = 0,
                 verify_max_tokens: int = VERIFY_MAX_TOKENS, catch_up_tokens: int = 0) -> None:
        """`verify_tokens`: the speculation's k (0: no verification graphs). `catch_up_tokens`: a
        draft model's catch-up graphs, rows of up to this many tokens (0 or 1: none; a row of one
        token takes the decode graph)."""
        self.model, self.kv_cache, self.inputs = model, kv_cache, inputs
        self.max_model_len = max_model_len
        self.decode_sizes = decode_buckets(max_num_seqs)
        self.prefill_sizes = sorted(b for b in prefill_buckets if b <= min(max_num_tokens, max_model_len))
        # (tokens, sequences), smallest first: a step takes the first it fits
        self.mixed_sizes = sorted((t, s) for t in mixed_token_buckets for s in mixed_seq_buckets
                                  if s < t <= max_num_tokens and s <= max_num_seqs)
        self.verify_k = verify_tokens
        self.verify_sizes = verify_buckets(max_num_seqs, max_num_tokens, verify_tokens, verify_max_tokens)
        self.verify_logits: torch.Tensor | None = None  # [T_max, vocab] float32, shared (see VERIFY_MAX_TOKENS)
        self.catch_up_tokens = catch_up_tokens
        self.catch_up_sizes = ([b for b in self.decode_sizes if b * catch_up_tokens <= max_num_tokens]
                               if catch_up_tokens > 1 else [])
        self.catch_up_logits: torch.Tensor | None = None  # [B_max, vocab] float32, shared like verify_logits
        self.graphs: dict[GraphShape, _Graph] = {}
        self.pool = None
        self.pool_bytes = 0

    def shapes(self) -> list[GraphShape]:
        width = self.inputs.max_blocks_per_seq
        cap = width * self.inputs.block_size  # the most tokens one sequence can hold
        return ([GraphShape(b, b, width, True) for b in self.decode_sizes]
                + [GraphShape(t, 1, width, False) for t in self.prefill_sizes if t <= cap]
                + [GraphShape(t, s, width, False, mixed=True) for t, s in self.mixed_sizes if t <= s * cap]
                + [self._verify_shape(b) for b in self.verify_sizes]
                + [self._catch_up_shape(b) for b in self.catch_up_sizes])

    def _verify_shape(self, num_seqs: int) -> GraphShape:
        return GraphShape(num_seqs * (self.verify_k + 1), num_seqs, self.inputs.max_blocks_per_seq, False,
                          mixed=True, verify=True)

    def _catch_up_shape(self, num_seqs: int) -> GraphShape:
        return GraphShape(num_seqs * self.catch_up_tokens, num_seqs, self.inputs.max_blocks_per_seq, False,
                          mixed=True, catch_up=True)

    def capture(self) -> None:
        """Capture every shape, largest first, into one pool. Compiles kernels on the way."""
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        reserved0 = torch.cuda.memory_reserved()
        self.pool = torch.cuda.graph_pool_handle()
        self._capture(self.shapes())
        torch.cuda.synchronize()
        self.pool_bytes = torch.cuda.memory_reserved() - reserved0
        log.info("captured %d CUDA graphs (decode %s, prefill %s, mixed %s%s) in %.1f s, pool %.0f MiB",
                 len(self.graphs), self.decode_sizes, self.prefill_sizes, self.mixed_sizes,
                 (f", verify k={self.verify_k} {self.verify_sizes}" if self.verify_sizes else "")
                 + (f", catch-up {self.catch_up_tokens} {self.catch_up_sizes}" if self.catch_up_sizes else ""),
                 time.perf_counter() - t0, self.pool_bytes / 2**20)

    def capture_verify(self, k: int, sizes: Sequence[int]) -> None:
        """Replace the verification graphs by those of k drafts per row at these sequence counts
        (bench/spec_gpu.py's sweep over k; a server captures its own k at start-up, never this)."""
        for shape in [s for s in self.graphs if s.verify]:
            del self.graphs[shape]
        self.verify_k, self.verify_sizes, self.verify_logits = k, sorted(sizes), None
        self._capture([self._verify_shape(b) for b in self.verify_sizes])
        torch.cuda.synchronize()

    def _capture(self, shapes: Sequence[GraphShape]) -> None:
        with gc_frozen():  # gpu_stage/graph_capture.py: why
            self._capture_each(shapes)

    def _capture_each(self, shapes: Sequence[GraphShape]) -> None:
        for shape in sorted(shapes, key=lambda s: (s.num_tokens, s.decode), reverse=True):
            staged = self.inputs.stage(_dummy_chunks(shape, self.kv_cache.block_size), shape=shape,
                                       max_seq_len_hint=self.max_model_len)
            eager = self._forward(staged)  # compile and plan outside the capture
            if shape.verify and self.verify_logits is None:  # the largest verification shape comes first
                self.verify_logits = eager.new_empty(eager.shape)
            if shape.catch_up and self.catch_up_logits is None:  # so does the largest catch-up shape
                self.catch_up_logits = eager.new_empty(eager.shape)
            del eager
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with capturing(graph, self.pool):
                logits = self._forward(staged)
                if shape.verify:  # into the shared buffer: this graph's own logits die with the capture
                    logits = self.verify_logits[: shape.num_tokens].copy_(logits)
                elif shape.catch_up:
                    logits = self.catch_up_logits[: shape.num_seqs].copy_(logits)
            self.graphs[shape] = _Graph(graph, logits, staged)

    def shape_for(self, chunks: Sequence[Chunk]) -> GraphShape | None:
        """The smallest captured shape this step fits, or None (run it eagerly)."""
        num_seqs = len(chunks)
        width = self.inputs.max_blocks_per_seq
        if any(c.num_draft for c in chunks):  # verifying rows: logits at several positions per sequence
            return self._verify_shape_for(chunks)
        if all(len(c.token_ids) == 1 for c in chunks):
            i = bisect.bisect_left(self.decode_sizes, num_seqs)
            if i < len(self.decode_sizes):
                b = self.decode_sizes[i]
                return GraphShape(b, b, width, True)
        if self.catch_up_sizes and all(len(c.token_ids) <= self.catch_up_tokens for c in chunks):
            i = bisect.bisect_left(self.catch_up_sizes, num_seqs)  # before prefill's: its smallest is 32 tokens
            if i < len(self.catch_up_sizes):
                return self._catch_up_shape(self.catch_up_sizes[i])
        if num_seqs == 1:
            i = bisect.bisect_left(self.prefill_sizes, len(chunks[0].token_ids))
            if i < len(self.prefill_sizes):
                return GraphShape(self.prefill_sizes[i], 1, width, False)
        if self.mixed_sizes:
            num_tokens = sum(len(c.token_ids) for c in chunks)
            for t, s in self.mixed_sizes:  # each missing sequence takes one of the spare tokens
                if s >= num_seqs and t - num_tokens >= s - num_seqs:
                    return GraphShape(t, s, width, False, mixed=True)
        return None

    def _verify_shape_for(self, chunks: Sequence[Chunk]) -> GraphShape | None:
        """A verification shape when every row has at most k + 1 tokens (decodes and verifying rows,
        nothing longer) and the rows fit a bucket; else None (eager: prefill chunks beside
        verifying rows run eagerly, as do more rows than the largest bucket)."""
        if any(len(c.token_ids) > self.verify_k + 1 for c in chunks):
            return None
        i = bisect.bisect_left(self.verify_sizes, len(chunks))
        return self._verify_shape(self.verify_sizes[i]) if i < len(self.verify_sizes) else None

    def replay(self, shape: GraphShape) -> torch.Tensor:
        """Replay after the step was staged with `shape` -> the graph's logits [S, vocab] (valid until
        the next replay)."""
        entry = self.graphs[shape]
        entry.graph.replay()
        return entry.logits

    def _forward(self, staged: StagedStep) -> torch.Tensor:
        return forward_step(self.model, staged, self.kv_cache)


def _dummy_chunks(shape: GraphShape, block_size: int) -> list[ScheduledChunk]:
    """Inputs to capture with: tokens 0 on the null block (the values do not matter, the addresses do)."""
    if shape.decode:
        return [ScheduledChunk(f"pad{i}", [0], 0, [0], True) for i in range(shape.num_seqs)]
    if shape.verify:  # every row k + 1 tokens (k drafts), all of them sampled
        n = shape.num_tokens // shape.num_seqs
        return [ScheduledChunk(f"pad{i}", [0] * n, 0, [0] * -(-n // block_size), True, n - 1)
                for i in range(shape.num_seqs)]
    # mixed: prefills beside decodes, as few prefills as fit the block table (a budget past
    # max_model_len needs several: no sequence may span more than `width` blocks)
    cap = shape.width * block_size
    num_prefills = max(1, -(-(shape.num_tokens - shape.num_seqs) // max(1, cap - 1)))
    assert num_prefills <= shape.num_seqs, f"no step fills {shape}"
    total = shape.num_tokens - (shape.num_seqs - num_prefills)
    sizes = [total // num_prefills + (i < total % num_prefills) for i in range(num_prefills)]
    return ([ScheduledChunk(f"pad{i}", [0] * n, 0, [0] * -(-n // block_size), True) for i, n in enumerate(sizes)]
            + [ScheduledChunk(f"pad{i}", [0], 0, [0], True) for i in range(num_prefills, shape.num_seqs)])
