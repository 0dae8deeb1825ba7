"""CudaGraphRunner: CUDA graphs that remove the launch overhead of small steps.

One graph per decode batch bucket (1, 2, 4, 8, 16, 24, 32, 48, 64, ... up to max_num_seqs), one per
single-sequence prefill token bucket (32, 64, 128, 256 by default: a 128-token prefill is ~350
launches, which eager Python cannot issue inside the GPU time), and one per (tokens, sequences)
bucket of mixed steps, a prefill chunk beside running decodes (MIXED_TOKEN_BUCKETS x
MIXED_SEQ_BUCKETS), and the shapes of the families a feature hands it (graph_families.py), each
captured and replayed as the runner's own. An eager step costs tens of milliseconds of host time
whatever its size, so below ~1,000 tokens every eager step waits on the host; above, the GPU's own
time hides it. The general attention kernel's grid depends on (tokens, sequences) only, so one
graph serves every mix that fits its bucket. Captured at start-up, largest first,
in one shared memory pool (a graph's activations are dead once its replay is consumed, so all graphs
can share them). Every graph reads its inputs from the StepInputs device buffer at the offsets of
its GraphShape; `replay` stages the step padded to that shape (one H2D copy) and replays.

Padded rows are computed and ignored: decode pads are one-token sequences on the null block 0;
prefill pad tokens belong to no sequence and store nothing; a mixed shape has both, and so has a
family's shape (the general kernel reads each sequence's length from cu_seqlens on the device, and
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
from gpu_stage.graph_families import FamilyFactory, GraphBuckets, GraphFamily
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


def decode_buckets(max_num_seqs: int) -> list[int]:
    return sorted({b for b in DECODE_BUCKETS if b < max_num_seqs} | {max_num_seqs})


def graph_buckets(max_num_seqs: int, max_num_tokens: int, width: int) -> GraphBuckets:
    """What a runner of these limits hands its families (`width`: its block-table columns)."""
    return GraphBuckets(tuple(decode_buckets(max_num_seqs)), max_num_tokens, width)


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    logits: torch.Tensor  # [S, vocab] float32, written by each replay
    staged: StagedStep  # the capture's inputs and plan (its workspace must stay alive)


class CudaGraphRunner:
    def __init__(self, model: CausalLM, kv_cache: KvCache, inputs: StepInputs, max_num_seqs: int,
                 max_num_tokens: int, max_model_len: int, prefill_buckets: Sequence[int] = PREFILL_BUCKETS,
                 mixed_token_buckets: Sequence[int] = MIXED_TOKEN_BUCKETS,
                 mixed_seq_buckets: Sequence[int] = MIXED_SEQ_BUCKETS,
                 families: Sequence[FamilyFactory] = ()) -> None:
        """`families`: the shapes of a feature's own, made for this runner's buckets (graph_families.py)."""
        self.model, self.kv_cache, self.inputs = model, kv_cache, inputs
        self.max_model_len = max_model_len
        self.buckets = graph_buckets(max_num_seqs, max_num_tokens, inputs.max_blocks_per_seq)
        self.decode_sizes = list(self.buckets.decode_sizes)
        self.prefill_sizes = sorted(b for b in prefill_buckets if b <= min(max_num_tokens, max_model_len))
        # (tokens, sequences), smallest first: a step takes the first it fits
        self.mixed_sizes = sorted((t, s) for t in mixed_token_buckets for s in mixed_seq_buckets
                                  if s < t <= max_num_tokens and s <= max_num_seqs)
        self.families: dict[str, GraphFamily] = {}
        for make in families:
            family = make(self.buckets)
            self.families[family.name] = family
        self.family_logits: dict[str, torch.Tensor] = {}  # family name -> the logits its graphs share
        self.graphs: dict[GraphShape, _Graph] = {}
        self.pool = None
        self.pool_bytes = 0

    def shapes(self) -> list[GraphShape]:
        width = self.inputs.max_blocks_per_seq
        cap = width * self.inputs.block_size  # the most tokens one sequence can hold
        return ([GraphShape(b, b, width, True) for b in self.decode_sizes]
                + [GraphShape(t, 1, width, False) for t in self.prefill_sizes if t <= cap]
                + [GraphShape(t, s, width, False, mixed=True) for t, s in self.mixed_sizes if t <= s * cap]
                + [shape for family in self.families.values() for shape in family.shapes()])

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
                 "".join(f", {text}" for family in self.families.values() if (text := family.describe())),
                 time.perf_counter() - t0, self.pool_bytes / 2**20)

    def capture_family(self, make: FamilyFactory) -> None:
        """Capture a family's graphs in place of those of the family of its name, if any (a bench's
        sweep over a family's parameter; a server captures its families at start-up, never this)."""
        family = make(self.buckets)
        for shape in [s for s in self.graphs if s.family == family.name]:
            del self.graphs[shape]
        self.families[family.name] = family
        self.family_logits.pop(family.name, None)
        self._capture(family.shapes())
        torch.cuda.synchronize()

    def _capture(self, shapes: Sequence[GraphShape]) -> None:
        with gc_frozen():  # gpu_stage/graph_capture.py: why
            self._capture_each(shapes)

    def _capture_each(self, shapes: Sequence[GraphShape]) -> None:
        for shape in sorted(shapes, key=lambda s: (s.num_tokens, s.decode), reverse=True):
            family = self.families.get(shape.family) if shape.family else None
            chunks = family.dummy_chunks(shape, self.kv_cache.block_size) if family is not None else None
            if chunks is None:
                chunks = _dummy_chunks(shape, self.kv_cache.block_size)
            staged = self.inputs.stage(chunks, shape=shape, max_seq_len_hint=self.max_model_len)
            eager = self._forward(staged)  # compile and plan outside the capture
            if family is not None and family.name not in self.family_logits:  # its largest shape comes first
                self.family_logits[family.name] = eager.new_empty(eager.shape)
            del eager
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with capturing(graph, self.pool):
                logits = self._forward(staged)
                if family is not None:  # into the shared buffer: this graph's own logits die with the capture
                    logits = self.family_logits[family.name][: logits.shape[0]].copy_(logits)
            self.graphs[shape] = _Graph(graph, logits, staged)

    def shape_for(self, chunks: Sequence[Chunk]) -> GraphShape | None:
        """The smallest captured shape this step fits, or None (run it eagerly)."""
        num_seqs = len(chunks)
        width = self.inputs.max_blocks_per_seq
        for family in self.families.values():
            if family.owns(chunks):
                return family.shape_for(chunks)
        if all(len(c.token_ids) == 1 for c in chunks):
            i = bisect.bisect_left(self.decode_sizes, num_seqs)
            if i < len(self.decode_sizes):
                b = self.decode_sizes[i]
                return GraphShape(b, b, width, True)
        for family in self.families.values():  # before prefill's: its smallest is 32 tokens
            if (shape := family.shape_for(chunks)) is not None:
                return shape
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
    # mixed: prefills beside decodes, as few prefills as fit the block table (a budget past
    # max_model_len needs several: no sequence may span more than `width` blocks)
    cap = shape.width * block_size
    num_prefills = max(1, -(-(shape.num_tokens - shape.num_seqs) // max(1, cap - 1)))
    assert num_prefills <= shape.num_seqs, f"no step fills {shape}"
    total = shape.num_tokens - (shape.num_seqs - num_prefills)
    sizes = [total // num_prefills + (i < total % num_prefills) for i in range(num_prefills)]
    return ([ScheduledChunk(f"pad{i}", [0] * n, 0, [0] * -(-n // block_size), True) for i, n in enumerate(sizes)]
            + [ScheduledChunk(f"pad{i}", [0], 0, [0], True) for i in range(num_prefills, shape.num_seqs)])
