"""Shadow admission: claims at arrival, what they count, waits without head-of-line blocking, the
bypass barrier, growth first (revoked claims), reclaim between steps, and the trace of it all.

Every test drives the real Scheduler with a fake GPU step and checks every invariant (claims
included) after every schedule() and update()."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, StepBatch
from stages.sampling import SamplingParams
from stages.trace import RequestTrace
from fake_step import run_step

P = list(range(10, 18))  # two full blocks of 4


def make_req(rid: str, prompt: int | list[int], max_tokens: int = 4, base: int = 100) -> GenerateRequest:
    tokens = list(range(base, base + prompt)) if isinstance(prompt, int) else prompt
    return GenerateRequest(rid, tokens, SamplingParams(max_tokens=max_tokens), RequestTrace(rid))


def make_sched(num_blocks: int, **kw: object) -> Scheduler:
    kw.setdefault("policy", "fcfs")
    kw.setdefault("prior_output_tokens", 4)
    return Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=4, **kw))


def shadow(s: Scheduler, rid: str) -> dict:
    return s.requests[rid].request.trace.info["shadow"]


def admitted(batch: StepBatch) -> list[str]:
    return [n.request_id for n in batch.new_requests]


def test_claim_at_arrival_is_consumed_as_the_request_grows_and_gone_at_the_end() -> None:
    s = make_sched(33, max_num_batched_tokens=64)
    a = make_req("a", 10, max_tokens=8)
    s.add_request(a)
    # prior 4 output tokens: positions 10 + 4 - 1 = 13 -> 4 blocks, claimed at once
    assert s.stats().num_reserved_blocks == 4 and "reserved" in a.trace.marks_ns
    info = shadow(s, "a")
    assert {k: info[k] for k in ("hit_blocks", "footprint_blocks", "reserved_blocks", "wait_reason")} == {
        "hit_blocks": 0, "footprint_blocks": 4, "reserved_blocks": 4, "wait_reason": None}
    assert info["cost_us"] >= 0 and info["num_requeues"] == 0
    reserved = []
    for _ in range(8):
        run_step(s)
        reserved.append(s.stats().num_reserved_blocks)
    # 3 blocks at the prefill, the 4th when position 12 is computed; then past the prediction
    # the request grows on its own (nothing claimed, nothing owed).
    assert reserved == [1, 1, 1, 0, 0, 0, 0, 0] and s.is_idle()
    s.add_request(make_req("b", 10, max_tokens=8))  # learned: 8 of 8 tokens -> 10 + 8 - 1 -> 5 blocks
    assert shadow(s, "b")["reserved_blocks"] == 5


def test_a_request_that_does_not_fit_waits_without_blocking_and_the_barrier_stops_bypasses() -> None:
    s = make_sched(9, max_num_batched_tokens=64, max_reservation_bypasses=1)  # 8 usable blocks
    s.add_request(make_req("r1", 16, base=100))  # 16 + 4 - 1 = 19 positions: 5 blocks
    s.add_request(make_req("r2", 12, base=200))  # 4 blocks, only 3 left
    s.add_request(make_req("r3", 4, max_tokens=2, base=300))  # 2 blocks: fits, overtakes r2
    s.add_request(make_req("r4", 2, max_tokens=1, base=400))  # 1 block fits, but r2 was bypassed once
    s.check()
    assert [shadow(s, r)["wait_reason"] for r in ("r1", "r2", "r3", "r4")] == [
        None, "pool_short", None, "behind_older_request"]
    assert s.stats().num_reserved_blocks == 7 and s.stats().num_waiting_for_room == 2
    order = []
    while not s.is_idle():
        order.append(admitted(run_step(s)))
    # r1 and r3 start at once; r2 when r1's blocks come back (r1 ends at step 4: 4 tokens);
    # r4 only after r2 got its claim, though it always fitted.
    assert order[:2] == [["r1", "r3"], []]
    assert [i for i, a in enumerate(order) if a] == [0, 4]
    assert order[4] == ["r2", "r4"]


def test_growth_beyond_the_prediction_comes_first_and_revokes_a_waiting_claim() -> None:
    s = make_sched(9, max_num_seqs=1, prior_output_tokens=1)  # 8 usable blocks, one seat
    s.add_request(make_req("a", 4, max_tokens=12, base=100))  # predicted 1 token: 1 block
    s.add_request(make_req("b", 20, max_tokens=1, base=200))  # 5 blocks, claimed, no seat yet
    assert s.stats().num_reserved_blocks == 6
    revoked_at = None
    for i in range(11):
        run_step(s)
        if revoked_at is None and s.stats().num_revoked_reservations:
            revoked_at = i
            assert shadow(s, "b")["wait_reason"] == "revoked" and s.stats().num_waiting_for_room == 1
    # a takes its 4th block computing position 12 (step 9): 4 allocatable left < b's 5.
    assert revoked_at == 9 and s.requests["a"].num_output_tokens == 12 - 1
    assert admitted(run_step(s)) == []  # a's last token; b still waits for room
    assert admitted(run_step(s)) == ["b"]  # a finished: b claims again and runs
    assert s.stats().num_reserved_blocks == 0 and s.stats().num_preemptions == 0


def _fill_cache(s: Scheduler) -> None:
    for rid, base in (("a", 100), ("b", 200)):
        s.add_request(make_req(rid, 12, max_tokens=1, base=base))
        run_step(s)
    assert s.kv.pool.cached_lru_order() == [3, 2, 1, 6, 5, 4] and s.kv.pool.num_free == 0


def test_reclaim_between_steps_so_admission_never_evicts() -> None:
    s = make_sched(7, enable_prefix_caching=True, prior_output_tokens=1)  # 6 usable blocks
    _fill_cache(s)
    c = make_req("c", 8, max_tokens=1, base=300)  # 2 blocks, backed by cached blocks only
    s.add_request(c)
    assert s.requests["c"].awaiting_reclaim and "reclaim_done_ns" not in shadow(s, "c")
    assert s.reclaim(max_blocks=1) == 1  # the stage's budget for this pause: not enough yet
    assert s.requests["c"].awaiting_reclaim and s.kv.pool.free_order() == [3]
    assert s.reclaim() == 1  # the rest
    assert not s.requests["c"].awaiting_reclaim and s.kv.pool.num_evictions == 2
    batch = run_step(s)
    assert batch.chunks[0].block_table == [3, 2]  # LRU order: a's chain tail first
    assert s.kv.pool.num_evictions == 2 and s.stats().num_reclaimed_blocks == 2  # none inline
    assert c.trace.info["shadow"]["reclaim_done_ns"] <= c.trace.marks_ns["first_scheduled"]


def test_without_a_stage_reclaim_schedule_reclaims_before_admitting() -> None:
    s = make_sched(7, enable_prefix_caching=True, prior_output_tokens=1)
    _fill_cache(s)
    c = make_req("c", 8, max_tokens=1, base=300)
    s.add_request(c)
    batch = run_step(s)
    assert batch.chunks[0].block_table == [3, 2] and s.stats().num_reclaimed_blocks == 2
    assert c.trace.info["shadow"]["reclaim_done_ns"] <= c.trace.marks_ns["first_scheduled"]


def test_plain_admission_evicts_inline_and_claims_nothing() -> None:
    s = make_sched(7, enable_prefix_caching=True, shadow=False)
    _fill_cache(s)
    c = make_req("c", 8, max_tokens=1, base=300)
    s.add_request(c)
    assert shadow(s, "c")["wait_reason"] == "no_shadow" and s.stats().num_reserved_blocks == 0
    assert "reserved" not in c.trace.marks_ns
    batch = run_step(s)
    assert batch.chunks[0].block_table == [3, 2] and s.kv.pool.num_evictions == 2
    assert s.stats().num_reclaimed_blocks == 0


def test_prefix_hits_shrink_the_claim_and_cached_hits_are_kept_from_reclaim() -> None:
    s = make_sched(33, enable_prefix_caching=True, max_num_batched_tokens=64)
    s.add_request(make_req("a", P + [50], max_tokens=4))
    run_step(s)  # a holds blocks 1, 2 (hashed) and 3
    s.add_request(make_req("b", P + [60, 61], max_tokens=4))
    # 10 + 4 - 1 = 13 positions: 4 blocks, 2 of them hits a holds: 2 claimed
    assert {k: shadow(s, "b")[k] for k in ("hit_blocks", "reserved_blocks")} == {
        "hit_blocks": 2, "reserved_blocks": 2}
    while not s.is_idle():
        run_step(s)
    s.add_request(make_req("c", P + [70], max_tokens=4))
    # Idle (cached) hits leave the evictable set when touched: they count, 3 in all, but a
    # reclaim leaves them alone (reserved 3 - cached hits 2 <= 29 free: nothing to reclaim).
    assert shadow(s, "c")["reserved_blocks"] == 3 and s.shadow.num_claimed_hits == 2
    assert s.reclaim() == 0
    batch = run_step(s)
    assert batch.chunks[0].start_pos == 8 and batch.chunks[0].block_table[:2] == [1, 2]
    assert s.stats().num_reserved_blocks == 0 and s.shadow.num_claimed_hits == 0


def test_idle_means_no_claims_after_aborts_in_every_state() -> None:
    s = make_sched(9, max_num_batched_tokens=64)
    s.add_request(make_req("r1", 16, base=100))
    s.add_request(make_req("r2", 12, base=200))  # waits for room
    s.add_request(make_req("r3", 4, base=300))
    run_step(s)
    for rid in ("r2", "r1", "r3"):
        assert s.abort(rid) is not None
        s.check()
    assert s.is_idle() and s.stats().num_reserved_blocks == 0 and s.shadow.pending == []
