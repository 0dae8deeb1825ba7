"""A runner hook's points on the ModelRunner (CPU, dummy:tiny), with a toy hook: its logits
processor edits the sampled rows' logits before the draw and the logprobs (a banned token is never
drawn nor reported), it takes the tokens of the requests it claims off the plain path, it hears when
a step's tokens are recorded and of every request that ends, and a step it has no share in
(begin -> None) is a plain one."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from gpu_stage.loaders import load_model_source
from gpu_stage.model_runner import ModelRunner
from gpu_stage.sampling.rows import SamplingRow
from gpu_stage.sampling.states import SamplingState, SamplingStates
from stages.messages import NewRequestData, SampledToken, ScheduledChunk, StepBatch, StepResult
from stages.sampling import SamplingParams

PROMPT = [5, 9, 17, 33]


@dataclass
class BanStep:
    """Bans one token in every sampled row; claims some requests and tags their tokens."""

    banned: int
    claimed: set[str]
    feed: None = None
    extra: None = None
    accepted: list[str] = field(default_factory=list)
    completed: list[int] = field(default_factory=list)  # step ids whose tokens were all recorded
    queued: int = 0  # calls of sampling_queued: once per step that sampled, before its launch returns

    def rows(self, chunk: ScheduledChunk, state: SamplingState) -> list[SamplingRow] | None:
        return None

    def process_logits(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        out = logits.clone()
        out[:, self.banned] = float("-inf")
        return out

    def sampling_queued(self) -> None:
        self.queued += 1

    def accept(self, request_id: str, run: list[SampledToken], extra: list[int], result: StepResult) -> None:
        self.accepted.append(request_id)
        result.sampled.append(SampledToken(request_id, run[0].token_id + 1000))

    def done(self, result: StepResult) -> None:
        self.completed.append(result.step_id)


class BanHook:
    def __init__(self, banned: int, claimed: set[str]) -> None:
        self.banned, self.claimed = banned, claimed
        self.steps: list[BanStep] = []
        self.released: list[str] = []

    def begin(self, batch: StepBatch, states: SamplingStates) -> BanStep | None:
        if batch.step_id % 2:  # odd steps: no share (a plain step)
            return None
        self.steps.append(BanStep(self.banned, self.claimed))
        return self.steps[-1]

    def release(self, request_id: str) -> None:
        self.released.append(request_id)


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    return ModelRunner.build(load_model_source("dummy:tiny"), "cpu", torch.float32, num_blocks=8, block_size=16,
                             max_num_batched_tokens=64, max_num_seqs=4)


def first_tokens(runner: ModelRunner, step_id: int) -> dict[str, SampledToken]:
    params = SamplingParams(max_tokens=4, temperature=0.0, logprobs=1)
    new = [NewRequestData(rid, PROMPT, params) for rid in ("a", "b")]
    chunks = [ScheduledChunk(rid, PROMPT, 0, [1 + i], True) for i, rid in enumerate(("a", "b"))]
    result = runner.execute(StepBatch(step_id, new, chunks))
    runner.execute(StepBatch(step_id + 1, [], [], ["a", "b"]))  # forget them
    return {t.request_id: t for t in result.sampled}


def test_a_hooks_processor_bans_a_token_its_claims_leave_the_plain_path_and_it_hears_of_ends(
        runner: ModelRunner) -> None:
    plain = first_tokens(runner, 0)
    greedy = plain["a"].token_id
    assert plain["b"].token_id == greedy  # the same prompt
    hook = BanHook(greedy, {"b"})
    runner.hook = hook
    try:
        hooked = first_tokens(runner, 2)
        unshared = first_tokens(runner, 5)  # an odd step: begin() -> None
    finally:
        runner.hook = None
    a, b = hooked["a"], hooked["b"]
    assert a.token_id != greedy  # the processor ran before the draw
    # The logprobs are the processed distribution's (as vLLM's under a grammar): the banned token is not in them.
    assert a.top_logprobs[0][0] == a.token_id != greedy
    assert b.token_id == a.token_id + 1000 and hook.steps[0].accepted == ["b"]  # claimed: the hook's
    assert len(hook.steps) == 1 and [t.token_id for t in unshared.values()] == [greedy, greedy]  # a plain step
    assert hook.steps[0].completed == [2]  # done() once, after its tokens
    assert hook.steps[0].queued == 1
    assert hook.released == ["a", "b", "a", "b"]


class FailingBatchStep(BanStep):
    """Its processor fails a batch of more than one row: the runner samples row by row."""

    def process_logits(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        if len(rows) > 1:
            raise RuntimeError("a faulty processor")
        return super().process_logits(logits, rows)


class FailingBatchHook(BanHook):
    def begin(self, batch: StepBatch, states: SamplingStates) -> BanStep | None:
        self.steps.append(FailingBatchStep(self.banned, self.claimed))
        return self.steps[-1]


def test_a_hook_hears_its_sampling_queued_once_when_the_batch_fails_and_is_retried(runner: ModelRunner) -> None:
    hook = FailingBatchHook(3, set())
    runner.hook = hook
    try:
        params = SamplingParams(max_tokens=4, temperature=0.0)
        new = [NewRequestData(rid, PROMPT, params) for rid in ("a", "b")]
        chunks = [ScheduledChunk(rid, PROMPT, 0, [1 + i], True) for i, rid in enumerate(("a", "b"))]
        result = runner.execute(StepBatch(10, new, chunks))
        runner.execute(StepBatch(11, [], [], ["a", "b"]))
    finally:
        runner.hook = None
    assert len(result.sampled) == 2 and not result.failed and all(t.token_id != 3 for t in result.sampled)
    assert hook.steps[0].queued == 1  # once, after the retry
