"""A CudaGraphRunner's graph families on CPU (the CUDA calls stubbed, the forward a stand-in): a
family's shapes are captured with the runner's own, largest first, from its own dummy step; its
graphs share one logits buffer sized by its largest; a step it owns takes its shape or runs eagerly,
any other step is offered to it after the decode graphs and before prefill's; capture_family
replaces a family's graphs and buffer."""
from __future__ import annotations

import bisect
import contextlib
from types import SimpleNamespace

import pytest
import torch

import gpu_stage.cuda_graphs as cuda_graphs
from gpu_stage.cuda_graphs import CudaGraphRunner
from gpu_stage.graph_families import GraphBuckets
from gpu_stage.step_inputs import StagedStep, StepInputs
from gpu_stage.step_layout import GraphShape
from stages.messages import ScheduledChunk

BS = 4
VOCAB = 3


class Pairs:
    """Rows of up to two tokens, every token a logits row; it owns the steps of requests named own*."""

    name = "pairs"

    def __init__(self, buckets: GraphBuckets, sizes: list[int] | None = None) -> None:
        self.width = buckets.width
        self.sizes = sizes if sizes is not None else [b for b in buckets.decode_sizes
                                                      if 2 * b <= buckets.max_num_tokens]
        self.dummies: list[GraphShape] = []

    def shapes(self) -> list[GraphShape]:
        return [self.shape(b) for b in self.sizes]

    def shape(self, num_seqs: int) -> GraphShape:
        return GraphShape(2 * num_seqs, num_seqs, self.width, False, mixed=True, family=self.name, all_logits=True)

    def owns(self, chunks) -> bool:
        return any(c.request_id.startswith("own") for c in chunks)

    def shape_for(self, chunks) -> GraphShape | None:
        if any(len(c.token_ids) > 2 for c in chunks):
            return None
        i = bisect.bisect_left(self.sizes, len(chunks))
        return self.shape(self.sizes[i]) if i < len(self.sizes) else None

    def dummy_chunks(self, shape: GraphShape, block_size: int) -> list[ScheduledChunk]:
        self.dummies.append(shape)
        return [ScheduledChunk(f"pad{i}", [0, 0], 0, [0], True) for i in range(shape.num_seqs)]

    def reserve_bytes(self, vocab_size: int) -> int:
        return 0

    def describe(self) -> str:
        return f"pairs {self.sizes}"


class StubbedRunner(CudaGraphRunner):
    """The forward: logits [rows, VOCAB] filled with the capture's index, its calls recorded."""

    def __init__(self, **kw) -> None:
        inputs = StepInputs(16, 4, 10, BS, "cpu")
        super().__init__(None, SimpleNamespace(block_size=BS), inputs, 4, 16, 40, prefill_buckets=(8,),
                         mixed_token_buckets=(), **kw)
        self.forwards: list[int] = []

    def _forward(self, staged: StagedStep) -> torch.Tensor:
        self.forwards.append(len(staged.logits_indices))
        return torch.full((len(staged.logits_indices), VOCAB), float(len(self.forwards)))


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(cuda_graphs, "capturing", lambda graph, pool: contextlib.nullcontext())
    for name, stub in (("synchronize", lambda *a: None), ("CUDAGraph", object), ("graph_pool_handle", object),
                       ("memory_reserved", lambda *a: 0)):
        monkeypatch.setattr(torch.cuda, name, stub)


def test_family_shapes_are_captured_with_the_runners_largest_first_into_one_shared_buffer(no_cuda) -> None:
    graphs = StubbedRunner(families=[Pairs])
    width = graphs.inputs.max_blocks_per_seq
    pairs = graphs.families["pairs"]
    graphs.capture()
    order = list(graphs.graphs)
    assert order == [GraphShape(8, 1, width, False), pairs.shape(4), GraphShape(4, 4, width, True), pairs.shape(2),
                     GraphShape(2, 2, width, True), pairs.shape(1), GraphShape(1, 1, width, True)]
    assert pairs.dummies == [pairs.shape(4), pairs.shape(2), pairs.shape(1)]  # its own dummy steps
    shared = graphs.family_logits["pairs"]
    assert shared.shape == (8, VOCAB)  # its largest shape's rows: every token
    for b in (4, 2, 1):
        logits = graphs.graphs[pairs.shape(b)].logits
        assert logits.data_ptr() == shared.data_ptr() and logits.shape == (2 * b, VOCAB)
    own = graphs.graphs[GraphShape(4, 4, width, True)].logits
    assert own.data_ptr() != shared.data_ptr()  # the runner's graphs keep their own


def test_shape_choice_with_a_family() -> None:
    graphs = StubbedRunner(families=[Pairs])
    width = graphs.inputs.max_blocks_per_seq
    pairs = graphs.families["pairs"]

    def chunk(rid: str, n: int) -> ScheduledChunk:
        return ScheduledChunk(rid, [5] * n, 6, [1, 2, 3], True)

    assert graphs.shape_for([chunk("own", 1), chunk("b", 2)]) == pairs.shape(2)
    assert graphs.shape_for([chunk("own", 1)]) == pairs.shape(1)  # owned: not the decode graph
    assert graphs.shape_for([chunk("own", 5)]) is None  # owned and too long: eager, not prefill's
    assert graphs.shape_for([chunk("a", 1), chunk("b", 1)]) == GraphShape(2, 2, width, True)  # decode first
    assert graphs.shape_for([chunk("a", 2)]) == pairs.shape(1)  # then the family, before prefill's 8
    assert graphs.shape_for([chunk("a", 5)]) == GraphShape(8, 1, width, False)
    assert StubbedRunner().shape_for([chunk("a", 2)]) == GraphShape(8, 1, width, False)  # no family


def test_capture_family_replaces_its_graphs_and_buffer(no_cuda) -> None:
    graphs = StubbedRunner(families=[Pairs])
    graphs.capture()
    before = graphs.family_logits["pairs"]
    graphs.capture_family(lambda buckets: Pairs(buckets, sizes=[2]))
    pairs = graphs.families["pairs"]
    assert [s for s in graphs.graphs if s.family] == [pairs.shape(2)]
    assert graphs.family_logits["pairs"].shape == (4, VOCAB) and graphs.family_logits["pairs"] is not before
    assert len([s for s in graphs.graphs if not s.family]) == 4  # the runner's own stay
