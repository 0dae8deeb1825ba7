"""ModelRunner: batched steps (prefill chunks mixed with decodes) equal each request run alone."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import pytest
import torch
from gpu_runner_helpers import serve
from tiny_hf_models import hf_model, model_config

from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model_runner import ModelRunner
from gpu_stage.warm_up import warm_up_kernels
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

BLOCK_SIZE = 4
EOS = 1


class FakeTokenizer:
    vocab_size = 400
    bos_token_id = None
    eos_token_ids = frozenset({EOS})
    add_bos = False
    chat_template = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) % 400 for c in text]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)

    def token_bytes(self, token_id: int) -> bytes:
        return chr(token_id).encode()

    def is_special(self, token_id: int) -> bool:
        return token_id == EOS


@pytest.fixture(scope="module")
def source() -> ModelSource:
    hf = hf_model("llama", num_hidden_layers=2)
    state = hf.state_dict()

    def weights(device, dtype):
        return ((name, t.to(device=device, dtype=dtype)) for name, t in state.items())

    return ModelSource("tiny", model_config(hf), weights, FakeTokenizer(), "tiny-seed0")


def _runner(source: ModelSource, num_blocks: int = 64) -> ModelRunner:
    return ModelRunner.build(source, "cpu", torch.float32, num_blocks, BLOCK_SIZE, max_num_batched_tokens=64, max_num_seqs=8)


@dataclass
class _Req:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    arrival_step: int = 0
    output: list[int] = field(default_factory=list)
    num_computed: int = 0
    blocks: list[int] = field(default_factory=list)


def _drive(runner: ModelRunner, reqs: list[_Req], token_budget: int, seed: int = 0) -> dict[str, list[int]]:
    """A minimal catch-up scheduler: decodes first, then prefill chunks under the token budget;
    blocks come from a shuffled free list; finished requests are reported the next step."""
    free = list(range(runner.kv_cache.num_blocks))
    random.Random(seed).shuffle(free)
    running: list[_Req] = []
    finished: list[str] = []
    step = 0
    while any(len(r.output) < r.params.max_tokens for r in reqs):
        new = [r for r in reqs if r.arrival_step == step]
        running += new
        budget, chunks = token_budget, []
        for r in sorted(running, key=lambda r: r.num_computed < len(r.prompt)):  # decodes first
            tokens = r.prompt + r.output
            n = min(len(tokens) - r.num_computed, budget)
            if n <= 0:
                continue
            end = r.num_computed + n
            while len(r.blocks) * BLOCK_SIZE < end:
                r.blocks.append(free.pop())
            chunks.append(ScheduledChunk(r.request_id, tokens[r.num_computed : end], r.num_computed, list(r.blocks), end == len(tokens)))
            budget -= n
        batch = StepBatch(step, [NewRequestData(r.request_id, r.prompt, r.params) for r in new], chunks, finished)
        result = runner.execute(batch)
        assert not result.failed and result.error is None
        by_id = {r.request_id: r for r in running}
        for chunk in chunks:
            by_id[chunk.request_id].num_computed += len(chunk.token_ids)
        finished = []
        for token in result.sampled:
            r = by_id[token.request_id]
            r.output.append(token.token_id)
            if len(r.output) == r.params.max_tokens:
                finished.append(r.request_id)
                free += r.blocks
                running.remove(r)
        step += 1
    runner.execute(StepBatch(step, [], [], finished))
    return {r.request_id: r.output for r in reqs}


def _requests() -> list[_Req]:
    gen = torch.Generator().manual_seed(5)
    specs = [  # (prompt length, params, arrival step)
        (23, SamplingParams(max_tokens=12, temperature=0.0), 0),
        (5, SamplingParams(max_tokens=16, temperature=0.0), 0),
        (40, SamplingParams(max_tokens=8, temperature=0.8, seed=11, top_p=0.9), 1),
        (9, SamplingParams(max_tokens=10, temperature=1.0, seed=3, top_k=20, frequency_penalty=0.4), 2),
        (17, SamplingParams(max_tokens=9, temperature=0.0, repetition_penalty=1.3, min_tokens=4), 3),
    ]
    return [
        _Req(f"r{i}", torch.randint(2, 400, (n,), generator=gen).tolist(), params, arrival)
        for i, (n, params, arrival) in enumerate(specs)
    ]


def test_batched_steps_equal_each_request_alone(source: ModelSource) -> None:
    runner = _runner(source)
    together = _drive(runner, _requests(), token_budget=16)  # forces chunked prefill + mixing
    assert not runner.states.requests  # every finished request's state was dropped
    assert runner.penalties.num_slots_in_use == 0  # and its penalty history slot freed
    for req in _requests():
        req.arrival_step = 0
        alone = _drive(_runner(source), [req], token_budget=64, seed=9)
        assert together[req.request_id] == alone[req.request_id], req.request_id
    assert all(len(together[r.request_id]) == r.params.max_tokens for r in _requests())


def _one_step(runner: ModelRunner, ids: list[str], prompt_len: int = 6) -> StepBatch:
    new = [NewRequestData(i, list(range(2, 2 + prompt_len)), SamplingParams(temperature=0.0)) for i in ids]
    chunks = [ScheduledChunk(i, list(range(2, 2 + prompt_len)), 0, [k * 2, k * 2 + 1], True) for k, i in enumerate(ids)]
    return StepBatch(0, new, chunks)


def test_request_failure_fails_only_that_request(source: ModelSource) -> None:
    runner = _runner(source)

    def fail_b(request_id: str) -> None:
        if request_id == "b":
            raise RuntimeError("injected")

    runner.request_fault_injector = fail_b
    result = runner.execute(_one_step(runner, ["a", "b", "c"]))
    assert set(result.failed) == {"b"} and "injected" in result.failed["b"]
    assert [t.request_id for t in result.sampled] == ["a", "c"]
    assert result.sampled[0].token_id == result.sampled[1].token_id  # same prompt, greedy


def test_a_penalty_history_that_cannot_be_allocated_fails_only_its_request(source: ModelSource) -> None:
    runner = _runner(source)

    def no_memory() -> None:
        raise RuntimeError("out of memory (injected)")

    runner.penalties._grow = no_memory
    batch = _one_step(runner, ["plain", "penalised"])
    batch.new_requests[1].params = SamplingParams(temperature=0.0, repetition_penalty=1.2)
    result = runner.execute(batch)
    assert set(result.failed) == {"penalised"} and "out of memory" in result.failed["penalised"]
    assert [t.request_id for t in result.sampled] == ["plain"]


def test_step_fault_propagates_and_unknown_request_fails(source: ModelSource) -> None:
    runner = _runner(source)

    def boom(batch: StepBatch) -> None:
        raise RuntimeError("step fault")

    runner.fault_injector = boom
    with pytest.raises(RuntimeError, match="step fault"):
        runner.execute(_one_step(runner, ["a"]))
    runner.fault_injector = None
    batch = _one_step(runner, ["a", "ghost"])
    batch.new_requests = batch.new_requests[:1]  # "ghost" was never announced
    result = runner.execute(batch)
    assert set(result.failed) == {"ghost"} and [t.request_id for t in result.sampled] == ["a"]
    assert runner.states.requests["a"].output_token_ids == [result.sampled[0].token_id]
    runner.execute(StepBatch(1, [], [], finished_ids=["a"]))
    assert "a" not in runner.states.requests


def test_limits_and_partial_prefill(source: ModelSource) -> None:
    runner = _runner(source)
    with pytest.raises(RuntimeError, match="over the limits"):
        runner.execute(_one_step(runner, [f"r{i}" for i in range(9)], prompt_len=2))
    new = [NewRequestData("p", list(range(2, 12)), SamplingParams(temperature=0.0))]
    partial = ScheduledChunk("p", list(range(2, 8)), 0, [0, 1], sample=False)
    assert runner.execute(StepBatch(0, new, [partial])).sampled == []
    rest = ScheduledChunk("p", list(range(8, 12)), 6, [0, 1, 2], sample=True)
    chunked = runner.execute(StepBatch(1, [], [rest])).sampled[0].token_id
    other = _runner(source)
    whole = ScheduledChunk("q", list(range(2, 12)), 0, [5, 3, 7], sample=True)
    one_shot = other.execute(StepBatch(0, [NewRequestData("q", whole.token_ids, SamplingParams(temperature=0.0))], [whole]))
    assert chunked == one_shot.sampled[0].token_id
    warm_up_kernels(runner.model, runner.kv_cache, runner.inputs, runner.sampler, runner.attention_backend)
    # (the start-up warm-up runs without touching request state)
    assert set(runner.states.requests) == {"p"}


def test_steps_launched_ahead_of_their_inputs_give_the_same_tokens(source: ModelSource) -> None:
    """Greedy, seeded top_p / top_k and penalised requests: the same tokens whether each step is
    built after the previous result or launched ahead of it with its inputs fed on the device."""
    reqs = [(r.request_id, r.prompt, r.params) for r in _requests()]
    ahead, num_pending = serve(_runner(source), reqs, async_scheduling=True, eos=EOS)
    one_at_a_time, none_pending = serve(_runner(source), reqs, async_scheduling=False, eos=EOS)
    assert num_pending > 10 and none_pending == 0
    assert ahead == one_at_a_time
    for req in _requests():  # each reply ran to its end: EOS or max_tokens
        out = ahead[req.request_id]
        assert out[-1] == EOS or len(out) == req.params.max_tokens, (req.request_id, out)


def test_min_tokens_counts_the_tokens_of_steps_in_flight(source: ModelSource) -> None:
    """Every id but 0 and 1 stops the reply, so min_tokens alone decides its length: exactly
    min_tokens + 1 tokens, whether each decode waits for the previous result or is launched ahead
    of it (the EOS ban must count the token still being sampled, or it lasts a step too long)."""
    params = SamplingParams(max_tokens=20, temperature=0.0, min_tokens=6, stop_token_ids=tuple(range(2, 400)))
    reqs = [("m", list(range(30, 41)), params)]
    ahead, num_pending = serve(_runner(source), reqs, async_scheduling=True, eos=EOS)
    one_at_a_time, _ = serve(_runner(source), reqs, async_scheduling=False, eos=EOS)
    assert num_pending >= 5  # its decodes were launched ahead
    assert ahead == one_at_a_time
    out = ahead["m"]
    assert len(out) == 7 and set(out[:6]) <= {0, 1} and out[6] >= 2, out


def test_a_step_reports_when_it_was_taken_up_queued_and_synced(source: ModelSource) -> None:
    runner = _runner(source)
    before = time.perf_counter_ns()
    result = runner.execute(_one_step(runner, ["a"]))
    after = time.perf_counter_ns()
    assert before <= result.started_ns <= result.launched_ns <= result.synced_ns <= after
    assert result.duration_ns == result.synced_ns - result.started_ns


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="host syncs are a CUDA matter")
@pytest.mark.parametrize("enforce_eager", [False, True], ids=["graphs", "eager"])
def test_launching_decode_steps_makes_no_synchronizing_call(source: ModelSource, enforce_eager: bool) -> None:
    """Once its requests are admitted, queueing a decode step (and the one after it, launched
    ahead with its inputs fed on the device) never waits for the device, whatever the requests
    ask for: penalties, min_tokens, truncation, seeds, logprobs."""
    from gpu_runner_helpers import make_runner

    from stages.messages import PENDING_TOKEN

    runner = make_runner(source, enforce_eager=enforce_eager)
    params = [SamplingParams(temperature=0.8, seed=1, repetition_penalty=1.2, frequency_penalty=0.3, min_tokens=8),
              SamplingParams(temperature=1.0, seed=2, top_k=20, top_p=0.9, min_p=0.05, logprobs=3),
              SamplingParams(temperature=0.0, min_tokens=3, stop_token_ids=(5, 6)), SamplingParams(temperature=0.0)]
    ids = [f"r{i}" for i in range(4)]
    tables = [list(range(1 + 8 * i, 9 + 8 * i)) for i in range(4)]
    prompts = [list(range(10 + i, 20 + i)) for i in range(4)]
    result = runner.execute(StepBatch(0, [NewRequestData(r, p, q) for r, p, q in zip(ids, prompts, params)],
                                      [ScheduledChunk(r, p, 0, t, True) for r, p, t in zip(ids, prompts, tables)]))
    last = {t.request_id: t.token_id for t in result.sampled}
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        first = runner.launch(StepBatch(1, [], [ScheduledChunk(r, [last[r]], 10, t, True) for r, t in zip(ids, tables)]))
        ahead = runner.launch(StepBatch(2, [], [ScheduledChunk(r, [PENDING_TOKEN], 11, t, True)
                                                for r, t in zip(ids, tables)]))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for launched in (first, ahead):
        done = runner.complete(launched)
        assert not done.failed and len(done.sampled) == 4
