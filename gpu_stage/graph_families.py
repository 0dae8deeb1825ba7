"""GraphFamily: a feature's own CUDA graph shapes, captured and replayed by the CudaGraphRunner
beside its decode, prefill and mixed graphs; none of the runner's code knows which feature it is
(speculative decoding's verification and its draft model's catch-up are two:
gpu_stage/spec/graph_shapes.py).

The runner makes each family from its buckets (a FamilyFactory called with GraphBuckets) when it
is built, so the family's shapes are captured with the runner's own, largest first, in the one
memory pool. Every shape of a family is a mixed GraphShape whose `family` is the family's name.

    family.shapes()                         its shapes, to capture
    family.owns(chunks)                     the step is the family's alone: one of its shapes or eager
    family.shape_for(chunks)                the smallest of its shapes the step fits, or None: asked
                                            of a step it owns, and of any other step after the
                                            decode graphs (before the prefill and mixed ones)
    family.dummy_chunks(shape, block_size)  the step to capture `shape` with; None: the runner's
                                            padding of a mixed step
    family.reserve_bytes(vocab_size)        memory its graphs add to the graph pool (start-up keeps
                                            it out of the KV pool)
    family.describe()                       its shapes for the capture's log line ("": none)

The graphs of one family write their logits into one buffer they share, sized by the family's
first capture (its largest shape: a family's logits rows grow with its shapes' tokens): a replay's
logits are valid until the next replay anyway, and each graph's own logits die with its capture.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from gpu_stage.step_layout import Chunk, GraphShape
from stages.messages import ScheduledChunk


@dataclass(frozen=True)
class GraphBuckets:
    """What a family sizes its shapes by: the runner's decode buckets (sequence counts), its step
    budget in tokens and its block-table width."""

    decode_sizes: tuple[int, ...]
    max_num_tokens: int
    width: int


class GraphFamily(Protocol):
    name: str  # its shapes' GraphShape.family: one family of a name per runner

    def shapes(self) -> list[GraphShape]: ...

    def owns(self, chunks: Sequence[Chunk]) -> bool: ...

    def shape_for(self, chunks: Sequence[Chunk]) -> GraphShape | None: ...

    def dummy_chunks(self, shape: GraphShape, block_size: int) -> list[ScheduledChunk] | None: ...

    def reserve_bytes(self, vocab_size: int) -> int: ...

    def describe(self) -> str: ...


FamilyFactory = Callable[[GraphBuckets], GraphFamily]
