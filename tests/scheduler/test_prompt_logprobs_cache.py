"""A request asking for prompt logprobs skips the prefix cache: a cached prompt is computed again
from position 0 (every position it scores must be computed), its blocks are not registered, it is
no follower of a sample group, and its prompt logprobs ride the TokenEvent of its first token."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, PromptLogprob, SampledToken, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

PROMPT = list(range(100, 120))  # 5 full blocks of 4


def _req(rid: str, prompt_logprobs: int | None = None, leader_id: str | None = None) -> GenerateRequest:
    params = SamplingParams(max_tokens=2, ignore_eos=True, prompt_logprobs=prompt_logprobs)
    return GenerateRequest(rid, PROMPT, params, RequestTrace(rid), leader_id=leader_id)


def _sched() -> Scheduler:
    return Scheduler(SchedulerConfig(num_blocks=64, block_size=4, enable_prefix_caching=True,
                                     max_num_batched_tokens=64, policy="fcfs", shadow=False))


def _run(s: Scheduler, token: SampledToken | None = None):
    """One step; the sampled rows get token 7 (or `token` for its request)."""
    batch = s.schedule()
    assert batch is not None
    sampled = [token if token is not None and token.request_id == c.request_id else SampledToken(c.request_id, 7)
               for c in batch.chunks if c.sample]
    events = s.update(batch, StepResult(batch.step_id, sampled))
    s.check()
    return batch, events


def _finish(s: Scheduler, rid: str) -> None:
    while rid in s.requests:
        _run(s)


def test_a_cached_prompt_is_computed_again_and_not_registered() -> None:
    s = _sched()
    assert s.add_request(_req("warm")) is None
    _finish(s, "warm")
    assert s.add_request(_req("again")) is None
    batch, _ = _run(s)
    assert batch.chunks[0].start_pos == 16  # the plain request hits 4 blocks (the last token is computed)
    _finish(s, "again")
    num_cached = s.kv.pool.num_cached
    assert s.add_request(_req("scored", prompt_logprobs=2)) is None
    batch, _ = _run(s)
    assert (batch.chunks[0].start_pos, len(batch.chunks[0].token_ids)) == (0, 20)
    assert s.requests["scored"].num_cached_tokens == 0 and s.requests["scored"].block_hashes == []
    _finish(s, "scored")
    assert s.kv.pool.num_cached == num_cached  # its own blocks were not registered


def test_no_follower_and_the_first_event_carries_the_prompt_logprobs() -> None:
    s = _sched()
    assert s.add_request(_req("g-0", prompt_logprobs=1)) is None
    assert s.add_request(_req("g-1", prompt_logprobs=1, leader_id="g-0")) is None
    assert s.requests["g-1"].sample_leader is None  # a request of its own
    scores = [PromptLogprob(t, -1.0, 1, [(t, -1.0)]) for t in PROMPT[1:]]
    batch, events = _run(s, SampledToken("g-0", 9, prompt_logprobs=scores))
    assert [(c.request_id, c.start_pos, len(c.token_ids)) for c in batch.chunks] == [("g-0", 0, 20), ("g-1", 0, 20)]
    by_id = {e.request_id: e for e in events}
    assert by_id["g-0"].prompt_logprobs is scores and by_id["g-0"].token_ids == [9]
    assert by_id["g-1"].prompt_logprobs is None
