"""SchedulerStage: when a decode step is built ahead, and how a step's host cost reaches the traces.

The stage is driven by hand (handle + after_burst, as its run loop calls them) against bare
channels standing in for the GPU and emitter stages (their `submit` and `emit` put there)."""
from __future__ import annotations

import asyncio
import time

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from scheduler.stage import AheadDue, SchedulerStage
from stages.channel import Channel
from stages.messages import Admission, GenerateRequest, SampledToken, StepBatch, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

EOS = 2
SECOND_NS = 1_000_000_000


def make_stage(max_num_seqs: int) -> tuple[SchedulerStage, Channel]:
    sched = Scheduler(SchedulerConfig(num_blocks=64, block_size=4, eos_token_ids=frozenset({EOS}),
                                      max_num_seqs=max_num_seqs, async_scheduling=True, policy="fcfs"))
    gpu: Channel = Channel("gpu", 16)
    emitter: Channel = Channel("emitter", 16)
    stage = SchedulerStage(sched, gpu.force_put, emitter.force_put, inbox_size=16, on_engine_error=lambda e: None)
    stage.emitted = emitter  # (the test's own handle on what was emitted)
    return stage, gpu


def sent(gpu: Channel) -> list[StepBatch]:
    out = []
    while (batch := gpu.get_nowait()) is not None:
        out.append(batch)
    return out


async def answer(stage: SchedulerStage, batch: StepBatch, duration_ns: int) -> None:
    sampled = [SampledToken(c.request_id, 10) for c in batch.chunks if c.sample]
    await stage.handle(StepResult(batch.step_id, sampled, duration_ns=duration_ns))
    await stage.after_burst()
    await asyncio.sleep(0)  # steps held behind a first token's write go in the next loop turn


async def decoding(stage: SchedulerStage, gpu: Channel, num_requests: int) -> list[StepBatch]:
    """`num_requests` requests prefilled; the decode steps then in flight, the stage having
    learned that a decode step takes a second (so a step built just in time is due much later)."""
    for i in range(num_requests):
        await stage.handle(GenerateRequest(f"r{i}", [100, 101, 102], SamplingParams(max_tokens=64), RequestTrace(f"r{i}")))
    await stage.after_burst()
    [prefill] = sent(gpu)
    await answer(stage, prefill, SECOND_NS)
    first, second = sent(gpu)  # the clock knows no decode time yet: both built at once
    await answer(stage, first, SECOND_NS)  # now it does
    return [second]


def test_with_a_free_seat_the_next_decode_step_waits_for_arrivals() -> None:
    async def run() -> None:
        stage, gpu = make_stage(max_num_seqs=3)
        await decoding(stage, gpu, num_requests=2)
        assert sent(gpu) == []  # due half a second before the step in flight ends
        assert stage._timer is not None
        await stage.on_stop()
    asyncio.run(run())


def test_a_full_batch_gets_its_next_decode_step_at_once() -> None:
    async def run() -> None:
        stage, gpu = make_stage(max_num_seqs=2)
        in_flight = await decoding(stage, gpu, num_requests=2)
        [ahead] = sent(gpu)  # nobody could join it: no reason to wait
        assert ahead.step_id == in_flight[0].step_id + 1 and len(ahead.chunks) == 2
        assert stage._timer is None
    asyncio.run(run())


def test_a_prefill_chunk_is_charged_what_it_adds_not_its_neighbours_decodes() -> None:
    async def run() -> None:
        stage, gpu = make_stage(max_num_seqs=4)
        await decoding(stage, gpu, num_requests=2)
        stage._schedule_cost.per_decode = (1_000.0, 1_000.0)  # 1 us a decode in decode-only steps
        before = {rid: stage.scheduler.requests[rid].request.trace.host_ns["schedule"] for rid in ("r0", "r1")}
        long = GenerateRequest("long", list(range(100, 140)), SamplingParams(max_tokens=4), RequestTrace("long"))
        await stage.handle(long)
        arrival_ns, arrival_wall_ns = long.trace.host_ns["schedule"], long.trace.host_wall_ns["schedule"]
        stage._charge(StepBatch(99, [], [], []), stage._schedule_cost, 0, 0)  # an empty step charges nobody
        step = stage.scheduler.schedule()
        assert step is not None and sorted(len(c.token_ids) for c in step.chunks) == [1, 1, 40]
        stage._charge(step, stage._schedule_cost, 50_000, 60_000)
        assert long.trace.host_ns["schedule"] - arrival_ns == 48_000
        assert long.trace.host_wall_ns["schedule"] - arrival_wall_ns == 58_000
        for rid in ("r0", "r1"):
            assert stage.scheduler.requests[rid].request.trace.host_ns["schedule"] - before[rid] == 1_000
        await stage.on_stop()
    asyncio.run(run())


def test_a_tick_that_comes_late_teaches_the_clock() -> None:
    async def run() -> None:
        stage, gpu = make_stage(max_num_seqs=3)
        await decoding(stage, gpu, num_requests=2)
        assert stage._timer is not None and stage.clock.late_ns == 0
        # The tick comes 3 s after the due time it was set for (the event loop was busy).
        stage._timer.cancel()
        stage._timer = None
        stage._awaited_due_ns = time.perf_counter_ns() - 3 * SECOND_NS
        stage.clock._end_ns -= 10 * SECOND_NS
        await stage.handle(AheadDue())
        await stage.after_burst()
        assert len(sent(gpu)) == 1
        assert 1.4 * SECOND_NS < stage.clock.late_ns < 1.6 * SECOND_NS  # halfway to 3 s at once
        assert stage._awaited_due_ns == 0
    asyncio.run(run())


def test_an_admission_reaches_the_emitter_with_its_requests_first_events() -> None:
    """One message admits every request of it; its outputs' registration goes to the emitter in the
    step events that carry (or come before) the requests' first events, never after them."""
    async def run() -> None:
        stage, gpu = make_stage(max_num_seqs=4)
        requests = [GenerateRequest(f"a-{i}", [100, 101, 102], SamplingParams(max_tokens=1), RequestTrace(f"a-{i}"))
                    for i in range(2)]
        admission = Admission(requests, [("stream", "emitter")] * 2)
        await stage.handle(admission)
        await stage.after_burst()
        assert stage.emitted.get_nowait() is None  # no events yet: it waits for them
        [prefill] = sent(gpu)
        assert sorted(c.request_id for c in prefill.chunks) == ["a-0", "a-1"]
        await answer(stage, prefill, SECOND_NS)
        events = stage.emitted.get_nowait()
        assert events.admitted == [admission] and {e.request_id for e in events.events} == {"a-0", "a-1"}

    asyncio.run(run())


def test_a_result_taken_on_the_loop_runs_its_burst_with_what_waits_in_the_inbox() -> None:
    """take_result (the GPU stage's call): the result, then the messages already waiting, then the
    next step and the emit, all at once; once the inbox is closed, a late result is dropped."""
    async def run() -> None:
        stage, gpu = make_stage(max_num_seqs=4)
        await stage.handle(GenerateRequest("r0", [100, 101, 102], SamplingParams(max_tokens=8), RequestTrace("r0")))
        await stage.after_burst()
        [prefill] = sent(gpu)
        stage.inbox.put_nowait(GenerateRequest("r1", [100, 101], SamplingParams(max_tokens=8), RequestTrace("r1")))
        stage.take_result(StepResult(prefill.step_id, [SampledToken("r0", 10)], duration_ns=SECOND_NS))
        assert len(stage.inbox) == 0 and stage.timings["StepResult"].num_messages == 1
        assert sent(gpu) == []  # r0's first token is emitted before its next step leaves
        await asyncio.sleep(0)
        [step] = sent(gpu)
        assert sorted(c.request_id for c in step.chunks) == ["r0", "r1"]  # the arrival joined the next step
        events = stage.emitted.get_nowait()
        assert [(e.request_id, e.token_ids) for e in events.events] == [("r0", [10])]
        stage.inbox.close()
        stage.take_result(StepResult(step.step_id, [], duration_ns=SECOND_NS))
        assert sent(gpu) == [] and stage.emitted.get_nowait() is None
        await stage.on_stop()
    asyncio.run(run())


def test_a_result_that_breaks_the_scheduler_stops_it_and_reports_an_engine_error() -> None:
    async def run() -> None:
        errors: list[str] = []
        stage, _ = make_stage(max_num_seqs=2)
        stage.on_engine_error = errors.append
        stage.take_result(StepResult(7, [], duration_ns=1))  # a result for no step in flight
        assert stage.inbox.closed and isinstance(stage.failure, AssertionError)
        assert len(errors) == 1 and errors[0].startswith("scheduler failed: AssertionError")
    asyncio.run(run())
