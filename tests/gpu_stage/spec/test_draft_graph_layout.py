"""The draft model's graph path on CPU: the shapes its forwards take (decode for one-token rows,
catch-up for rows of up to CATCH_UP_TOKENS, prefill for one longer chunk, eager past them), the
catch-up step's padded layout, and an Engine whose draft "replays" on CPU (the Triton kernels
under the interpreter, on the step staged padded to the graph's shape, as a captured graph reads
it): greedy output equals the output without speculation, and after the prompts every draft
forward was a replay (catch-up and guessing steps alike)."""
from __future__ import annotations

import asyncio
import json

import pytest
import torch

from gpu_stage.cuda_graphs import CudaGraphRunner
from gpu_stage.spec.draft_model import CATCH_UP_TOKENS, DraftCounts
from gpu_stage.spec.graph_shapes import CATCH_UP, catch_up_graphs, catch_up_shape
from gpu_stage.spec.verifier import draft_of
from gpu_stage.step_inputs import StepInputs, forward_step
from gpu_stage.step_layout import GraphShape
from pipeline import Engine
from scheduler.spec.drafts import SpecDrafts
from stages.messages import ScheduledChunk
from stages.sampling import SamplingParams
from tests.pipeline.spec_kit import REPEATING, collect, config, run

BS = 4
DRAFT = json.dumps({"method": "draft_model", "model": "dummy:tiny", "num_speculative_tokens": 3})


def _graphs(max_num_seqs: int = 8, max_num_tokens: int = 64) -> CudaGraphRunner:
    inputs = StepInputs(max_num_tokens, max_num_seqs, 10, BS, "cpu")
    return CudaGraphRunner(None, None, inputs, max_num_seqs, max_num_tokens, 40, prefill_buckets=(8, 32),
                           mixed_token_buckets=(), families=[catch_up_graphs(CATCH_UP_TOKENS)])


def test_catch_up_shapes_and_the_shape_each_draft_forward_takes() -> None:
    graphs = _graphs()
    width = graphs.inputs.max_blocks_per_seq
    assert graphs.families[CATCH_UP].sizes == [1, 2, 4, 8]
    catch_up = [s for s in graphs.shapes() if s.family == CATCH_UP]
    assert catch_up == [catch_up_shape(2 * b, b, width) for b in (1, 2, 4, 8)]
    assert all(s.logits_per_seq and s.pad_slot == -1 for s in catch_up)
    one = ScheduledChunk("a", [5], 6, [1, 2], True)
    two = ScheduledChunk("b", [5, 6], 6, [3, 4], True)
    assert graphs.shape_for([one, one]) == GraphShape(2, 2, width, True)  # every row one token: decode
    assert graphs.shape_for([two]) == catch_up_shape(2, 1, width)  # not prefill's 8
    assert graphs.shape_for([two, one, one]) == catch_up_shape(8, 4, width)
    long = ScheduledChunk("p", [5] * 5, 0, [5, 6], True)
    assert graphs.shape_for([long]) == GraphShape(8, 1, width, False)  # one longer chunk: prefill
    assert graphs.shape_for([long, one]) is None  # a prefill beside decodes: eager (the draft has no mixed graphs)
    assert graphs.shape_for([two] * 9) is None  # past the largest bucket
    assert _graphs(max_num_tokens=8).families[CATCH_UP].sizes == [1, 2, 4]  # 2 * b within the step budget
    target = CudaGraphRunner(None, None, graphs.inputs, 8, 64, 40, prefill_buckets=(8,), mixed_token_buckets=())
    assert CATCH_UP not in target.families and target.shape_for([two]) == GraphShape(8, 1, width, False)  # unchanged


def test_catch_up_layout_pads_sequences_on_the_null_block_and_samples_each_last_token() -> None:
    inputs = StepInputs(64, 8, 10, BS, "cpu")
    rows = [ScheduledChunk("a", [5, 6], 6, [7, 3], True), ScheduledChunk("b", [8], 5, [2, 5], False)]
    staged = inputs.stage(rows, shape=catch_up_shape(8, 4, 16))
    meta = staged.meta
    assert staged.input_ids.tolist() == [5, 6, 8] + [0] * 5
    assert meta.slot_mapping.tolist() == [3 * BS + 2, 3 * BS + 3, 5 * BS + 1, 0, 0, -1, -1, -1]
    assert meta.cu_seqlens_q.tolist() == [0, 2, 3, 4, 5] and meta.seq_lens.tolist() == [8, 6, 1, 1]
    assert staged.logits_indices.tolist() == [1, 2, 3, 4]  # each sequence's last token: row j is sequence j's


class ReplayOnCpu(CudaGraphRunner):
    """"Replay" = the model on the step as staged for the shape (padded, static): what its graph reads."""

    def __init__(self, draft) -> None:
        super().__init__(draft.model, draft.kv_cache, draft.inputs, 8, 64, 512, prefill_buckets=(32, 64),
                         mixed_token_buckets=(), families=[catch_up_graphs(CATCH_UP_TOKENS)])
        self.shapes_used: list[GraphShape] = []
        self.last = None
        stage = draft.inputs.stage

        def recording(*args, **kw):
            self.last = stage(*args, **kw)
            return self.last

        draft.inputs.stage = recording

    def replay(self, shape: GraphShape) -> torch.Tensor:
        assert self.last.meta.static_shape and self.last.layout.offsets["input_ids"][1] == shape.num_tokens
        self.shapes_used.append(shape)
        return forward_step(self.model, self.last, self.kv_cache)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # padded rows hold garbage by design
@pytest.mark.skipif(torch.cuda.is_available(), reason="simulates the graph path on CPU tensors (the GPU test runs it)")
def test_a_draft_replaying_graphs_changes_nothing_and_replays_every_forward_after_the_prompts() -> None:
    pytest.importorskip("triton")
    greedy = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    prompts = REPEATING[:2]
    plain, _ = run(config(None, attention_backend="triton"), prompts, greedy)

    async def main():
        async with Engine(config(DRAFT, attention_backend="triton")) as engine:
            draft = draft_of(engine.built.runner.hook)
            draft.graphs = ReplayOnCpu(draft)
            replies = await asyncio.gather(*[collect(engine, p, greedy) for p in prompts])
            engine.built.scheduler.check()
            assert engine.built.scheduler.stats().num_used_blocks == 0
            return replies, draft, engine.built.scheduler.hooks.get(SpecDrafts).counters

    spec, draft, c = asyncio.run(main())
    assert [r.token_ids for r in spec] == [r.token_ids for r in plain]
    assert c.num_accepted_tokens == c.num_draft_tokens > 0  # the target as its own draft
    counts: DraftCounts = draft.counts
    assert counts.step_eager == 0 and counts.step_graph > 0
    assert counts.catch_up_graph > 0 and counts.catch_up_eager <= len(prompts)  # at most each prompt's prefill
    kinds = {("decode" if s.decode else "catch_up" if s.family == CATCH_UP else "prefill")
             for s in draft.graphs.shapes_used}
    assert {"decode", "catch_up"} <= kinds  # full acceptances: the lagging guess beside the next input
