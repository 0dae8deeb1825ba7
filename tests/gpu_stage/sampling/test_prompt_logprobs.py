"""Prompt logprobs: the rows a step scores (plan_prompt_rows), and the runner's results against
transformers' log_softmax of the whole forward, in chunked prefill across steps, beside a request
that did not ask (whose lm_head still runs on its last token only, and whose tokens do not change),
with the lm_head in slices, and after a recompute (nothing scored twice)."""
from __future__ import annotations

import pytest
import torch
from tiny_hf_models import hf_model, model_config

from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model_runner import ModelRunner
from gpu_stage.sampling.prompt_logprobs import PromptProgress, plan_prompt_rows
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

BLOCK_SIZE = 4


class _Tokenizer:
    vocab_size = 400
    eos_token_ids = frozenset({1})


@pytest.fixture(scope="module")
def hf():
    return hf_model("llama", num_hidden_layers=2)


@pytest.fixture()
def runner(hf) -> ModelRunner:
    state = hf.state_dict()
    source = ModelSource("tiny", model_config(hf), lambda d, dt: ((k, v.to(d, dt)) for k, v in state.items()),
                         _Tokenizer(), "tiny")
    return ModelRunner.build(source, "cpu", torch.float32, 64, BLOCK_SIZE, max_num_batched_tokens=64, max_num_seqs=8)


def _chunk(rid: str, prompt: list[int], start: int, end: int, table: list[int]) -> ScheduledChunk:
    return ScheduledChunk(rid, prompt[start:end], start, table, end == len(prompt))


def test_plan_scores_each_position_once_and_never_the_last() -> None:
    prompt = list(range(10, 20))  # L = 10: positions 0..8 are scored, with targets prompt[1..9]
    progress = {"a": PromptProgress(2, prompt)}
    other = ScheduledChunk("b", [5, 6, 7], 0, [1], True)
    rows = plan_prompt_rows([other, ScheduledChunk("a", prompt[:4], 0, [2], False)], progress)
    assert rows.token_rows == [3, 4, 5, 6] and rows.targets == prompt[1:5]  # after b's 3 tokens
    assert [(s.request_id, s.first_pos, s.count, s.k) for s in rows.spans] == [("a", 0, 4, 2)]
    rows = plan_prompt_rows([ScheduledChunk("a", prompt[4:], 4, [2], True)], progress)
    assert rows.token_rows == [0, 1, 2, 3, 4] and rows.targets == prompt[5:]  # position 9: the sampled row
    # A recompute after a preemption (positions 0..10, an output token included) scores nothing again.
    assert plan_prompt_rows([ScheduledChunk("a", prompt + [3], 0, [2], True)], progress) is None
    assert plan_prompt_rows([other], progress) is None
    assert plan_prompt_rows([ScheduledChunk("a", [7], 0, [2], True)], {"a": PromptProgress(0, [7])}) is None


def _reference(hf, prompt: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(hf(torch.tensor([prompt])).logits[0].float(), dim=-1)  # [L, V]


def _check(entries, ref: torch.Tensor, prompt: list[int], k: int) -> None:
    assert len(entries) == len(prompt) - 1
    for p, entry in enumerate(entries):  # entry p scores prompt[p + 1] given prompt[: p + 1]
        row = ref[p]
        assert entry.token_id == prompt[p + 1]
        assert entry.logprob == pytest.approx(float(row[prompt[p + 1]]), abs=1e-4)
        value = row[prompt[p + 1]]  # rank: tokens at least as likely, itself included (ties within rounding)
        assert int((row > value + 1e-5).sum()) + 1 <= entry.rank <= int((row >= value - 1e-5).sum())
        assert [t for t, _ in entry.top] == row.topk(k).indices.tolist()
        assert [v for _, v in entry.top] == pytest.approx(row.topk(k).values.tolist(), abs=1e-4)


@pytest.mark.parametrize("slice_rows", [256, 3])
def test_runner_matches_transformers_in_chunked_prefill_beside_another_request(hf, runner, monkeypatch,
                                                                                slice_rows: int) -> None:
    monkeypatch.setattr("gpu_stage.step_inputs.PROMPT_SLICE_ROWS", slice_rows)
    gen = torch.Generator().manual_seed(3)
    prompt = torch.randint(2, 400, (23,), generator=gen).tolist()
    plain = torch.randint(2, 400, (9,), generator=gen).tolist()
    greedy = SamplingParams(temperature=0.0, max_tokens=4)
    new = [NewRequestData("a", prompt, SamplingParams(temperature=0.0, max_tokens=4, prompt_logprobs=3)),
           NewRequestData("b", plain, greedy)]
    lm_head_rows: list[int] = []
    compute_logits = runner.model.compute_logits

    def counting(h: torch.Tensor) -> torch.Tensor:
        lm_head_rows.append(h.shape[0])
        return compute_logits(h)

    monkeypatch.setattr(runner.model, "compute_logits", counting)
    steps = [(0, 8, 0, 5), (8, 16, 5, 9), (16, 23, None, None)]  # a's chunks; b's prefill in steps 0-1
    sampled = {}
    for step_id, (a0, a1, b0, b1) in enumerate(steps):
        chunks = [_chunk("a", prompt, a0, a1, [1, 2, 3, 4, 5, 6])]
        if b0 is not None:
            chunks.append(_chunk("b", plain, b0, b1, [7, 8, 9]))
        result = runner.execute(StepBatch(step_id, new if step_id == 0 else [], chunks))
        sampled.update({s.request_id: s for s in result.sampled})
        if step_id == 0:
            assert not result.sampled  # a prompt chunk alone: scored, nothing sampled
    # The lm_head ran on a's scored rows (22 of them, in slices) and the sampled last tokens only.
    assert sum(lm_head_rows) == 22 + 3 and max(lm_head_rows) <= max(slice_rows, 2)
    _check(sampled["a"].prompt_logprobs, _reference(hf, prompt), prompt, 3)
    assert sampled["a"].token_id == int(_reference(hf, prompt)[-1].argmax())
    assert sampled["b"].prompt_logprobs is None
    assert sampled["b"].token_id == int(_reference(hf, plain)[-1].argmax())  # b unaffected
    # The next token of a carries nothing more.
    result = runner.execute(StepBatch(3, [], [ScheduledChunk("a", [sampled["a"].token_id], 23, [1, 2, 3, 4, 5, 6],
                                                             True)]))
    assert result.sampled[0].prompt_logprobs is None


def test_zero_alternatives_and_a_one_token_prompt(hf, runner) -> None:
    prompt = [5, 17, 250, 33]
    new = [NewRequestData("a", prompt, SamplingParams(temperature=0.0, prompt_logprobs=0)),
           NewRequestData("one", [9], SamplingParams(temperature=0.0, prompt_logprobs=2))]
    result = runner.execute(StepBatch(0, new, [_chunk("a", prompt, 0, 4, [1]), _chunk("one", [9], 0, 1, [2])]))
    by_id = {s.request_id: s for s in result.sampled}
    entries = by_id["a"].prompt_logprobs
    assert [e.top for e in entries] == [[], [], []]
    _check(entries, _reference(hf, prompt), prompt, 0)
    assert by_id["one"].prompt_logprobs == []  # nothing before its only token


def test_triton_backend_gives_the_torch_backends_prompt_logprobs(hf) -> None:
    """The GPU path (Triton attention and ops; on a GPU with its CUDA graphs captured, which a step
    with prompt rows must bypass; on CPU under the interpreter) scores as the torch path does."""
    pytest.importorskip("triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    state = hf.state_dict()
    source = ModelSource("tiny", model_config(hf), lambda d, dt: ((k, v.to(d, dt)) for k, v in state.items()),
                         _Tokenizer(), "tiny")
    prompt = list(range(30, 47))
    results = {}
    for backend in ("torch", "triton"):
        runner = ModelRunner.build(source, device, torch.float32, 32, BLOCK_SIZE, max_num_batched_tokens=32,
                                   max_num_seqs=4, attention_backend=backend)
        new = [NewRequestData("a", prompt, SamplingParams(temperature=0.0, prompt_logprobs=2)),
               NewRequestData("b", [5, 6, 7], SamplingParams(temperature=0.0))]
        runner.execute(StepBatch(0, new, [_chunk("a", prompt, 0, 9, [1, 2, 3, 4, 5]),
                                          _chunk("b", [5, 6, 7], 0, 3, [6])]))
        out = runner.execute(StepBatch(1, [], [_chunk("a", prompt, 9, 17, [1, 2, 3, 4, 5])])).sampled[0]
        results[backend] = out.prompt_logprobs
    torch_, triton_ = results["torch"], results["triton"]
    assert [(e.token_id, e.rank, [t for t, _ in e.top]) for e in triton_] == \
        [(e.token_id, e.rank, [t for t, _ in e.top]) for e in torch_]
    assert [e.logprob for e in triton_] == pytest.approx([e.logprob for e in torch_], abs=1e-4)
