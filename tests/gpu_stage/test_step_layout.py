"""step_layout: segments 16-byte aligned in the documented order; a step's plan pads to its graph
shape (decode: a logits row per padded sequence; mixed: each sequence's last token, then the pads')."""
from __future__ import annotations

import pytest

from gpu_stage.step_layout import ALIGN, SAMPLING_SEGMENTS, GraphShape, make_layout, plan_step, round_width
from stages.messages import ScheduledChunk


def test_segments_are_aligned_and_in_order() -> None:
    layout = make_layout(num_tokens=5, num_seqs=2, width=16, num_logits=2, num_rows=2, num_feeds=1)
    names = list(layout.offsets)
    assert names[:3] == ["input_ids", "positions", "slot_mapping"]
    assert names[-3:] == ["feed_dst", "feed_src", "prompt_targets"]
    assert all(name in names for name in SAMPLING_SEGMENTS)
    for start, _ in layout.offsets.values():
        assert start % ALIGN == 0
    starts = [start for start, _ in layout.offsets.values()]
    assert starts == sorted(starts) and layout.size == starts[-2] + ALIGN  # one feed, padded to 4; no prompt rows
    # the feed and prompt segments come last: a step with them keeps every other offset of its shape
    without = make_layout(5, 2, 16, 2, 2)
    assert {n: o for n, o in layout.offsets.items() if not n.startswith(("feed", "prompt"))} == \
        {n: o for n, o in without.offsets.items() if not n.startswith(("feed", "prompt"))}
    assert make_layout(5, 2, 16, 2, 2, 1, 3).offsets["prompt_targets"] == (layout.size, 3)


def test_prompt_rows_follow_the_sampled_rows_of_an_eager_plan() -> None:
    chunks = [ScheduledChunk("a", [1, 2, 3], 0, [1], False), ScheduledChunk("b", [4, 5], 0, [2], True)]
    plan = plan_step(chunks, 4, None, 1, 0, prompt_rows=[0, 1, 2])
    assert plan.logits_rows.tolist() == [4, 0, 1, 2] and plan.num_prompt_rows == 3
    assert plan.layout.offsets["prompt_targets"][1] == 3 and plan.layout.offsets["logits_indices"][1] == 4
    with pytest.raises(AssertionError):
        plan_step(chunks, 4, GraphShape(8, 2, 16, decode=False, mixed=True), 1, 0, prompt_rows=[0])


def test_round_width_is_a_multiple_of_16() -> None:
    assert [round_width(w) for w in (1, 16, 17, 33)] == [16, 16, 32, 48]


def test_an_eager_plan_has_the_step_own_sizes() -> None:
    chunks = [ScheduledChunk("a", [5, 6, 7], 4, [9, 2], True), ScheduledChunk("b", [1, 2], 0, [3], False)]
    plan = plan_step(chunks, 4, None, num_rows=1, num_feeds=0)
    assert plan.q_lens.tolist() == [3, 2] and plan.seq_lens.tolist() == [7, 2] and plan.widths.tolist() == [2, 1]
    assert plan.cu.tolist() == [0, 3, 5] and plan.num_tokens == plan.num_tokens_laid == 5
    assert (plan.num_seqs, plan.num_seqs_laid, plan.num_pad_seqs, plan.width) == (2, 2, 0, 16)
    assert plan.logits_rows.tolist() == [2]  # the sampled chunk's last token


def test_decode_and_mixed_plans_pad_to_their_shape() -> None:
    decode = plan_step([ScheduledChunk("a", [5], 3, [1], True)], 4, GraphShape(4, 4, 16, decode=True), 1, 0)
    assert (decode.num_tokens_laid, decode.num_seqs_laid, decode.num_pad_seqs) == (4, 4, 3)
    assert decode.logits_rows.tolist() == [0, 1, 2, 3]
    chunks = [ScheduledChunk("p", [1, 2, 3], 0, [2], True), ScheduledChunk("d", [4], 5, [3, 4], True)]
    mixed = plan_step(chunks, 4, GraphShape(8, 4, 16, decode=False, mixed=True), 2, 0)
    assert mixed.logits_rows.tolist() == [2, 3, 4, 5]  # the two sequences' last tokens, then the two pads'
    assert mixed.layout == make_layout(8, 4, 16, 4, 2)


def test_a_step_larger_than_its_shape_is_refused() -> None:
    with pytest.raises(AssertionError, match="exceeds its shape"):
        plan_step([ScheduledChunk("a", [1] * 9, 0, [1, 2, 3], True)], 4, GraphShape(8, 1, 16, decode=False), 1, 0)
