"""Scheduler: chunked prefill, continuous batching, preemption, admission errors, aborts, finishes
(through its public API: scheduler.py with the objects it owns, step_placement.py and
step_results.py).

Every test drives the real Scheduler with a fake GPU step (`run_step`) and calls check() after every
schedule() and update()."""
from __future__ import annotations

from typing import Callable

from scheduler.config import SchedulerConfig
from scheduler.scheduler import OVERLOADED, Scheduler
from stages.messages import GenerateRequest, SampledToken, StepBatch, StepResult, TokenEvent
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

EOS = 2


def make_req(rid: str, prompt: int | list[int], max_tokens: int = 4, **params: object) -> GenerateRequest:
    tokens = list(range(100, 100 + prompt)) if isinstance(prompt, int) else prompt
    return GenerateRequest(rid, tokens, SamplingParams(max_tokens=max_tokens, **params), RequestTrace(rid))


def make_sched(num_blocks: int = 64, block_size: int = 4, **kw: object) -> Scheduler:
    """These tests pin the issue-2 behaviour: FCFS order and plain admission (no arrival-time
    reservation). Lanes and shadowing have their own tests (test_lanes.py, test_shadow.py)."""
    kw.setdefault("eos_token_ids", frozenset({EOS}))
    kw.setdefault("policy", "fcfs")
    kw.setdefault("shadow", False)
    return Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=block_size, **kw))


def next_token(s: Scheduler, rid: str) -> int:
    """Distinct, predictable outputs: 1000 + index of the output token."""
    return 1000 + s.requests[rid].num_output_tokens


def run_step(
    s: Scheduler,
    token_for: Callable[[Scheduler, str], int] = next_token,
    failed: dict[str, str] | None = None,
    before_update: Callable[[StepBatch], None] | None = None,
) -> tuple[StepBatch, list[TokenEvent]]:
    batch = s.schedule()
    s.check()
    assert batch is not None
    sampled = [SampledToken(c.request_id, token_for(s, c.request_id)) for c in batch.chunks if c.sample]
    if before_update is not None:
        before_update(batch)
        s.check()
    events = s.update(batch, StepResult(batch.step_id, sampled, failed or {}))
    s.check()
    return batch, events


def shape(batch: StepBatch) -> list[tuple[str, int, int, bool]]:
    return [(c.request_id, c.start_pos, len(c.token_ids), c.sample) for c in batch.chunks]


def drain(s: Scheduler, max_steps: int = 200) -> list[TokenEvent]:
    events: list[TokenEvent] = []
    for _ in range(max_steps):
        if s.is_idle():
            break
        events += run_step(s)[1]
    assert s.is_idle() and s.kv.pool.num_used == 0
    return events


# -- chunked prefill and batching ---------------------------------------------------------------
def test_chunked_prefill_exact_chunks_and_block_tables() -> None:
    s = make_sched(max_num_batched_tokens=8)
    assert s.add_request(make_req("a", 20, max_tokens=3)) is None
    b1, e1 = run_step(s)
    assert shape(b1) == [("a", 0, 8, False)] and e1 == []
    assert b1.chunks[0].block_table == [1, 2]
    assert b1.chunks[0].token_ids == list(range(100, 108))
    assert [n.request_id for n in b1.new_requests] == ["a"]
    b2, e2 = run_step(s)
    assert shape(b2) == [("a", 8, 8, False)] and b2.chunks[0].block_table == [1, 2, 3, 4]
    assert b2.new_requests == [] and e2 == []
    b3, e3 = run_step(s)
    assert shape(b3) == [("a", 16, 4, True)] and b3.chunks[0].block_table == [1, 2, 3, 4, 5]
    assert [(e.token_ids, e.finish_reason) for e in e3] == [([1000], None)]
    b4, _ = run_step(s)
    assert shape(b4) == [("a", 20, 1, True)] and b4.chunks[0].block_table == [1, 2, 3, 4, 5, 6]
    assert b4.chunks[0].token_ids == [1000]
    _, e5 = run_step(s)
    assert [(e.token_ids, e.finish_reason, e.num_output_tokens) for e in e5] == [([1002], "length", 3)]
    assert s.is_idle() and s.kv.pool.num_used == 0
    assert [b1.step_id, b2.step_id, b3.step_id, b4.step_id] == [0, 1, 2, 3]


def test_long_prefill_threshold_caps_chunks_and_shares_the_budget() -> None:
    s = make_sched(max_num_batched_tokens=8, long_prefill_threshold=6)
    s.add_request(make_req("a", 10, max_tokens=2))
    s.add_request(make_req("b", 10, max_tokens=2))
    assert shape(run_step(s)[0]) == [("a", 0, 6, False), ("b", 0, 2, False)]
    assert shape(run_step(s)[0]) == [("a", 6, 4, True), ("b", 2, 4, False)]
    b3, e3 = run_step(s)
    assert shape(b3) == [("a", 10, 1, True), ("b", 6, 4, True)]
    assert [(e.request_id, e.finish_reason) for e in e3] == [("a", "length"), ("b", None)]
    b4, e4 = run_step(s)
    assert shape(b4) == [("b", 10, 1, True)] and b4.finished_ids == ["a"]
    assert [(e.request_id, e.finish_reason) for e in e4] == [("b", "length")]
    assert s.is_idle()


def test_continuous_batching_join_while_decoding_and_finished_ids() -> None:
    s = make_sched(max_num_batched_tokens=16)
    s.add_request(make_req("a", 4, max_tokens=4))
    assert shape(run_step(s)[0]) == [("a", 0, 4, True)]
    assert shape(run_step(s)[0]) == [("a", 4, 1, True)]
    s.add_request(make_req("b", 6, max_tokens=1))
    b3, e3 = run_step(s)
    assert shape(b3) == [("a", 5, 1, True), ("b", 0, 6, True)]
    assert [n.request_id for n in b3.new_requests] == ["b"]
    assert [(e.request_id, e.finish_reason) for e in e3] == [("a", None), ("b", "length")]
    b4, e4 = run_step(s)
    assert shape(b4) == [("a", 6, 1, True)] and b4.finished_ids == ["b"]
    assert [(e.request_id, e.finish_reason) for e in e4] == [("a", "length")]
    assert s.schedule() is None and s.pop_finished_ids() == ["a"]


def test_max_num_seqs_limits_running() -> None:
    s = make_sched(max_num_seqs=2)
    for rid in "abc":
        s.add_request(make_req(rid, 3, max_tokens=2))
    assert [c.request_id for c in run_step(s)[0].chunks] == ["a", "b"]
    assert s.stats().num_waiting == 1 and s.stats().num_running == 2
    assert [c.request_id for c in run_step(s)[0].chunks] == ["a", "b"]
    assert [c.request_id for c in run_step(s)[0].chunks] == ["c"]


# -- preemption ----------------------------------------------------------------------------------
def test_preemption_by_recompute_and_the_victim_finishes_with_all_tokens() -> None:
    s = make_sched(num_blocks=6, block_size=2)  # 5 usable blocks; each request may need 4
    s.add_request(make_req("a", 4, max_tokens=4))
    s.add_request(make_req("b", 4, max_tokens=4))
    b1, _ = run_step(s)
    assert [(c.request_id, c.block_table) for c in b1.chunks] == [("a", [1, 2]), ("b", [3, 4])]
    b2, _ = run_step(s)  # a grows into 5; b finds nothing left and, newest, preempts itself
    assert [(c.request_id, c.block_table) for c in b2.chunks] == [("a", [1, 2, 5])]
    assert s.num_preemptions == 1 and s.requests["b"].num_preemptions == 1
    assert s.requests["b"].status.value == "preempted" and list(s.waiting)[0].request_id == "b"
    assert s.kv.pool.free_order() == [4, 3]  # b's table, freed last block first
    assert shape(run_step(s)[0]) == [("a", 5, 1, True)]  # b (5 tokens, 3 blocks) waits
    b4, e4 = run_step(s)
    assert [(c.request_id, c.block_table) for c in b4.chunks] == [("a", [1, 2, 5, 4])]
    assert e4[0].finish_reason == "length"
    b5, e5 = run_step(s)  # b recomputes prompt + its first output, then samples its second
    assert b5.new_requests == [] and b5.finished_ids == ["a"]
    assert [(c.request_id, c.token_ids, c.start_pos, c.sample) for c in b5.chunks] == [
        ("b", [100, 101, 102, 103, 1000], 0, True)]
    assert e5[0].token_ids == [1001]
    events = drain(s)
    assert s.requests == {} and events[-1].finish_reason == "length"
    assert events[-1].num_output_tokens == 4
    assert s.stats().num_preemptions == 1


def test_preemption_picks_the_newest_running_request() -> None:
    s = make_sched(num_blocks=7, block_size=2, max_num_batched_tokens=64)  # 6 usable
    for rid in "abc":
        s.add_request(make_req(rid, 4, max_tokens=3))
    run_step(s)  # a [1,2] b [3,4] c [5,6]
    b2, _ = run_step(s)  # a needs a block: c (newest) goes; then b needs one: c's blocks
    assert [(c.request_id, c.block_table) for c in b2.chunks] == [("a", [1, 2, 6]), ("b", [3, 4, 5])]
    assert [r.request_id for r in s.waiting] == ["c"]
    drain(s)


# -- admission -----------------------------------------------------------------------------------
def test_never_fits_and_context_errors_at_add_time() -> None:
    s = make_sched(num_blocks=5, block_size=4, max_model_len=32)  # 4 usable blocks = 16 positions
    assert s.add_request(make_req("ok", 8, max_tokens=9)) is None  # 16 positions: fits exactly
    err = s.add_request(make_req("big", 10, max_tokens=10))
    assert err is not None and "KV" in err
    err = s.add_request(make_req("long", 30, max_tokens=3))
    assert err is not None and err.startswith("context_length_exceeded")
    assert s.add_request(make_req("empty", [])) == "the prompt is empty"
    assert "already in use" in (s.add_request(make_req("ok", 2)) or "")
    assert list(s.requests) == ["ok"]
    s.check()
    drain(s)


def test_max_queued_overload_then_room_again() -> None:
    # max_num_seqs 1, max_queued 1: a burst gets one running seat plus one queue slot.
    s = make_sched(max_queued=1, max_num_seqs=1)
    assert s.add_request(make_req("a", 3)) is None
    assert s.add_request(make_req("b", 3)) is None
    assert [s.add_request(make_req(f"x{i}", 3)) for i in range(8)] == [OVERLOADED] * 8
    assert set(s.requests) == {"a", "b"}
    run_step(s)  # a runs, b waits: still full
    assert s.add_request(make_req("c", 3)) == OVERLOADED
    run_step(s)
    run_step(s)
    run_step(s)  # a finished (its 4th token): its seat is free, b takes it at the next step
    assert s.stats().num_running == 0 and s.stats().num_waiting == 1
    assert s.add_request(make_req("c", 3)) is None
    assert s.add_request(make_req("d", 3)) == OVERLOADED
    drain(s)


# -- aborts --------------------------------------------------------------------------------------
def free_total(s: Scheduler) -> int:
    return s.kv.pool.num_free + s.kv.pool.num_cached


def test_abort_waiting_request() -> None:
    s = make_sched()
    s.add_request(make_req("a", 5))
    ev = s.abort("a", "abort")
    assert ev is not None and (ev.finish_reason, ev.token_ids, ev.num_prompt_tokens) == ("abort", [], 5)
    assert s.abort("a") is None and s.is_idle() and s.schedule() is None
    assert s.pop_finished_ids() == []  # the GPU stage never heard of it
    s.check()


def test_abort_mid_prefill_while_step_in_flight_drops_its_result() -> None:
    s = make_sched(max_num_batched_tokens=4)
    s.add_request(make_req("a", 10))
    s.add_request(make_req("b", 3, max_tokens=2))
    run_step(s)
    aborted: list[TokenEvent | None] = []
    batch, events = run_step(s, before_update=lambda b: aborted.append(s.abort("a", "timeout")))
    assert batch.chunks[0].request_id == "a"
    assert aborted[0] is not None and aborted[0].finish_reason == "timeout"
    assert all(e.request_id != "a" for e in events)
    assert s.abort("a") is None
    assert s.kv.pool.num_used == s.config.blocks_for(s.requests["b"].num_computed_tokens)
    assert "a" in s.schedule().finished_ids
    s.check()


def test_abort_decoding_and_preempted_requests_free_once() -> None:
    s = make_sched(num_blocks=6, block_size=2)
    s.add_request(make_req("a", 4, max_tokens=4))
    s.add_request(make_req("b", 4, max_tokens=4))
    run_step(s)
    run_step(s)  # b preempted (see the preemption test)
    assert s.requests["b"].status.value == "preempted"
    ev = s.abort("b")
    assert ev is not None and ev.num_output_tokens == 1 and ev.finish_reason == "abort"
    s.check()
    ev = s.abort("a", "abort")  # decoding
    assert ev is not None and ev.num_output_tokens == 2
    s.check()
    assert s.kv.pool.num_used == 0 and free_total(s) == 5 and s.is_idle()
    assert s.pop_finished_ids() == ["b", "a"]


def test_abort_racing_natural_completion() -> None:
    # Abort lands while the last token's step is in flight: abort wins, the token is dropped.
    s = make_sched()
    s.add_request(make_req("a", 3, max_tokens=2))
    run_step(s)
    got: list[TokenEvent | None] = []
    _, events = run_step(s, before_update=lambda b: got.append(s.abort("a")))
    assert events == [] and got[0] is not None and got[0].finish_reason == "abort"
    assert s.kv.pool.num_used == 0
    # Natural completion first: the late abort is a no-op.
    s.add_request(make_req("b", 3, max_tokens=1))
    _, events = run_step(s)
    assert events[0].finish_reason == "length"
    assert s.abort("b") is None and s.kv.pool.num_used == 0
    s.check()


def test_reused_request_id_after_abort_ignores_stale_result() -> None:
    s = make_sched()
    s.add_request(make_req("a", 3, max_tokens=3))
    stale = s.schedule()
    s.abort("a")
    s.add_request(make_req("a", 5, max_tokens=3))
    assert s.update(stale, StepResult(stale.step_id, [SampledToken("a", 9)])) == []
    s.check()
    assert s.requests["a"].num_computed_tokens == 0
    drain(s)


def test_timeout_abort_and_fail_all() -> None:
    # Deadlines are the engine's (it sends Abort(reason="timeout")): the core frees like any abort.
    s = make_sched()
    s.add_request(make_req("a", 3))
    s.add_request(make_req("b", 3))
    s.add_request(make_req("c", 3))
    run_step(s)
    assert s.abort("a", "timeout").finish_reason == "timeout"
    events = s.fail_all("engine died")
    assert {(e.request_id, e.finish_reason, e.error) for e in events} == {
        ("b", "error", "engine died"), ("c", "error", "engine died")}
    assert s.is_idle() and s.kv.pool.num_used == 0
    s.check()


# -- finishes ------------------------------------------------------------------------------------
def run_with_tokens(s: Scheduler, rid: str, outputs: list[int]) -> list[TokenEvent]:
    feed = iter(outputs)
    events: list[TokenEvent] = []
    while rid in s.requests:
        events += run_step(s, token_for=lambda _s, _r: next(feed))[1]
    return events


def test_finish_on_eos() -> None:
    s = make_sched()
    s.add_request(make_req("a", 3, max_tokens=8))
    events = run_with_tokens(s, "a", [5, 6, EOS, 7])
    assert [e.token_ids[0] for e in events] == [5, 6, EOS]
    assert events[-1].finish_reason == "stop" and events[-1].num_output_tokens == 3


def test_ignore_eos_runs_to_length() -> None:
    s = make_sched()
    s.add_request(make_req("a", 3, max_tokens=3, ignore_eos=True))
    events = run_with_tokens(s, "a", [EOS, EOS, EOS])
    assert [e.finish_reason for e in events] == [None, None, "length"]


def test_min_tokens_defers_eos_and_stop_token_ids() -> None:
    s = make_sched()
    s.add_request(make_req("a", 3, max_tokens=8, min_tokens=2, stop_token_ids=(9,)))
    events = run_with_tokens(s, "a", [EOS, 9, 9])
    assert [e.finish_reason for e in events] == [None, None, "stop"]


def test_stop_token_ids_and_eos_beats_length_on_last_token() -> None:
    s = make_sched()
    s.add_request(make_req("a", 3, max_tokens=8, stop_token_ids=(42,)))
    assert run_with_tokens(s, "a", [5, 42])[-1].finish_reason == "stop"
    s.add_request(make_req("b", 3, max_tokens=2))
    assert run_with_tokens(s, "b", [5, EOS])[-1].finish_reason == "stop"


def test_failed_request_is_isolated() -> None:
    s = make_sched()
    s.add_request(make_req("a", 3, max_tokens=3))
    s.add_request(make_req("b", 3, max_tokens=3))
    run_step(s)
    _, events = run_step(s, failed={"a": "nan in logits"})
    by_id = {e.request_id: e for e in events}
    assert (by_id["a"].finish_reason, by_id["a"].error, by_id["a"].token_ids) == ("error", "nan in logits", [])
    assert by_id["b"].finish_reason is None and "a" not in s.requests
    events = drain(s)
    assert events[-1].request_id == "b" and events[-1].finish_reason == "length"


def test_missing_sample_fails_only_that_request() -> None:
    s = make_sched()
    s.add_request(make_req("a", 3))
    s.add_request(make_req("b", 3))
    batch = s.schedule()
    events = s.update(batch, StepResult(batch.step_id, [SampledToken("b", 7)]))
    s.check()
    assert [(e.request_id, e.finish_reason) for e in events] == [("a", "error"), ("b", None)]


def test_trace_marks_and_logprobs() -> None:
    s = make_sched(max_num_batched_tokens=4)
    req = make_req("a", 6, max_tokens=2, logprobs=0)
    s.add_request(req)
    run_step(s)
    assert set(req.trace.marks_ns) == {"queued", "first_scheduled"}
    _, events = run_step(s)
    assert {"prefill_done", "first_token_sampled"} <= set(req.trace.marks_ns)
    marks = req.trace.marks_ns
    assert marks["queued"] <= marks["first_scheduled"] <= marks["prefill_done"] <= marks["first_token_sampled"]
    assert events[0].logprobs is not None and events[0].logprobs[0].token_id == 1000


def test_context_window_end_is_length() -> None:
    from scheduler.finish import finish_reason
    from scheduler.request_state import RequestState

    state = RequestState(make_req("a", 6, max_tokens=100), arrival_seq=0)
    state.all_token_ids += [5, 6]
    assert finish_reason(state, 6, frozenset({EOS}), max_model_len=9) is None
    assert finish_reason(state, 6, frozenset({EOS}), max_model_len=8) == "length"
    assert finish_reason(state, EOS, frozenset({EOS}), max_model_len=8) == "stop"


def test_config_rejects_nonsense() -> None:
    import pytest

    with pytest.raises(ValueError, match="num_blocks"):
        SchedulerConfig(num_blocks=1)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        SchedulerConfig(num_blocks=8, max_num_batched_tokens=0)
    cfg = SchedulerConfig(num_blocks=8, max_num_batched_tokens=64, long_prefill_threshold=16)
    assert (cfg.num_usable_blocks, cfg.max_chunk_tokens, cfg.blocks_for(17)) == (7, 16, 2)


def test_a_chunks_block_table_never_changes_under_it() -> None:
    """Chunks share the request's block list (no copy per step): growth only appends past the
    positions a chunk covers, and a preemption or finish replaces the list, never edits it."""
    s = make_sched(num_blocks=7, block_size=2, max_num_batched_tokens=64)  # 6 usable
    for rid in "ab":
        s.add_request(make_req(rid, 3, max_tokens=6))
    kept: list[tuple[list[int], list[int], int]] = []  # (the shared table, its entries then, #needed)
    for _ in range(12):
        if not s.has_work():
            break
        batch, _ = run_step(s)
        for chunk in batch.chunks:
            needed = -(-(chunk.start_pos + len(chunk.token_ids)) // 2)
            assert len(chunk.block_table) >= needed
            kept.append((chunk.block_table, list(chunk.block_table[:needed]), needed))
        for table, then, needed in kept:
            assert table[:needed] == then
    assert s.num_preemptions >= 1 and not s.has_work()


def test_the_step_that_completes_the_prompt_is_traced_on_the_gpu_stage_clock() -> None:
    s = make_sched(max_num_batched_tokens=4)
    req = make_req("a", 6, max_tokens=2)
    s.add_request(req)
    run_step(s)  # the first chunk: no prefill_* edge yet
    batch = s.schedule()
    started = req.trace.marks_ns["first_scheduled"] + 10
    s.update(batch, StepResult(batch.step_id, [SampledToken("a", 7)], started_ns=started,
                               launched_ns=started + 20, synced_ns=started + 50))
    marks = req.trace.marks_ns
    assert (marks["prefill_step_started"], marks["prefill_step_launched"], marks["prefill_step_synced"]) == (
        started, started + 20, started + 50)
    assert marks["prefill_step_synced"] <= marks["prefill_done"]  # the result then reached the scheduler
