"""LanesPolicy: exact step contents for the short lane, chunked long prefills in the remaining
budget, priorities, aging, no head-of-line blocking, victims and the anti-thrash guard; and that a
preempted request still ends with the tokens it would have had (both policies)."""
from __future__ import annotations

import pytest

from scheduler.config import SchedulerConfig
from scheduler.lanes import LanesPolicy
from scheduler.policy import FcfsPolicy
from scheduler.request_state import RequestState, RequestStatus
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepBatch, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace


def make_req(rid: str, prompt: int, max_tokens: int = 2, base: int = 100, priority: int = 0) -> GenerateRequest:
    return GenerateRequest(rid, list(range(base, base + prompt)), SamplingParams(max_tokens=max_tokens),
                           RequestTrace(rid), priority=priority)


def make_sched(num_blocks: int = 65, block_size: int = 4, **kw: object) -> Scheduler:
    return Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=block_size, **kw))


def step(s: Scheduler, token=lambda s, rid: 7) -> StepBatch:
    batch = s.schedule()
    s.check()
    assert batch is not None
    sampled = [SampledToken(c.request_id, token(s, c.request_id)) for c in batch.chunks if c.sample]
    s.update(batch, StepResult(batch.step_id, sampled))
    s.check()
    return batch


def shape(batch: StepBatch) -> list[tuple[str, int, int, bool]]:
    return [(c.request_id, c.start_pos, len(c.token_ids), c.sample) for c in batch.chunks]


def test_default_policy_is_lanes_and_bad_names_are_refused() -> None:
    assert isinstance(make_sched().policy, LanesPolicy)
    assert isinstance(make_sched(policy="fcfs").policy, FcfsPolicy)
    with pytest.raises(ValueError, match="policy"):
        SchedulerConfig(num_blocks=8, policy="sjf")


def test_short_prompt_overtakes_a_long_prefill_that_progresses_in_the_rest() -> None:
    s = make_sched(max_num_batched_tokens=8, long_prefill_threshold=4)
    s.add_request(make_req("L", 12, base=100))  # uncached 12 >= 4: long lane
    s.add_request(make_req("S", 3, base=200))  # short lane
    assert shape(step(s)) == [("S", 0, 3, True), ("L", 0, 4, False)]  # L capped at 4 per step
    assert shape(step(s)) == [("S", 3, 1, True), ("L", 4, 4, False)]  # decodes first
    assert shape(step(s)) == [("L", 8, 4, True)]
    assert s.stats().num_admitted_short == 1 and s.stats().num_admitted_long == 1
    f = make_sched(max_num_batched_tokens=8, long_prefill_threshold=4, policy="fcfs")
    f.add_request(make_req("L", 12, base=100))
    f.add_request(make_req("S", 3, base=200))
    assert shape(step(f)) == [("L", 0, 4, False), ("S", 0, 3, True)]  # arrival order


def test_priority_first_then_lane_then_arrival() -> None:
    s = make_sched(max_num_batched_tokens=3, long_prefill_threshold=4)
    s.add_request(make_req("A", 3, max_tokens=1, base=100, priority=1))
    s.add_request(make_req("B", 3, max_tokens=1, base=200))
    s.add_request(make_req("C", 3, max_tokens=1, base=300))
    s.add_request(make_req("L", 6, max_tokens=1, base=400, priority=-1))  # long, but urgent
    assert [shape(step(s))[0][0] for _ in range(5)] == ["L", "L", "B", "C", "A"]


def _starve(s: Scheduler, num_steps: int) -> list[list[tuple[str, int, int, bool]]]:
    """A long prefill, and a new 3-token prompt before every step (a budget of 3 takes one)."""
    s.add_request(make_req("L", 6, max_tokens=1, base=100))
    out = []
    for i in range(num_steps):
        s.add_request(make_req(f"S{i}", 3, max_tokens=1, base=200 + 10 * i))
        out.append(shape(step(s)))
    return out


def test_aging_promotes_a_starved_long_prefill_ahead_of_the_short_lane() -> None:
    kw = dict(max_num_batched_tokens=3, long_prefill_threshold=4)
    assert _starve(make_sched(aging_steps=100, **kw), 4) == [[(f"S{i}", 0, 3, True)] for i in range(4)]
    s = make_sched(aging_steps=2, **kw)
    assert _starve(s, 5) == [[("S0", 0, 3, True)], [("S1", 0, 3, True)],
                             [("L", 0, 3, False)], [("L", 3, 3, True)], [("S2", 0, 3, True)]]


def test_no_head_of_line_blocking_until_a_long_request_is_promoted() -> None:
    # Plain admission (no claims): the lane policy alone keeps a long prefill that cannot hold
    # its prompt from starting, without holding back the short requests behind it ...
    s = make_sched(num_blocks=9, shadow=False, max_num_batched_tokens=64, long_prefill_threshold=16,
                   aging_steps=3)  # 8 usable blocks
    s.add_request(make_req("R", 12, max_tokens=8, base=100))  # short; grows to 5 blocks
    assert shape(step(s)) == [("R", 0, 12, True)]
    s.add_request(make_req("L", 24, max_tokens=1, base=200))  # long: needs 6 blocks, 3 left
    s.add_request(make_req("S", 2, max_tokens=2, base=300))
    assert shape(step(s)) == [("R", 12, 1, True), ("S", 0, 2, True)]
    batches = [shape(step(s)) for _ in range(2)]
    assert batches == [[("R", 13, 1, True), ("S", 2, 1, True)], [("R", 14, 1, True)]]
    # ... until it has waited aging_steps: then nobody behind it is admitted until it fits.
    s.add_request(make_req("T", 2, max_tokens=1, base=400))
    assert [shape(step(s)) for _ in range(4)] == [[("R", 15 + i, 1, True)] for i in range(4)]
    assert shape(step(s)) == [("L", 0, 16, False), ("T", 0, 2, True)]  # L chunked at 16


def test_victim_is_the_cheapest_to_recompute_unless_protected() -> None:
    s = make_sched(num_blocks=8, block_size=2, shadow=False, max_num_batched_tokens=64)  # 7 usable
    s.add_request(make_req("a", 4, max_tokens=4, base=100))  # 2 blocks
    s.add_request(make_req("c", 2, max_tokens=4, base=200))  # 1 block
    s.add_request(make_req("b", 6, max_tokens=4, base=300))  # 3 blocks
    step(s)
    # a takes the last free block; b needs one more: c (2 computed) is cheaper than b itself (6).
    assert shape(step(s)) == [("a", 4, 1, True), ("b", 6, 1, True)]
    assert s.requests["c"].status is RequestStatus.PREEMPTED and s.num_preemptions == 1
    f = make_sched(num_blocks=8, block_size=2, shadow=False, max_num_batched_tokens=64, policy="fcfs")
    for rid, n, base in (("a", 4, 100), ("c", 2, 200), ("b", 6, 300)):
        f.add_request(make_req(rid, n, max_tokens=4, base=base))
    step(f)
    assert shape(step(f)) == [("a", 4, 1, True), ("c", 2, 1, True)]  # fcfs: b, newest, goes
    assert f.requests["b"].status is RequestStatus.PREEMPTED


def test_anti_thrash_guard_and_priority_in_victim_choice() -> None:
    pol = LanesPolicy(SchedulerConfig(num_blocks=8, max_preemptions_unprotected=2))
    reqs = []
    for i, (computed, preempted, prio) in enumerate([(50, 0, 0), (10, 2, 0), (30, 0, 0), (40, 0, 1)]):
        r = RequestState(make_req(f"r{i}", 60, base=100 * i, priority=prio), arrival_seq=i)
        r.num_computed_tokens, r.num_preemptions = computed, preempted
        reqs.append(r)
    assert pol.pick_victim(reqs).request_id == "r3"  # lowest priority first
    reqs[3].priority = 0
    assert pol.pick_victim(reqs).request_id == "r2"  # r1 is cheaper, but protected
    reqs[2].in_flight_step = 5
    reqs[3].in_flight_step = 5
    reqs[0].num_preemptions = 2
    assert pol.pick_victim(reqs).request_id == "r1"  # everyone left is protected: cheapest
    for r in reqs:
        r.in_flight_step = 5
    assert pol.pick_victim(reqs) is None


def _greedy(s: Scheduler, rid: str) -> int:
    """A deterministic function of the whole sequence, like greedy decoding."""
    toks = s.requests[rid].all_token_ids
    return 1000 + (sum(t * (i + 1) for i, t in enumerate(toks)) % 97)


@pytest.mark.parametrize("policy", ["fcfs", "lanes"])
def test_preempted_requests_finish_with_the_same_tokens(policy: str) -> None:
    def run(num_blocks: int) -> tuple[dict[str, list[int]], int]:
        s = make_sched(num_blocks=num_blocks, block_size=2, policy=policy, shadow=False,
                       max_num_batched_tokens=16, long_prefill_threshold=6)
        for i, n in enumerate((9, 3, 12, 5, 2, 7)):
            s.add_request(make_req(f"r{i}", n, max_tokens=6, base=100 * (i + 1)))
        outputs: dict[str, list[int]] = {}
        while not s.is_idle():
            batch = s.schedule()
            assert batch is not None
            sampled = [SampledToken(c.request_id, _greedy(s, c.request_id)) for c in batch.chunks if c.sample]
            for ev in s.update(batch, StepResult(batch.step_id, sampled)):
                outputs.setdefault(ev.request_id, []).extend(ev.token_ids)
            s.check()
        return outputs, s.num_preemptions

    small, num_small = run(num_blocks=10)
    big, num_big = run(num_blocks=200)
    assert num_small > 0 and num_big == 0
    assert small == big and all(len(v) == 6 for v in big.values())


def test_a_long_prefill_alone_takes_the_whole_budget_and_is_chunked_again_when_another_arrives() -> None:
    s = make_sched(max_num_batched_tokens=8, long_prefill_threshold=4)
    s.add_request(make_req("L", 20, base=100))
    assert shape(step(s)) == [("L", 0, 8, False)]  # nobody else: no chunk below the budget
    s.add_request(make_req("M", 9, base=300))  # long lane too (9 >= 4): both are chunked again
    assert shape(step(s)) == [("L", 8, 4, False), ("M", 0, 4, False)]
    f = make_sched(max_num_batched_tokens=8, long_prefill_threshold=4, policy="fcfs")
    f.add_request(make_req("L", 20, base=100))
    assert shape(step(f)) == [("L", 0, 4, False)]  # vLLM's FCFS keeps its chunk cap
