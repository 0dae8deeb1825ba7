"""Verification CUDA graphs' layout on CPU: the shape a step takes (the family's buckets, shape_for), the
padded step's inputs (pad sequences on the null block, pad tokens stored nowhere, every token a
logits row), and execute() through the graph path with "replay" simulated on CPU (the Triton
kernels under the interpreter, metadata taken only from the shape's layout, as a captured graph
reads it): the emitted tokens equal plain greedy decoding, and no pad writes KV into a live block."""
from __future__ import annotations

import pytest
import torch
from tiny_hf_models import hf_model, model_config

from gpu_stage.attention.metadata import AttentionMetadata
from gpu_stage.cuda_graphs import CudaGraphRunner, graph_buckets
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model_runner import ModelRunner
from gpu_stage.spec.graph_shapes import VERIFY, VerifyShapes, verify_graphs, verify_shape
from gpu_stage.spec.verifier import Verifier
from gpu_stage.step_inputs import StepInputs
from gpu_stage.step_layout import GraphShape, make_layout, plan_step
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

BS = 4


def verify_buckets(max_num_seqs: int, max_num_tokens: int, k: int) -> list[int]:
    return _family(max_num_seqs, max_num_tokens, k).sizes


def verify_reserve_bytes(max_num_seqs: int, max_num_tokens: int, k: int, vocab_size: int) -> int:
    return _family(max_num_seqs, max_num_tokens, k).reserve_bytes(vocab_size)


def _family(max_num_seqs: int, max_num_tokens: int, k: int) -> VerifyShapes:
    return verify_graphs(k)(graph_buckets(max_num_seqs, max_num_tokens, 16))


def test_verify_buckets_fit_the_budget_and_the_token_cap() -> None:
    assert verify_buckets(128, 8192, 4) == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128]  # 128 * 5 = 640
    assert verify_buckets(128, 8192, 8) == [1, 2, 4, 8, 16, 24, 32, 48, 64]  # 64 * 9 = 576 <= 640 < 96 * 9
    assert verify_buckets(128, 100, 4) == [1, 2, 4, 8, 16]  # the step budget: 16 * 5 = 80 <= 100
    assert verify_buckets(6, 8192, 2) == [1, 2, 4, 6]
    assert verify_buckets(128, 8192, 0) == [] and verify_reserve_bytes(128, 8192, 0, 1000) == 0
    assert verify_reserve_bytes(128, 8192, 4, 1000) == 640 * 1000 * 10


def _graphs(k: int, max_num_seqs: int = 8) -> CudaGraphRunner:
    inputs = StepInputs(64, max_num_seqs, 10, BS, "cpu")
    return CudaGraphRunner(None, None, inputs, max_num_seqs, 64, 40, prefill_buckets=(), mixed_token_buckets=(),
                           families=[verify_graphs(k)])


def _row(rid: str, n_draft: int, start: int, table: list[int]) -> ScheduledChunk:
    return ScheduledChunk(rid, [5] * (n_draft + 1), start, table, True, n_draft)


def test_shape_choice() -> None:
    graphs = _graphs(3)
    assert graphs.families[VERIFY].sizes == [1, 2, 4, 8]
    width = graphs.inputs.max_blocks_per_seq
    verify = [s for s in graphs.shapes() if s.family == VERIFY]
    assert verify == [verify_shape(4 * b, b, width) for b in (1, 2, 4, 8)]
    rows = [_row("a", 3, 6, [1, 2, 3]), _row("b", 1, 6, [4, 5]), ScheduledChunk("c", [5], 6, [6, 7], True)]
    assert graphs.shape_for(rows) == verify_shape(16, 4, width)
    assert graphs.shape_for(rows[:1]) == verify_shape(4, 1, width)
    assert graphs.shape_for(rows[2:]) == GraphShape(1, 1, width, True)  # no drafts: the decode graph
    prefill = ScheduledChunk("p", [5] * 5, 0, [8, 9], True)  # longer than k + 1: eager
    assert graphs.shape_for(rows + [prefill]) is None
    assert graphs.shape_for([_row(f"r{i}", 1, 6, [1, 2]) for i in range(9)]) is None  # past the largest bucket
    # no speculation: eager, as before
    assert _graphs(0).shape_for(rows) is None and _graphs(0).families[VERIFY].sizes == []


def test_verify_plan_samples_every_token_in_eager_order() -> None:
    rows = [_row("a", 3, 6, [1, 2, 3]), _row("b", 1, 6, [4, 5]), ScheduledChunk("c", [5], 6, [6, 7], True)]
    shape = verify_shape(16, 4, 16)
    plan = plan_step(rows, BS, shape, 7, 0)
    assert plan.logits_rows.tolist() == list(range(16))  # 4 + 2 + 1 real rows, then the pads'
    assert plan.layout == make_layout(16, 4, 16, 16, 7)
    unsampled = [rows[0], ScheduledChunk("c", [5, 6], 6, [6, 7], False)]  # a chunk that samples nothing
    assert plan_step(unsampled, BS, shape, 4, 0).logits_rows.tolist() == [0, 1, 2, 3] + list(range(4, 16))
    assert not shape.logits_per_seq and shape.pad_slot == -1


def test_verify_shape_pads_sequences_on_the_null_block_and_tokens_nowhere() -> None:
    inputs = StepInputs(64, 8, 10, BS, "cpu")
    rows = [_row("a", 2, 6, [7, 3, 4]), ScheduledChunk("b", [8], 5, [2, 5], True)]
    staged = inputs.stage(rows, shape=verify_shape(12, 4, 16))
    meta = staged.meta
    assert staged.input_ids.tolist() == [5, 5, 5, 8] + [0] * 8
    assert staged.positions.tolist() == [6, 7, 8, 5] + [0] * 8
    slots = meta.slot_mapping.tolist()
    assert slots[:4] == [3 * BS + 2, 3 * BS + 3, 4 * BS + 0, 5 * BS + 1]  # a: positions 6-8; b: 5
    # two pad sequences of one token on the null block (scratch), then six tokens stored nowhere
    assert slots[4:6] == [0, 0] and slots[6:] == [-1] * 6
    assert meta.cu_seqlens_q.tolist() == [0, 3, 4, 5, 6] and meta.seq_lens.tolist() == [9, 6, 1, 1]
    assert meta.block_tables.tolist()[2:] == [[0] * 16] * 2
    assert staged.logits_indices.tolist() == list(range(12)) and meta.sampled is None  # every row computed
    assert meta.max_query_len == 12 and meta.static_shape


class ReplayOnCpu(CudaGraphRunner):
    """"Replay" = the model on views taken only from the shape's layout (what a captured graph reads)."""

    shapes_used: list = []

    def replay(self, shape: GraphShape) -> torch.Tensor:
        self.shapes_used.append(shape)
        assert shape.family == VERIFY, "only verifying steps here"
        t, n = shape.num_tokens, shape.num_seqs
        lay = make_layout(t, n, shape.width, t, 0)
        buf = self.inputs._host[self.inputs._turn]

        def v(name):
            return lay.view(buf, name)

        meta = AttentionMetadata(v("cu_seqlens_q"), v("seq_lens"), v("block_tables").view(n, shape.width),
                                 v("slot_mapping"), v("positions"), t, self.max_model_len, self.kv_cache.block_size,
                                 [1] * n, [1] * n, static_shape=True)
        return self.model(v("input_ids"), v("positions"), self.kv_cache, meta, v("logits_indices"))


class _Tokenizer:
    vocab_size = 400
    eos_token_ids = frozenset({1})


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # padded rows hold garbage by design
@pytest.mark.skipif(torch.cuda.is_available(), reason="simulates the graph path on CPU tensors (the GPU test runs it)")
def test_verifying_steps_through_the_graph_path_emit_greedy_tokens_and_keep_pads_off_live_blocks() -> None:
    pytest.importorskip("triton")
    hf = hf_model("llama", num_hidden_layers=1)
    state = hf.state_dict()
    source = ModelSource("tiny", model_config(hf), lambda d, dt: ((k, v.to(d, dt)) for k, v in state.items()),
                         _Tokenizer(), "t")
    tables = {"a": [1, 2, 3, 4], "b": [5, 6, 7, 8], "c": [9, 10, 11, 12]}
    prompts = {"a": [3, 9, 4, 7, 2], "b": [11, 5, 5, 8, 6], "c": [20, 21, 22, 23, 24]}

    def start(graphs: bool) -> ModelRunner:
        runner = ModelRunner.build(source, "cpu", torch.float32, 32, BS, max_num_batched_tokens=16, max_num_seqs=4,
                                   attention_backend="triton", max_model_len=16)
        runner.hook = Verifier()
        if graphs:
            runner.graphs = ReplayOnCpu(runner.model, runner.kv_cache, runner.inputs, 4, 16, 16, prefill_buckets=(),
                                        mixed_token_buckets=(), families=[verify_graphs(3)])
        new = [NewRequestData(r, p, SamplingParams(temperature=0.0, max_tokens=64)) for r, p in prompts.items()]
        result = runner.execute(StepBatch(0, new, [ScheduledChunk(r, p, 0, tables[r], True) for r, p in prompts.items()]))
        runner.first = {t.request_id: t.token_id for t in result.sampled}
        return runner

    plain = start(False)  # greedy, one token per step: the reference
    ref = {r: [plain.first[r]] for r in prompts}
    for step in range(1, 9):
        chunks = [ScheduledChunk(r, ref[r][-1:], 4 + len(ref[r]), tables[r], True) for r in prompts]
        for t in plain.execute(StepBatch(step, [], chunks)).sampled:
            ref[t.request_id].append(t.token_id)

    spec = start(True)
    got = {r: [spec.first[r]] for r in prompts}
    wrong = {"a": False, "b": True, "c": None}  # a: every guess right; b: the second guess wrong; c: no drafts
    for step in range(1, 3):
        chunks = []
        for r in prompts:
            n = len(got[r])
            drafts = [] if wrong[r] is None else ref[r][n : n + 3]
            if wrong[r]:
                drafts = [drafts[0], (drafts[1] + 1) % 400]
            chunks.append(ScheduledChunk(r, got[r][-1:] + drafts, 4 + n, tables[r], True, len(drafts)))
        result = spec.execute(StepBatch(step, [], chunks))
        assert not result.failed
        for t in result.sampled:
            got[t.request_id] += [t.token_id] + [x.token_id for x in result.spec.get(t.request_id, [])]
    assert {s for s in ReplayOnCpu.shapes_used} == {verify_shape(16, 4, 16)}
    assert [len(got[r]) for r in "abc"] == [1 + 4 + 4, 1 + 2 + 2, 1 + 1 + 1]  # all, one guess then the fix, none
    assert all(got[r] == ref[r][: len(got[r])] for r in prompts)
    # No pad wrote KV into a block some sequence holds or may get: only the null block 0 and the rows' own
    live = torch.zeros(32, dtype=torch.bool)
    live[[b for t in tables.values() for b in t]] = True
    live[0] = True
    assert spec.kv_cache.kv[~live].abs().sum() == 0
