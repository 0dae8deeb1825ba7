"""Context-aware chunks (issue 22, scheduler/context_chunks.py): the chunk limit of a long prompt
shrinks with its context, in multiples of 1,024 down to 2,048, and the lanes policy applies it from
the request's context (computed tokens or prefix hits), alone and beside others."""
from __future__ import annotations

import pytest
from test_lanes import make_req, make_sched, shape, step

from gpu_stage.loaders.dummy_loader import dummy_preset
from scheduler.context_chunks import context_chunk

LLAMA_WEIGHT = dummy_preset("llama-3.1-8b").attention_weight()  # 3.756e-5
GPU_LIKE = dict(num_blocks=5000, block_size=16, max_num_batched_tokens=8192, long_prefill_threshold=4096,
                max_model_len=65536)


def test_the_llama_weight_is_its_attention_flops_per_pair_over_its_linear_flops() -> None:
    assert LLAMA_WEIGHT == pytest.approx(4 * 32 * 128 * 32 / 13.958643712e9)


def test_context_chunk_cuts_the_limit_by_the_cost_of_a_token() -> None:
    assert context_chunk(8192, 0, LLAMA_WEIGHT) == 8192  # no context: the limit
    assert context_chunk(8192, 8192, LLAMA_WEIGHT) == 6144  # 8192 / 1.31 = 6,257, to 1,024s
    assert context_chunk(8192, 32768, LLAMA_WEIGHT) == 3072  # 8192 / 2.23 = 3,674
    assert context_chunk(8192, 122880, LLAMA_WEIGHT) == 2048  # the floor (8192 / 5.6 = 1,462)
    assert context_chunk(16384, 122880, LLAMA_WEIGHT) == 2048
    assert context_chunk(1000, 122880, LLAMA_WEIGHT) == 1000  # a limit below the floor stays
    assert context_chunk(8192, 122880, 0.0) == 8192  # off


def test_a_long_prompt_alone_gets_smaller_chunks_as_its_context_grows() -> None:
    s = make_sched(prefill_context_weight=LLAMA_WEIGHT, **GPU_LIKE)
    s.add_request(make_req("L", 40000))
    sizes = []
    while not sizes or sum(sizes) < 40000:
        (chunk,) = shape(step(s))
        assert chunk[1] == sum(sizes)
        sizes.append(chunk[2])
    assert sizes[:5] == [8192, 6144, 5120, 4096, 4096]
    assert sizes == [min(40000 - sum(sizes[:i]), context_chunk(8192, sum(sizes[:i]), LLAMA_WEIGHT))
                     for i in range(len(sizes))]
    off = make_sched(**GPU_LIKE)
    off.add_request(make_req("L", 40000))
    assert [shape(step(off))[0][2] for _ in range(4)] == [8192] * 4  # today's: the whole budget alone


def test_beside_others_the_cut_applies_to_the_lane_cap() -> None:
    s = make_sched(prefill_context_weight=LLAMA_WEIGHT, **GPU_LIKE)
    s.add_request(make_req("L", 40000))
    for _ in range(4):
        step(s)  # 8192 + 6144 + 5120 + 4096 = 23,552 computed
    s.add_request(make_req("M", 30000, base=50000))  # another long one: both chunked at the lane cap (4,096)
    chunks = {rid: n for rid, _, n, _ in shape(step(s))}
    assert chunks == {"L": context_chunk(4096, 23552, LLAMA_WEIGHT), "M": 4096} and chunks["L"] == 2048


def test_with_cuts_a_prefill_ages_only_while_it_waits() -> None:
    """Aging counts the steps a prefill waits, not those it progresses in (cut chunks take more
    steps): a long prompt alone for 10 steps is not promoted at aging_steps 4, while a starved one
    still is (test_lanes' starvation, with a context weight)."""
    from test_lanes import _starve

    s = make_sched(prefill_context_weight=LLAMA_WEIGHT, aging_steps=4, **GPU_LIKE)
    s.add_request(make_req("L", 40000))
    for _ in range(10):
        step(s)
    assert not s.running[0].promoted and s.running[0].num_computed_tokens > 30000
    starved = make_sched(aging_steps=2, max_num_batched_tokens=3, long_prefill_threshold=4,
                         prefill_context_weight=LLAMA_WEIGHT)
    assert _starve(starved, 5) == [[("S0", 0, 3, True)], [("S1", 0, 3, True)],
                                   [("L", 0, 3, False)], [("L", 3, 3, True)], [("S2", 0, 3, True)]]
