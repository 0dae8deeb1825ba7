"""Sample groups (n > 1): the leader prefills alone, followers share its full prompt blocks and
compute only the rest; aborts and preemption of either side; prefix caching on and off.

Every test drives the real Scheduler with a fake GPU step and calls check() (ref counts equal the
blocks the requests hold, claims add up) after every schedule() and update()."""
from __future__ import annotations

import pytest

from scheduler.config import SchedulerConfig
from scheduler.request_state import RequestStatus
from scheduler.sample_group import admission_hits, is_held
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepBatch, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

PROMPT = list(range(100, 140))  # 40 tokens: 2 full blocks of 16 shared, 8 tokens each computes


def group(prompt: list[int], n: int, max_tokens: int = 4, rid: str = "g") -> list[GenerateRequest]:
    return [GenerateRequest(f"{rid}-{i}", prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                            RequestTrace(f"{rid}-{i}"), leader_id=None if i == 0 else f"{rid}-0")
            for i in range(n)]


def make_sched(caching: bool, block_size: int = 16, **kw: object) -> Scheduler:
    kw.setdefault("num_blocks", 64)
    kw.setdefault("max_num_batched_tokens", 256)
    kw.setdefault("prior_output_tokens", 4)
    return Scheduler(SchedulerConfig(block_size=block_size, enable_prefix_caching=caching, **kw))


def run_step(s: Scheduler, before_update=None) -> StepBatch:
    batch = s.schedule()
    s.check()
    assert batch is not None
    if before_update is not None:
        before_update(batch)
        s.check()
    sampled = [SampledToken(c.request_id, 1000 + s.requests[c.request_id].num_output_tokens)
               for c in batch.chunks if c.sample and c.request_id in s.requests]
    s.update(batch, StepResult(batch.step_id, sampled))
    s.check()
    return batch


def shape(batch: StepBatch) -> list[tuple[str, int, int, bool]]:
    return [(c.request_id, c.start_pos, len(c.token_ids), c.sample) for c in batch.chunks]


def drain(s: Scheduler) -> None:
    for _ in range(100):
        if s.is_idle():
            break
        run_step(s)
    assert s.is_idle() and s.kv.pool.num_used == 0 and s.stats().num_reserved_blocks == 0


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("policy", ["lanes", "fcfs"])
def test_followers_share_the_leaders_full_prompt_blocks_and_compute_the_rest(caching, policy):
    s = make_sched(caching, policy=policy)
    for req in group(PROMPT, 3):
        assert s.add_request(req) is None
    s.check()
    first = run_step(s)
    assert shape(first) == [("g-0", 0, 40, True)]  # the leader prefills alone
    leader_blocks = first.chunks[0].block_table
    assert leader_blocks == [1, 2, 3]
    second = run_step(s)
    assert shape(second) == [("g-0", 40, 1, True), ("g-1", 32, 8, True), ("g-2", 32, 8, True)]
    tables = {c.request_id: c.block_table for c in second.chunks}
    assert tables["g-1"] == [1, 2, 4] and tables["g-2"] == [1, 2, 5]
    assert [s.kv.pool.ref_counts[b] for b in (1, 2, 3, 4, 5)] == [3, 3, 1, 1, 1]
    third = run_step(s)
    assert shape(third) == [("g-0", 41, 1, True), ("g-1", 40, 1, True), ("g-2", 40, 1, True)]
    outputs = {rid: s.requests[rid].output_token_ids for rid in ("g-0", "g-1", "g-2")}
    assert outputs == {"g-0": [1000, 1001, 1002], "g-1": [1000, 1001], "g-2": [1000, 1001]}
    drain(s)
    # Caching on: the shared (full) prompt blocks were hashed by the leader and stay cached.
    assert s.kv.pool.num_cached == (2 if caching else 0)


def test_a_followers_claim_leaves_out_the_shared_blocks():
    s = make_sched(False, shadow=True)
    for req in group(PROMPT, 3):
        s.add_request(req)
    footprints = [s.requests[f"g-{i}"].request.trace.info["shadow"]["footprint_blocks"] for i in range(3)]
    # 40 prompt + 4 predicted - 1 = 43 positions: 3 blocks; a follower shares 2 of them.
    assert footprints == [3, 1, 1] and s.stats().num_reserved_blocks == 5
    run_step(s)
    run_step(s)
    assert s.kv.pool.num_used == 5
    drain(s)


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("in_flight", [False, True])
def test_abort_of_the_leader_mid_prefill_lets_the_followers_go_on_alone(caching, in_flight):
    s = make_sched(caching, max_num_batched_tokens=16, long_prefill_threshold=16)
    for req in group(PROMPT, 3):
        s.add_request(req)
    first = run_step(s)
    assert shape(first) == [("g-0", 0, 16, False)]  # a 16-token chunk: one of the 2 shared blocks
    held = s.schedule()
    s.check()
    assert held is not None and shape(held) == [("g-0", 16, 16, False)]  # followers still held
    if in_flight:
        assert s.abort("g-0") is not None
        s.check()
        s.update(held, StepResult(held.step_id, []))  # its result is dropped
    else:
        s.update(held, StepResult(held.step_id, []))
        assert s.abort("g-0") is not None
    s.check()
    assert s.kv.pool.num_used == 0
    # Alone now: from position 0, or with caching on from the blocks the leader computed.
    expected = {(False, False): [("g-1", 0, 16, False)], (False, True): [("g-1", 0, 16, False)],
                (True, True): [("g-1", 16, 16, False)],
                (True, False): [("g-1", 32, 8, True), ("g-2", 32, 8, True)]}
    assert shape(run_step(s)) == expected[caching, in_flight]
    drain(s)


@pytest.mark.parametrize("caching", [False, True])
def test_abort_of_a_follower_drops_only_its_own_references(caching):
    s = make_sched(caching)
    for req in group(PROMPT, 3):
        s.add_request(req)
    run_step(s)
    run_step(s)
    assert s.abort("g-1") is not None
    s.check()
    assert [s.kv.pool.ref_counts[b] for b in (1, 2, 3, 4, 5)] == [2, 2, 1, 0, 1]
    assert s.abort("g-1") is None  # a second abort is a no-op
    assert shape(run_step(s)) == [("g-0", 41, 1, True), ("g-2", 40, 1, True)]
    assert s.abort("g-0") is not None  # the leader goes first: g-2 keeps the shared blocks alive
    s.check()
    assert [s.kv.pool.ref_counts[b] for b in (1, 2, 3, 5)] == [1, 1, 0, 1]
    drain(s)


def test_a_waiting_follower_of_an_aborted_leader_is_admitted_alone_even_with_no_blocks_to_share():
    s = make_sched(False)
    for req in group(PROMPT, 2):
        s.add_request(req)
    assert s.abort("g-0") is not None
    assert shape(run_step(s)) == [("g-1", 0, 40, True)]
    assert s.requests["g-1"].sample_leader is None  # let go of the finished leader
    drain(s)


def test_a_prompt_within_one_block_shares_nothing_and_all_samples_start_together():
    s = make_sched(False)
    for req in group(PROMPT[:16], 3):
        s.add_request(req)
    assert shape(run_step(s)) == [("g-0", 0, 16, True), ("g-1", 0, 16, True), ("g-2", 0, 16, True)]
    drain(s)


@pytest.mark.parametrize("caching", [False, True])
def test_a_preempted_follower_shares_the_leaders_blocks_again_when_readmitted(caching):
    # Blocks of 4, a 10-token prompt: 2 shared blocks. 6 usable blocks, plain admission: the
    # samples' third block fills at position 12 and there are not enough blocks for all three.
    s = make_sched(caching, block_size=4, num_blocks=7, shadow=False, policy="fcfs")
    for req in group(PROMPT[:10], 3, max_tokens=6):
        s.add_request(req)
    assert shape(run_step(s)) == [("g-0", 0, 10, True)]
    assert shape(run_step(s)) == [("g-0", 10, 1, True), ("g-1", 8, 2, True), ("g-2", 8, 2, True)]
    assert s.kv.pool.num_used == 5
    run_step(s)
    run_step(s)  # the leader's position 12 takes the last free block
    batch = run_step(s)  # g-1 needs a block for its position 12: g-2, the newest, is the victim
    assert shape(batch) == [("g-0", 13, 1, True), ("g-1", 12, 1, True)]
    g2 = s.requests["g-2"]
    assert g2.num_preemptions == 1 and not g2.block_ids
    assert [s.kv.pool.ref_counts[b] for b in (1, 2)] == [2, 2]
    assert s.abort("g-1") is not None  # room again while the leader still runs
    s.check()
    batch = run_step(s)
    # Readmitted with the leader's two prompt blocks: it recomputes positions 8..12 only. With
    # caching on the cache has a longer prefix, which wins: the fake outputs of every sample are
    # equal, so its third block (positions 8..11) is the leader's block 3.
    start = 12 if caching else 8
    assert shape(batch) == [("g-0", 14, 1, True), ("g-2", start, 13 - start, True)]
    assert batch.chunks[1].block_table[:start // 4] == [1, 2, 3][:start // 4]
    assert g2.output_token_ids == [1000, 1001, 1002, 1003]
    drain(s)


def test_a_preempted_leader_holds_nobody_and_holds_them_again_once_readmitted():
    # Blocks of 4, 3 usable, 4 tokens a step: x (arrived first) grows while the leader is
    # mid-prefill, and the leader, the newest running request, is the victim.
    s = make_sched(False, block_size=4, num_blocks=4, shadow=False, policy="fcfs",
                   max_num_batched_tokens=4, long_prefill_threshold=4)
    s.add_request(GenerateRequest("x", [7, 8, 9, 10], SamplingParams(max_tokens=8, ignore_eos=True),
                                  RequestTrace("x")))
    for req in group(PROMPT[:10], 2, max_tokens=2):
        assert s.add_request(req) is None
    leader, follower = s.requests["g-0"], s.requests["g-1"]
    assert shape(run_step(s)) == [("x", 0, 4, True)]
    assert shape(run_step(s)) == [("x", 4, 1, True), ("g-0", 0, 3, False)]
    assert shape(run_step(s)) == [("x", 5, 1, True), ("g-0", 3, 1, False)]  # shrunk to its block
    assert is_held(follower, 4)
    assert shape(run_step(s)) == [("x", 6, 1, True)]  # g-0 could not grow: preempted
    assert leader.status is RequestStatus.PREEMPTED and not is_held(follower, 4)
    assert admission_hits(follower, [], 4) == []  # nothing to share: it would start alone
    batch = run_step(s)
    assert ("g-0", 0, 3, False) in shape(batch) and is_held(follower, 4)  # the leader is back first
    drain(s)
