"""The inputs CUDA graphs are captured with (CPU): every shape's dummy step fits that shape's layout,
including mixed shapes whose token count is past what one sequence's block table holds (a budget
over max_model_len: the dummy then has several prefills, none wider than the table)."""
from __future__ import annotations

import pytest

from gpu_stage.cuda_graphs import _dummy_chunks
from gpu_stage.step_layout import GraphShape, plan_step

BLOCK = 16


@pytest.mark.parametrize("num_tokens,num_seqs,width", [(1024, 8, 64), (1024, 8, 32), (1024, 32, 8), (256, 8, 2),
                                                       (512, 32, 1)])
def test_mixed_dummy_fits_its_shape(num_tokens: int, num_seqs: int, width: int) -> None:
    shape = GraphShape(num_tokens, num_seqs, width, False, mixed=True)
    chunks = _dummy_chunks(shape, BLOCK)
    assert len(chunks) == num_seqs and sum(len(c.token_ids) for c in chunks) == num_tokens
    assert max(len(c.token_ids) for c in chunks) <= width * BLOCK
    plan = plan_step(chunks, BLOCK, shape, num_rows=num_seqs, num_feeds=0)
    assert plan.num_tokens == num_tokens


def test_one_prefill_when_the_table_holds_it() -> None:
    chunks = _dummy_chunks(GraphShape(1024, 8, 64, False, mixed=True), BLOCK)
    assert [len(c.token_ids) for c in chunks] == [1017] + [1] * 7


def test_a_shape_no_step_can_fill_is_refused() -> None:
    with pytest.raises(AssertionError, match="no step fills"):
        _dummy_chunks(GraphShape(1024, 8, 4, False, mixed=True), BLOCK)  # 8 x 64 tokens at most
