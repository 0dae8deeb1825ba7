"""The steady decode step (decode_step.py): the same StepBatches and TokenEvents as the general walk
of schedule(), step for step, on random workloads under both policies, with every invariant checked;
and decode_chunks declining, with nothing changed, whenever a request is not a plain decode."""
from __future__ import annotations

import random

import pytest

import scheduler.scheduler as scheduler_module
from scheduler.config import SchedulerConfig
from scheduler.decode_step import decode_chunks
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepBatch, StepResult, TokenEvent
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

EOS = 2


def _sched(fast: bool, num_blocks: int = 48, **kw: object) -> Scheduler:
    s = Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=4, max_num_batched_tokens=24,
                                  long_prefill_threshold=8, eos_token_ids=frozenset({EOS}), **kw))
    s._decode_fast_path = fast
    return s


def _request(rid: str, rng: random.Random) -> GenerateRequest:
    prompt = [rng.randrange(3, 50) for _ in range(rng.choice((1, 3, 4, 7, 13, 30)))]
    params = SamplingParams(max_tokens=rng.randrange(1, 12), ignore_eos=rng.random() < 0.5)
    return GenerateRequest(rid, prompt, params, RequestTrace(rid), priority=rng.choice((0, 0, 0, 1)))


def _step(s: Scheduler, batch: StepBatch, tokens: dict[str, int]) -> list[TokenEvent]:
    sampled = [SampledToken(c.request_id, tokens[c.request_id]) for c in batch.chunks if c.sample]
    events = s.update(batch, StepResult(batch.step_id, sampled))
    s.check()
    return events


@pytest.mark.parametrize("policy", ["fcfs", "lanes"])
@pytest.mark.parametrize("shadow", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_the_fast_path_builds_what_the_general_walk_builds(policy, shadow, seed, monkeypatch) -> None:
    """Half the seeds on a small pool: growth at block boundaries, preemptions, revoked claims."""
    num_fast = 0

    def counted(*args: object) -> object:
        nonlocal num_fast
        chunks = decode_chunks(*args)  # type: ignore[arg-type]
        num_fast += chunks is not None
        return chunks

    monkeypatch.setattr(scheduler_module, "decode_chunks", counted)
    rng = random.Random(seed)
    num_blocks = 16 if seed % 2 else 48
    fast = _sched(True, num_blocks, policy=policy, shadow=shadow)
    slow = _sched(False, num_blocks, policy=policy, shadow=shadow)
    num_arrived = 0
    for _ in range(300):
        if rng.random() < 0.12:  # arrivals (each scheduler gets its own copy of the request)
            rid = f"r{num_arrived}"
            one, other = _request(rid, random.Random(num_arrived)), _request(rid, random.Random(num_arrived))
            num_arrived += 1
            assert fast.add_request(one) == slow.add_request(other)
        if fast.requests and rng.random() < 0.03:  # an abort
            rid = rng.choice(sorted(fast.requests))
            assert fast.abort(rid) == slow.abort(rid)
        a, b = fast.schedule(), slow.schedule()
        fast.check()
        slow.check()
        assert a == b
        if a is None:
            continue
        tokens = {c.request_id: rng.choice((EOS, rng.randrange(3, 50))) for c in a.chunks}
        assert _step(fast, a, tokens) == _step(slow, b, tokens)
    assert num_arrived > 20 and num_fast > 20  # both paths were exercised


def test_async_ahead_steps_stay_on_the_general_walk() -> None:
    """With a decode step in flight, its requests are scheduled ahead (PENDING_TOKEN) by the
    general walk: decode_chunks declines requests in flight."""
    rng = random.Random(7)
    fast, slow = _sched(True, async_scheduling=True), _sched(False, async_scheduling=True)
    for i in range(4):
        assert fast.add_request(_request(f"r{i}", random.Random(i))) is None
        assert slow.add_request(_request(f"r{i}", random.Random(i))) is None
    in_flight: list[tuple[StepBatch, StepBatch]] = []
    for _ in range(60):
        if fast.has_work() and fast.can_schedule_ahead():
            a, b = fast.schedule(), slow.schedule()
            assert a == b
            if a is not None:
                in_flight.append((a, b))
        if in_flight and (len(in_flight) == 2 or rng.random() < 0.5 or not fast.can_schedule_ahead()):
            a, b = in_flight.pop(0)
            tokens = {c.request_id: rng.randrange(3, 50) for c in a.chunks}
            assert _step(fast, a, tokens) == _step(slow, b, tokens)
    assert fast.num_decodes_ahead == slow.num_decodes_ahead > 0


def _decoding(num_tokens: int = 5) -> Scheduler:
    """Two requests decoding: prompts of 5 tokens, one token sampled (blocks of 4)."""
    s = _sched(True)
    for rid in ("a", "b"):
        s.add_request(GenerateRequest(rid, list(range(10, 10 + num_tokens)), SamplingParams(max_tokens=20),
                                      RequestTrace(rid)))
    batch = s.schedule()
    assert batch is not None
    _step(s, batch, {"a": 30, "b": 31})
    return s


def test_decode_chunks_builds_one_decode_per_running_request_in_arrival_order() -> None:
    s = _decoding()
    chunks = decode_chunks(s.running, 9, 4, 24, s.kv.pool.num_allocatable, s.placement.grow)
    assert chunks is not None
    assert [(c.request_id, c.token_ids, c.start_pos, c.sample) for c in chunks] == [
        ("a", [30], 5, True), ("b", [31], 5, True)]
    assert all(c.block_table is r.block_ids for c, r in zip(chunks, s.running))  # shared, as add_decode
    assert [r.in_flight for r in s.running] == [[(9, 1, False)]] * 2
    assert [r.num_in_flight_tokens for r in s.running] == [1, 1]


def test_decode_chunks_grows_the_requests_at_a_block_boundary_in_order() -> None:
    s = _decoding(num_tokens=8)  # 9 known, 8 computed: slot 8 starts a third block
    free_before = s.kv.pool.free_order()
    chunks = decode_chunks(s.running, 9, 4, 24, s.kv.pool.num_allocatable, s.placement.grow)
    assert chunks is not None and [c.start_pos for c in chunks] == [8, 8]
    assert [r.block_ids[2] for r in s.running] == free_before[:2]  # "a" first, as the walk grows them
    assert all(c.block_table is r.block_ids and len(c.block_table) == 3 for c, r in zip(chunks, s.running))
    s.check()


@pytest.mark.parametrize("why", ["in_flight", "no_room", "prefill", "priority", "budget"])
def test_decode_chunks_declines_and_changes_nothing(why: str) -> None:
    s = _decoding(num_tokens=8 if why == "no_room" else 5)  # 9 known: slot 8 needs a 3rd block
    a, b = s.running
    budget = 24
    num_allocatable = 1 if why == "no_room" else s.kv.pool.num_allocatable  # one block for two
    if why == "in_flight":
        b.in_flight.append((5, 1, False))
    elif why == "prefill":
        b.num_computed_tokens -= 1
    elif why == "priority":
        b.priority = 1
    elif why == "budget":
        budget = 1
    before = [(r.in_flight[:], r.in_flight_step, r.num_in_flight_tokens, r.block_ids[:]) for r in (a, b)]
    assert decode_chunks(s.running, 9, 4, budget, num_allocatable, s.placement.grow) is None
    assert [(r.in_flight, r.in_flight_step, r.num_in_flight_tokens, r.block_ids) for r in (a, b)] == before
