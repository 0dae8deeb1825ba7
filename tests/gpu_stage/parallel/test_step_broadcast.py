"""restage: a worker rebuilds, from the driver's packed buffer alone, the very inputs and attention
metadata the driver's StepInputs.stage made (what the forward reads), for steps mixing prefill
chunks with context, decodes and unsampled chunks. (The broadcast itself runs in every
multi-process test: each of their steps goes through it.)"""
from __future__ import annotations

import pytest
import torch

from gpu_stage.parallel.step_broadcast import restage
from gpu_stage.step_inputs import StepInputs
from stages.messages import ScheduledChunk

BS = 4


def steps() -> list[list[ScheduledChunk]]:
    return [
        [ScheduledChunk("p", list(range(10, 23)), 0, [3, 4, 5, 6], True)],  # one prefill
        [ScheduledChunk("c", list(range(5)), 6, [7, 8, 9], True),  # a chunk after 6 cached tokens
         ScheduledChunk("d", [42], 9, [10, 11, 12], True),  # a decode
         ScheduledChunk("u", [1, 2, 3], 0, [13], False)],  # an unsampled chunk
        [ScheduledChunk(f"d{i}", [i + 1], 3 + i, [14 + i, 20 + i], True) for i in range(4)],  # decodes only
    ]


@pytest.mark.parametrize("chunks", steps())
def test_restaged_step_equals_the_staged_one(chunks):
    driver, worker = StepInputs(64, 8, 16, BS, "cpu"), StepInputs(64, 8, 16, BS, "cpu")
    staged = driver.stage(chunks)
    size = staged.layout.size
    host, buf = worker.receive(lambda dest: dest.copy_(staged.host[:size]), size)
    got = restage(staged.layout, host, buf, staged.meta.max_query_len, staged.meta.max_seq_len, BS)
    assert buf.data_ptr() != staged.host.data_ptr()  # the worker's own buffer
    for name in ("input_ids", "positions", "logits_indices"):
        assert torch.equal(getattr(got, name), getattr(staged, name)), name
    a, b = got.meta, staged.meta
    for name in ("cu_seqlens_q", "seq_lens", "block_tables", "slot_mapping", "positions"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert (a.max_query_len, a.max_seq_len, a.block_size, a.static_shape) == (b.max_query_len, b.max_seq_len, BS, False)
    assert (a.query_lens_host, a.seq_lens_host) == (b.query_lens_host, b.seq_lens_host)
    assert (a.sampled is None) == (b.sampled is None)
    if b.sampled is not None:
        assert a.sampled.seq_lens_host == b.sampled.seq_lens_host
        for name in ("seq_index", "seq_lens", "cu_seqlens_q"):
            assert torch.equal(getattr(a.sampled, name), getattr(b.sampled, name)), name
    assert got.sampling is None and (got.num_real_tokens, got.num_real_seqs) == (staged.num_real_tokens,
                                                                                  staged.num_real_seqs)
