"""SchedulerStage: the actor around the synchronous Scheduler.

It absorbs every waiting message (new requests, aborts, step results), then, if no step is in
flight, asks the core for the next step and sends it to the GPU stage. With async scheduling,
while decode steps are in flight it builds the next one just before the device is expected to
finish them (StepClock), so the device does not wait for the host and requests that arrive in
the meantime still join it. Results and the clock's ticks come back through the same inbox, so
one task owns the scheduler and no lock is needed.

Its two outputs are calls, not inboxes: `submit` hands a step to the GPU stage's launch thread and
`emit` runs the emitter on a step's events, here in this task. A step's result comes in as a call
too (`take_result`, from the loop callback the GPU stage's completion thread schedules), and its
burst runs in that callback: a step's first token goes from the device to its reader's stream in
one event-loop turn. That is safe because no handler here ever suspends, so the stage's task is
always parked in its inbox's `get` when a callback runs, and a burst is never interleaved.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import Future
from typing import Callable, Union

from scheduler.host_charge import StepCostShares
from scheduler.scheduler import OVERLOADED, Scheduler
from scheduler.step_clock import StepClock
from scheduler.step_handoff import StepHandOff
from stages.channel import Channel, ChannelClosed
from stages.messages import (
    MAX_STEPS_IN_FLIGHT, Abort, Admission, GenerateRequest, KvDiskDone, KvDiskRequest, KvTransferOps, StepBatch, StepEvents,
    StepResult, TokenEvent,
)
from stages.stage import Stage
from stages.trace import cpu_clock_ns, host_clock_ns

log = logging.getLogger("ttft.scheduler")


class AheadDue:
    """The StepClock's tick: time to build the next step ahead (handled in after_burst)."""


class GateOpened:
    """A held request's sampling gate is done (sampling_gates.py): a step may sample it now, and
    nothing else may be coming to wake the stage (handled in after_burst)."""


SchedulerMessage = Union[Admission, GenerateRequest, Abort, StepResult, KvDiskDone, AheadDue, GateOpened]
RECLAIM_BLOCKS_PER_STEP = 256


class SchedulerStage(Stage[SchedulerMessage]):
    def __init__(
        self,
        scheduler: Scheduler,
        submit: Callable[[StepBatch | KvTransferOps], None] | None,
        emit: Callable[[StepEvents], None] | None,
        inbox_size: int,
        on_engine_error: Callable[[str], None],
    ) -> None:
        """`submit`: to the GPU stage (GpuStage.submit); `emit`: to the emitter (EmitterStage.deliver).
        Neither waits; both may be joined after construction (pipeline/wiring.py)."""
        super().__init__("scheduler", inbox_size)
        self.scheduler = scheduler
        self.submit = submit
        self.emit = emit
        self.handoff = StepHandOff(lambda item: self.submit(item))  # (submit may be joined later)
        self.on_engine_error = on_engine_error
        self.disk_inbox: Channel[KvDiskRequest] | None = None  # the KV disk tier's stage, if any
        # Steps sent and not yet answered, oldest first, with when each was sent: one, or two
        # with async scheduling (the next built while the running one computes).
        self.in_flight: deque[tuple[StepBatch, int]] = deque()
        self.num_steps = 0
        self.last_step_ns = 0  # wall time of the last step (sent to result), for metrics
        self.clock = StepClock()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due_ns = 0
        self._awaited_due_ns = 0  # the due time the next step waits for (0: none): its tick's lateness
        self._pending_events: list[TokenEvent] = []
        self._admitted: list[Admission] = []  # for the emitter, with the next events (before them)
        self._schedule_cost = StepCostShares()  # schedule() and update() calls, shared per request
        self._update_cost = StepCostShares()

    async def handle(self, msg: SchedulerMessage) -> None:
        self._take(msg)

    async def after_burst(self) -> None:
        self._after_burst()

    def take_result(self, result: StepResult) -> None:
        """A step's result, on the loop: its burst (this result, whatever else waits in the inbox,
        the next step, the emit) runs now rather than after a wake of the stage's task."""
        if self.inbox.closed:
            return  # stopping: nobody waits for this step any more
        try:
            self.timed(result, self._take)
            while (more := self.inbox.get_nowait()) is not None:
                self.timed(more, self._take)
            self._after_burst()
        except Exception as exc:  # the stage fails and stops, and the engine with it
            self.failure = exc
            log.exception("stage %s failed", self.name)
            self.inbox.close()
            self.on_engine_error(f"scheduler failed: {type(exc).__name__}: {exc}")

    def _take(self, msg: SchedulerMessage) -> None:
        if isinstance(msg, StepResult):
            self._on_result(msg)
        elif isinstance(msg, GenerateRequest):
            c0, t0 = cpu_clock_ns(), host_clock_ns()
            error = self.scheduler.add_request(msg)
            msg.trace.add_host("schedule", cpu_clock_ns() - c0, host_clock_ns() - t0)
            if error is not None:  # the engine checks these first: a safety net, not a path
                status = 503 if error == OVERLOADED else 400
                self._pending_events.append(
                    TokenEvent(msg.request_id, [], finish_reason="error", error=error,
                               num_prompt_tokens=len(msg.prompt_token_ids), error_status=status)
                )
            elif msg.sampling_gate is not None and msg.request_id in self.scheduler.gates.pending:
                self._wake_when_done(msg.sampling_gate)
        elif isinstance(msg, Admission):
            self._admitted.append(msg)
            for request in msg.requests:
                self._take(request)
        elif isinstance(msg, Abort):
            event = self.scheduler.abort(msg.request_id, msg.reason)
            if event is not None:
                self._pending_events.append(event)
        elif isinstance(msg, (AheadDue, GateOpened)):
            pass  # after_burst builds the step
        elif isinstance(msg, KvDiskDone):
            self.scheduler.tiers.on_disk_done(msg)  # (NoTiers: an error, there is no disk stage)
        else:  # pragma: no cover - a programming error
            raise TypeError(f"scheduler got {type(msg).__name__}")

    def _on_result(self, result: StepResult) -> None:
        if result.step_id < 0:  # early tier copies failed: the device is in an unknown state
            assert result.error is not None
            self.scheduler.fail_all(result.error)
            self.on_engine_error(result.error)
            return
        assert self.in_flight and self.in_flight[0][0].step_id == result.step_id, "result for no step in flight"
        batch, sent_ns = self.in_flight.popleft()
        now_ns = time.perf_counter_ns()
        self.last_step_ns = now_ns - sent_ns
        self.clock.on_result(now_ns, result.duration_ns, batch.num_tokens == len(batch.chunks), len(self.in_flight))
        if result.error is not None:
            self.scheduler.fail_all(result.error)  # frees every block; the streams get the error
            self.on_engine_error(result.error)
            return
        c0, t0 = cpu_clock_ns(), host_clock_ns()
        self._pending_events.extend(self.scheduler.update(batch, result))
        self._charge(batch, self._update_cost, cpu_clock_ns() - c0, host_clock_ns() - t0)
        # Recompute cost, for the tiers' wait-or-recompute choice.
        self.scheduler.tiers.observe_step(batch.num_tokens, result.duration_ns / 1e9)

    def _charge(self, batch: StepBatch, shares: StepCostShares, cpu_ns: int, wall_ns: int) -> None:
        """Share one call's host cost among the step's requests: decodes pay what a decode costs,
        prefill chunks the rest by their tokens (scheduler/host_charge.py)."""
        chunks = batch.chunks
        requests = self.scheduler.requests
        split = shares.split([len(c.token_ids) for c in chunks], cpu_ns, wall_ns)
        for chunk, (cpu, wall) in zip(chunks, split):
            state = requests.get(chunk.request_id)
            if state is not None:
                state.request.trace.add_host("schedule", cpu, wall)

    def _after_burst(self) -> None:
        self._send_disk_jobs()  # reads started by arrivals go out before anything else
        if (early := self.scheduler.tiers.take_early_ops(self.scheduler.next_step_id)) is not None:
            self.handoff.send(early)  # loads for new arrivals start now, beside the steps
        # The next step goes out first: its launch thread has it before the emitter runs, so the
        # model runs step N+1 while this step's tokens are detokenized and written to their
        # sockets. With async scheduling, a decode step in flight gets its successor now, not
        # after its result. Unless a request's first token is among them (step_handoff.py).
        first_tokens = any(e.token_ids and e.num_output_tokens == len(e.token_ids) for e in self._pending_events)
        if first_tokens:
            self.handoff.hold()
        while self.scheduler.has_work() and len(self.in_flight) < MAX_STEPS_IN_FLIGHT:
            now_ns = time.perf_counter_ns()
            if self.in_flight:
                if not self.scheduler.can_schedule_ahead():
                    break
                # Just in time, so that arrivals join it; at once when none could (a full batch).
                due_ns = self.clock.ahead_due_ns() if self.scheduler.has_free_seq_slot() else now_ns
                if now_ns < due_ns:
                    self._wake_at(due_ns, now_ns)
                    break
                self.clock.on_built_ahead(now_ns - self._awaited_due_ns if self._awaited_due_ns else 0)
            self._awaited_due_ns = 0
            c0, t0 = cpu_clock_ns(), host_clock_ns()
            batch = self.scheduler.schedule()
            if batch is None:
                break
            self._charge(batch, self._schedule_cost, cpu_clock_ns() - c0, host_clock_ns() - t0)
            self.in_flight.append((batch, now_ns))
            self.clock.on_sent(now_ns)
            self.num_steps += 1
            self.handoff.send(batch)
        if self._pending_events:
            events, self._pending_events = self._pending_events, []
            admitted, self._admitted = self._admitted, []
            self.emit(StepEvents(self.num_steps, events, admitted))
        if first_tokens:
            self.handoff.release_soon()
        if self.in_flight:
            # While the model runs, evict cold cached blocks that waiting reservations need, so
            # that admission never pays for it.
            self.scheduler.reclaim(max_blocks=RECLAIM_BLOCKS_PER_STEP)
        self._send_disk_jobs()

    def _wake_at(self, due_ns: int, now_ns: int) -> None:
        """Tick at `due_ns` (one timer at a time). Every burst while a step runs asks again: the
        timer is replaced only when the due time moved, not re-created per arrival."""
        if self._timer is not None:
            if self._timer_due_ns == due_ns:
                return
            self._timer.cancel()
        self._timer_due_ns = self._awaited_due_ns = due_ns
        self._timer = asyncio.get_running_loop().call_later((due_ns - now_ns) / 1e9, self._tick)

    def _tick(self) -> None:
        self._timer = None
        try:
            # Past the bound by at most one: one timer at a time, re-armed only by the loop that
            # drains this inbox.
            self.inbox.force_put(AheadDue())
        except ChannelClosed:
            pass

    def _wake_when_done(self, gate: Future) -> None:
        """A GateOpened in the inbox when `gate` is done (its callback runs on the compile thread)."""
        loop = asyncio.get_running_loop()

        def done(_: Future) -> None:
            try:
                loop.call_soon_threadsafe(self._gate_opened)
            except RuntimeError:  # the loop is closed: the engine stopped
                pass

        gate.add_done_callback(done)

    def _gate_opened(self) -> None:
        try:
            self.inbox.force_put(GateOpened())  # (past the bound by one per held request at most)
        except ChannelClosed:
            pass

    async def on_stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _send_disk_jobs(self) -> None:
        tiers = self.scheduler.tiers
        if not tiers.disk_requests:
            return
        jobs = tiers.take_disk_requests()
        if self.disk_inbox is not None:  # bounded by the scheduler: pinned slots, write cap
            for job in jobs:
                self.disk_inbox.force_put(job)
