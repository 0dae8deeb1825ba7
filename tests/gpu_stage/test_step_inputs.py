"""StepInputs: packed views equal build_metadata's; graph shapes pad as documented and keep their
offsets; sampling parameters survive the float-bits packing."""
from __future__ import annotations

import torch

from gpu_stage.attention.metadata import build_metadata
from gpu_stage.sampling.rows import SamplingRow, SamplingTensors
from gpu_stage.step_inputs import StepInputs
from gpu_stage.step_layout import GraphShape, make_layout
from stages.messages import ScheduledChunk
from stages.sampling import SamplingParams

BS = 4


def _chunks() -> list[ScheduledChunk]:
    return [
        ScheduledChunk("a", [5, 6, 7], 4, [9, 2, 8], True),  # positions 4..6, one spare block at the end
        ScheduledChunk("b", [11], 0, [5], True),
        ScheduledChunk("c", [1, 2, 3, 4, 5], 0, [3, 4], False),  # partial prefill: not sampled
    ]


def test_views_equal_build_metadata() -> None:
    inputs = StepInputs(64, 8, 16, BS, "cpu")
    staged = inputs.stage(_chunks())
    ref = build_metadata([3, 1, 5], [7, 1, 5], [[9, 2], [5], [3, 4]], BS, "cpu")
    meta = staged.meta
    assert staged.input_ids.tolist() == [5, 6, 7, 11, 1, 2, 3, 4, 5]
    assert staged.positions.tolist() == ref.positions.tolist()
    assert meta.slot_mapping.tolist() == ref.slot_mapping.tolist()
    assert meta.cu_seqlens_q.tolist() == ref.cu_seqlens_q.tolist()
    assert meta.seq_lens.tolist() == [7, 1, 5]
    # the spare block is not staged; columns pad to a multiple of 16 (one kernel specialisation)
    assert meta.block_tables.shape == (3, 16) and not meta.block_tables[:, 2:].any()
    assert meta.block_tables[:, :2].tolist() == ref.block_tables.tolist()
    assert not meta.static_shape  # an eager step may be planned from its own lengths
    assert staged.logits_indices.tolist() == [2, 3]  # last rows of the sampled chunks
    # what the last layer needs to attend from those rows alone: their sequences, their contexts
    assert meta.sampled.seq_index.tolist() == [0, 1] and meta.sampled.seq_lens.tolist() == [7, 1]
    assert meta.sampled.seq_lens_host == [7, 1] and meta.sampled.cu_seqlens_q.tolist() == [0, 1, 2]
    assert (meta.max_query_len, meta.max_seq_len, meta.num_seqs) == (5, 7, 3)
    assert staged.sampling is None


def test_decode_graph_shape_pads_with_null_block_sequences() -> None:
    inputs = StepInputs(64, 8, 6, BS, "cpu")
    shape = GraphShape(4, 4, 6, decode=True)
    chunks = [ScheduledChunk("a", [7], 9, [3, 1, 6], True), ScheduledChunk("b", [8], 0, [2], True)]
    staged = inputs.stage(chunks, shape=shape, max_seq_len_hint=24)
    meta = staged.meta
    assert staged.layout == make_layout(4, 4, 6, 4, 0)  # the offsets a graph captured for this shape reads
    assert staged.input_ids.tolist() == [7, 8, 0, 0]
    assert staged.positions.tolist() == [9, 0, 0, 0]
    assert meta.slot_mapping.tolist() == [6 * BS + 1, 2 * BS, 0, 0]
    assert meta.cu_seqlens_q.tolist() == [0, 1, 2, 3, 4]
    assert meta.seq_lens.tolist() == [10, 1, 1, 1]
    assert meta.block_tables.tolist() == [[3, 1, 6, 0, 0, 0], [2, 0, 0, 0, 0, 0]] + [[0] * 6] * 2
    assert staged.logits_indices.tolist() == [0, 1, 2, 3]
    assert meta.sampled is None  # every row is sampled: the last layer computes them all
    assert (meta.max_query_len, meta.max_seq_len, meta.num_seqs) == (1, 24, 4)
    assert meta.static_shape  # a graph's plan must not depend on this step's lengths


def test_prefill_graph_shape_pads_tokens_without_storing_them() -> None:
    inputs = StepInputs(64, 8, 6, BS, "cpu")
    staged = inputs.stage([ScheduledChunk("a", [3, 4, 5], 2, [7, 1], True)], shape=GraphShape(8, 1, 6, decode=False))
    assert staged.input_ids.tolist() == [3, 4, 5] + [0] * 5
    assert staged.meta.slot_mapping.tolist() == [7 * BS + 2, 7 * BS + 3, 1 * BS + 0] + [-1] * 5
    assert staged.meta.cu_seqlens_q.tolist() == [0, 3] and staged.meta.seq_lens.tolist() == [5]
    assert staged.logits_indices.tolist() == [2]
    assert staged.meta.sampled.seq_index.tolist() == [0] and staged.meta.sampled.seq_lens.tolist() == [5]
    assert staged.meta.max_query_len == 8  # the general kernel's grid covers the whole bucket


def test_mixed_graph_shape_pads_sequences_then_tokens() -> None:
    inputs = StepInputs(64, 8, 6, BS, "cpu")
    chunks = [ScheduledChunk("a", [3, 4, 5], 2, [7, 1], True), ScheduledChunk("b", [8], 6, [2, 5], True)]
    staged = inputs.stage(chunks, shape=GraphShape(8, 4, 6, decode=False, mixed=True))
    meta = staged.meta
    assert staged.layout == make_layout(8, 4, 6, 4, 0)  # fixed by the shape
    assert staged.input_ids.tolist() == [3, 4, 5, 8] + [0] * 4
    # two pad sequences of one token on the null block, then two tokens of no sequence (no store)
    assert meta.slot_mapping.tolist() == [7 * BS + 2, 7 * BS + 3, 1 * BS + 0, 5 * BS + 2, 0, 0, -1, -1]
    assert meta.cu_seqlens_q.tolist() == [0, 3, 4, 5, 6] and meta.seq_lens.tolist() == [5, 7, 1, 1]
    assert meta.block_tables.tolist()[2:] == [[0] * 6] * 2
    assert staged.logits_indices.tolist() == [2, 3, 4, 5]  # one row per sequence, pads included
    assert meta.sampled.seq_index.tolist() == [0, 1, 2, 3] and meta.sampled.seq_lens.tolist() == [5, 7, 1, 1]
    assert meta.max_query_len == 8 and meta.num_seqs == 4 and meta.static_shape


def test_step_with_no_sampled_chunk_names_its_first_row() -> None:
    """A step of partial prefills samples nothing; its one placeholder logits row is row 0."""
    staged = StepInputs(64, 8, 16, BS, "cpu").stage(_chunks()[2:])
    assert staged.logits_indices.tolist() == [0]
    assert staged.meta.sampled.seq_index.tolist() == [0] and staged.meta.sampled.seq_lens_host == [1]


def test_sampling_parameters_roundtrip_and_buffers_reused() -> None:
    inputs = StepInputs(64, 8, 16, BS, "cpu")
    rows = [SamplingRow(SamplingParams(temperature=0.0), [], [], None),
            SamplingRow(SamplingParams(temperature=0.7, top_k=5, top_p=0.9, min_p=0.05), [], [], None)]
    staged = inputs.stage(_chunks()[:2], rows, [0.0, 0.123456789], vocab_size=100)
    ref = SamplingTensors.build(rows, torch.device("cpu"), 100, [0.0, 0.123456789])
    got = staged.sampling
    for name in ("greedy", "temperature", "top_k", "top_p", "min_p", "uniform"):
        assert torch.equal(getattr(got, name), getattr(ref, name)), name
    assert (got.flags.any_random, got.flags.need_top_k, got.flags.need_top_p, got.flags.need_min_p) == (True, True, True, True)
    first_ptr = staged.input_ids.data_ptr()
    again = inputs.stage(_chunks()[:2])
    assert again.input_ids.data_ptr() == first_ptr  # persistent buffer, no allocation per step
