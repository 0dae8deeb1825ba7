"""chunked_prefill=False (the ablation's "no chunked prefill"): a prompt is prefilled whole in one
step or waits; the budget must hold the longest prompt."""
from __future__ import annotations

import pytest

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepBatch, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace


def _req(rid: str, num_prompt: int, max_tokens: int = 3) -> GenerateRequest:
    return GenerateRequest(rid, list(range(100, 100 + num_prompt)), SamplingParams(max_tokens=max_tokens),
                           RequestTrace(rid))


def _sched(policy: str, **kw: object) -> Scheduler:
    kw.setdefault("max_num_batched_tokens", 32)
    return Scheduler(SchedulerConfig(num_blocks=64, block_size=4, max_model_len=32, policy=policy,
                                     shadow=False, **kw))


def _step(s: Scheduler) -> StepBatch:
    batch = s.schedule()
    s.check()
    assert batch is not None
    sampled = [SampledToken(c.request_id, 7) for c in batch.chunks if c.sample]
    s.update(batch, StepResult(batch.step_id, sampled, {}))
    s.check()
    return batch


def _shape(batch: StepBatch) -> list[tuple[str, int, int]]:
    return [(c.request_id, c.start_pos, len(c.token_ids)) for c in batch.chunks]


@pytest.mark.parametrize("policy", ["fcfs", "lanes"])
def test_prompts_are_whole_or_wait(policy: str) -> None:
    s = _sched(policy, chunked_prefill=False, long_prefill_threshold=8)
    for rid, n in (("a", 20), ("b", 20)):
        assert s.add_request(_req(rid, n)) is None
    # a whole (the threshold of 8 caps no chunk); b would get 12 of its 20: it waits instead
    assert _shape(_step(s)) == [("a", 0, 20)]
    assert _shape(_step(s)) == [("a", 20, 1), ("b", 0, 20)]


def test_chunked_default_splits_the_same_prompts() -> None:
    s = _sched("fcfs", long_prefill_threshold=8)
    for rid, n in (("a", 20), ("b", 20)):
        assert s.add_request(_req(rid, n)) is None
    assert _shape(_step(s)) == [("a", 0, 8), ("b", 0, 8)]


def test_budget_must_hold_the_longest_prompt() -> None:
    with pytest.raises(ValueError, match="without chunked prefill.*max_num_batched_tokens \\(16\\).*32"):
        _sched("fcfs", chunked_prefill=False, max_num_batched_tokens=16)
    _sched("fcfs", chunked_prefill=True, max_num_batched_tokens=16)  # fine when chunking
