"""Async scheduling in the scheduler core: while a decode-only step is in flight, the next step is
built at once, each decode in it reading the token the step in flight samples (PENDING_TOKEN).
Exact chunks, the order results apply in, and every case where no decode may be built ahead."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.messages import PENDING_TOKEN, GenerateRequest, SampledToken, StepBatch, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

EOS = 2


def make_sched(num_blocks: int = 64, **kw: object) -> Scheduler:
    kw.setdefault("policy", "fcfs")
    kw.setdefault("shadow", False)
    return Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=4, eos_token_ids=frozenset({EOS}), **kw))


def add(s: Scheduler, rid: str, prompt_len: int, max_tokens: int = 8, **params: object) -> None:
    req = GenerateRequest(rid, list(range(100, 100 + prompt_len)), SamplingParams(max_tokens=max_tokens, **params),
                          RequestTrace(rid))
    assert s.add_request(req) is None


def chunks(batch: StepBatch) -> list[tuple[str, list[int], int, bool]]:
    return [(c.request_id, c.token_ids, c.start_pos, c.sample) for c in batch.chunks]


def result(batch: StepBatch, tokens: dict[str, int]) -> StepResult:
    return StepResult(batch.step_id, [SampledToken(c.request_id, tokens[c.request_id]) for c in batch.chunks if c.sample])


def prefilled(s: Scheduler, *rids_and_lens: tuple[str, int], **params: object) -> None:
    """Requests through their prefill, each with its first token (10) applied."""
    for rid, n in rids_and_lens:
        add(s, rid, n, **params)
    batch = s.schedule()
    s.update(batch, result(batch, {rid: 10 for rid, _ in rids_and_lens}))
    s.check()


def test_a_decode_step_in_flight_gets_its_successor_built_ahead() -> None:
    s = make_sched()
    prefilled(s, ("a", 5), ("b", 3))
    step1 = s.schedule()  # plain decodes of the known first tokens
    assert chunks(step1) == [("a", [10], 5, True), ("b", [10], 3, True)]
    assert s.can_schedule_ahead()
    step2 = s.schedule()  # built before step 1's result: inputs are step 1's samples
    s.check()
    assert chunks(step2) == [("a", [PENDING_TOKEN], 6, True), ("b", [PENDING_TOKEN], 4, True)]
    assert not s.can_schedule_ahead()  # two in flight: the most there may be
    assert s.requests["b"].block_ids[-1] == step2.chunks[1].block_table[1]  # b grew into a 2nd block
    events = s.update(step1, result(step1, {"a": 11, "b": 12}))
    assert [(e.request_id, e.token_ids) for e in events] == [("a", [11]), ("b", [12])]
    s.check()
    step3 = s.schedule()  # step 2 (decodes only) still in flight: ahead of it again
    assert chunks(step3) == [("a", [PENDING_TOKEN], 7, True), ("b", [PENDING_TOKEN], 5, True)]
    s.update(step2, result(step2, {"a": 13, "b": 14}))
    s.update(step3, result(step3, {"a": 15, "b": 16}))
    s.check()
    assert s.requests["a"].output_token_ids == [10, 11, 13, 15]
    assert s.requests["a"].num_computed_tokens == 5 + 3 and s.requests["a"].num_tokens == 5 + 4


def test_a_request_that_ends_in_flight_drops_what_was_built_ahead_for_it() -> None:
    s = make_sched()
    prefilled(s, ("a", 5), ("b", 5))
    step1 = s.schedule()
    step2 = s.schedule()
    events = s.update(step1, result(step1, {"a": EOS, "b": 11}))
    assert [e.finish_reason for e in events] == ["stop", None]
    assert "a" not in s.requests and s.kv.pool.num_used == len(s.requests["b"].block_ids)
    s.check()
    events = s.update(step2, result(step2, {"a": 99, "b": 12}))  # a's ahead decode: dropped
    assert [(e.request_id, e.token_ids) for e in events] == [("b", [12])]
    s.check()
    assert s.schedule().finished_ids == ["a"]  # the runner forgets a once both steps are done


def test_an_abort_with_two_steps_in_flight_drops_both_results() -> None:
    s = make_sched()
    prefilled(s, ("a", 5), ("b", 5))
    step1, step2 = s.schedule(), s.schedule()
    assert s.abort("a") is not None
    s.check()
    assert [e.request_id for e in s.update(step1, result(step1, {"a": 11, "b": 11}))] == ["b"]
    assert [e.request_id for e in s.update(step2, result(step2, {"a": 12, "b": 12}))] == ["b"]
    s.check()


def test_no_decode_ahead_when_the_pending_token_may_be_the_last() -> None:
    s = make_sched(max_model_len=12)
    prefilled(s, ("short", 4, ), ("long", 4))
    s.requests["short"].params = SamplingParams(max_tokens=2)  # 1 output so far; the pending one ends it
    s.requests["long"].all_token_ids += [10] * 6  # 11 tokens: the pending 12th fills max_model_len
    s.requests["long"].num_computed_tokens = 10
    s.requests["long"].block_ids += s.kv.pool.allocate(2)
    s.check()
    step1 = s.schedule()
    assert [c.request_id for c in step1.chunks] == ["short", "long"]
    assert s.can_schedule_ahead() and s.schedule() is None


def test_penalised_and_min_tokens_requests_get_decodes_ahead() -> None:
    """Their sampling needs nothing the host lacks: a penalised request's history is kept on the
    device (gpu_stage/sampling/penalties.py), and min_tokens counts the rows the GPU stage launched."""
    s = make_sched()
    prefilled(s, ("pen", 4))
    add(s, "min", 4, min_tokens=3)
    add(s, "plain", 4)
    s.requests["pen"].params = SamplingParams(max_tokens=8, frequency_penalty=0.5)
    batch = s.schedule()  # pen decodes, min and plain prefill
    s.update(batch, result(batch, {"pen": 11, "min": 10, "plain": 10}))
    step1 = s.schedule()
    assert [c.request_id for c in step1.chunks] == ["pen", "min", "plain"]
    step2 = s.schedule()  # min has 1 output < min_tokens 3: built ahead all the same
    assert [c.request_id for c in step2.chunks] == ["pen", "min", "plain"]
    assert all(c.token_ids == [PENDING_TOKEN] for c in step2.chunks)


def test_nothing_is_built_ahead_of_a_prefill_or_with_async_off() -> None:
    s = make_sched()
    add(s, "a", 5)
    s.schedule()  # a's prefill in flight
    assert not s.can_schedule_ahead()
    s = make_sched(async_scheduling=False)
    prefilled(s, ("a", 5))
    s.schedule()
    assert not s.can_schedule_ahead()


def test_no_room_means_no_decode_ahead_and_nobody_is_preempted_for_one() -> None:
    s = make_sched(num_blocks=5)  # 4 usable blocks of 4 tokens
    prefilled(s, ("a", 8))  # 2 full blocks: a's next decode needs a 3rd
    add(s, "b", 3)
    step1 = s.schedule()  # a grows into a 3rd block, b prefills into the 4th: the pool is full
    assert [c.request_id for c in step1.chunks] == ["a", "b"] and s.kv.pool.num_free == 0
    s.update(step1, result(step1, {"a": 11, "b": 10}))
    step2 = s.schedule()  # a at position 9, b at 3: both in blocks they hold
    assert chunks(step2) == [("a", [11], 9, True), ("b", [10], 3, True)]
    step3 = s.schedule()  # ahead: a's position 10 is in its 3rd block; b's 4 needs a block there is not
    assert chunks(step3) == [("a", [PENDING_TOKEN], 10, True)]
    assert s.num_preemptions == 0
    s.check()
