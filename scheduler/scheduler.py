"""Scheduler: the synchronous core that turns queued requests into steps and step results into tokens.

    add_request -> WAITING --schedule--> RUNNING --update (finish)--> FINISHED
                                 ^            |  (out of blocks)
                                 +-PREEMPTED--+     abort: from any state, frees once

One batch is in flight at a time in the current stage, but the core does not depend on it: a request
with a step in flight is neither scheduled again nor preempted until its result arrives, and a result
for a request that was aborted meanwhile is recognised (its step id no longer matches) and dropped.
"""
from __future__ import annotations

import bisect
from collections import deque

from scheduler.config import SchedulerConfig
from scheduler.finish import finish_reason
from scheduler.invariants import SchedulerStats, check_scheduler, collect_stats
from scheduler.kv_manager import KVManager
from scheduler.policy import FcfsPolicy
from scheduler.request_state import RequestState, RequestStatus
from scheduler.step_builder import StepBuilder
from stages.messages import GenerateRequest, SampledToken, StepBatch, StepResult, TokenEvent

OVERLOADED = "overloaded"  # add_request's answer when the queue is full: the caller answers 503


class Scheduler:
    def __init__(self, config: SchedulerConfig, policy: FcfsPolicy | None = None) -> None:
        self.config = config
        self.kv = KVManager(config)
        self.policy = policy or FcfsPolicy(config)
        self.requests: dict[str, RequestState] = {}  # live (not finished) requests
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []  # sorted by arrival_seq
        self.num_preemptions = 0
        self._next_arrival = 0
        self._next_step_id = 0
        self._finished_ids: list[str] = []  # ended since the last batch, known to the GPU stage

    # -- arrivals and aborts -----------------------------------------------------------------
    def add_request(self, req: GenerateRequest) -> str | None:
        """Queue a request; or say why not: OVERLOADED (503), anything else is the client's (400)."""
        error = self._admission_error(req)
        if error is not None:
            return error
        state = RequestState(req, self._next_arrival)
        self._next_arrival += 1
        self.kv.update_hashes(state)
        self.requests[req.request_id] = state
        self.waiting.append(state)
        req.trace.mark("queued")
        return None

    def _admission_error(self, req: GenerateRequest) -> str | None:
        num_prompt, max_tokens = len(req.prompt_token_ids), req.params.max_tokens
        if num_prompt == 0:
            return "the prompt is empty"
        if max_tokens < 1:
            return f"max_tokens must be at least 1, got {max_tokens}"
        if num_prompt + max_tokens > self.config.max_model_len:
            return (f"context_length_exceeded: {num_prompt} prompt tokens + {max_tokens} max_tokens "
                    f"exceed the context window of {self.config.max_model_len} tokens")
        num_blocks = self.kv.footprint_blocks(num_prompt, max_tokens)
        if num_blocks > self.config.num_usable_blocks:
            return (f"the request needs {num_blocks} KV blocks ({num_prompt} prompt tokens + "
                    f"{max_tokens} max_tokens) but the KV cache holds {self.config.num_usable_blocks}")
        if req.request_id in self.requests:
            return f"request id {req.request_id!r} is already in use"
        # Arrivals that a free running seat will take at the next step are not "queued": the
        # bound holds whatever the stage's timing (a burst lands before any schedule()).
        free_seats = max(0, self.config.max_num_seqs - len(self.running))
        if len(self.waiting) >= self.config.max_queued + free_seats:
            return OVERLOADED
        return None

    def abort(self, request_id: str, reason: str = "abort", error: str | None = None) -> TokenEvent | None:
        """End a live request from any state, freeing its blocks; None if it is not live (unknown,
        finished, or already aborted), so a second abort or one racing completion is a no-op."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        self._retire(req, reason, error)
        return self._event(req, [], None)

    def abort_expired(self, now_ns: int) -> list[TokenEvent]:
        """Abort ("timeout") every live request whose deadline has passed."""
        expired = [r.request_id for r in self.requests.values()
                   if r.request.deadline_ns is not None and r.request.deadline_ns <= now_ns]
        return [e for rid in expired if (e := self.abort(rid, "timeout")) is not None]

    def fail_all(self, message: str) -> list[TokenEvent]:
        """The engine broke: every live request ends with finish_reason "error"."""
        return [e for rid in list(self.requests) if (e := self.abort(rid, "error", message)) is not None]

    # -- one step ----------------------------------------------------------------------------
    def schedule(self) -> StepBatch | None:
        """The next step, or None when nothing can run (finished ids then ride the next batch)."""
        step = StepBuilder(self._next_step_id, self.config.max_num_batched_tokens)
        self._schedule_running(step)
        # Blocks just taken back by preemption are not handed to the queue in the same step (the
        # running requests needed them), unless the step would otherwise be empty.
        if step.num_preempted == 0 or not step.chunks:
            self._schedule_waiting(step)
        if not step.chunks:
            return None
        self._next_step_id += 1
        finished, self._finished_ids = self._finished_ids, []
        return step.build(finished)

    def _schedule_running(self, step: StepBuilder) -> None:
        """Running requests first, oldest first: decodes take 1 token, unfinished prefills a chunk.
        A request short of blocks preempts the newest running request until it fits."""
        i = 0
        while i < len(self.running) and step.budget_left > 0:
            req = self.running[i]
            if req.in_flight_step is not None:
                i += 1
                continue
            # Not in flight, so its last result is in: a running request always lacks a token.
            assert req.num_uncomputed_tokens > 0, req
            num_new = self.policy.chunk_size(req, req.num_uncomputed_tokens, step.budget_left)
            while not self.kv.grow(req, req.num_computed_tokens + num_new):
                victim = self.policy.pick_victim(self.running)
                assert victim is not None  # req itself is a candidate
                self._preempt(victim)
                step.num_preempted += 1
                if victim is req:
                    break
            if req.status is RequestStatus.RUNNING:
                # Victims are never before i: everything there is in flight (pick_victim skips it).
                step.add(req, num_new)
                i += 1

    def _schedule_waiting(self, step: StepBuilder) -> None:
        """Admit from the queue's head, in order, while budget, seats and blocks allow."""
        while self.waiting and step.budget_left > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            hits = self.kv.find_prefix(req)
            num_hit_tokens = len(hits) * self.config.block_size
            num_new = self.policy.chunk_size(req, req.num_tokens - num_hit_tokens, step.budget_left)
            if not self.kv.can_admit(hits, num_hit_tokens + num_new):
                return  # FCFS: the head waits for room; nobody overtakes it
            self.waiting.popleft()
            self.kv.admit(req, hits, num_hit_tokens + num_new)
            req.status = RequestStatus.RUNNING
            bisect.insort(self.running, req, key=lambda r: r.arrival_seq)
            step.add(req, num_new)

    def _preempt(self, req: RequestState) -> None:
        """Recompute preemption: drop the KV, keep the tokens; back to the queue's front."""
        self.running.remove(req)
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)

    # -- results -----------------------------------------------------------------------------
    def update(self, batch: StepBatch, result: StepResult) -> list[TokenEvent]:
        """Apply a step's result: advance computed tokens, append samples, finish requests."""
        sampled = {s.request_id: s for s in result.sampled}
        events: list[TokenEvent] = []
        for chunk in batch.chunks:
            req = self.requests.get(chunk.request_id)
            if req is None or req.in_flight_step != batch.step_id:
                continue  # aborted while its step was in flight: drop whatever it produced
            req.in_flight_step, req.num_in_flight_tokens = None, 0
            failure = result.failed.get(req.request_id)
            if failure is None and chunk.sample and req.request_id not in sampled:
                failure = "the step sampled no token for this request"
            if failure is not None:
                self._retire(req, "error", failure)
                events.append(self._event(req, [], None))
                continue
            self._advance(req, len(chunk.token_ids))
            if chunk.sample:
                events.append(self._append_token(req, sampled[req.request_id]))
        return events

    def _advance(self, req: RequestState, num_tokens: int) -> None:
        req.num_computed_tokens += num_tokens
        if req.num_computed_tokens >= req.num_prompt_tokens:
            req.request.trace.mark("prefill_done")
        self.kv.cache_computed(req)

    def _append_token(self, req: RequestState, token: SampledToken) -> TokenEvent:
        req.all_token_ids.append(token.token_id)
        req.request.trace.mark("first_token_sampled")
        self.kv.update_hashes(req)
        reason = finish_reason(req, token.token_id, self.config.eos_token_ids, self.config.max_model_len)
        if reason is not None:
            self._retire(req, reason, None)
        return self._event(req, [token.token_id], token if req.params.logprobs is not None else None)

    def _retire(self, req: RequestState, reason: str, error: str | None) -> None:
        """The one exit: out of its queue, blocks freed once, forgotten."""
        if req.status is RequestStatus.RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        self.kv.free(req)
        req.status = RequestStatus.FINISHED
        req.finish_reason, req.error = reason, error
        req.in_flight_step, req.num_in_flight_tokens = None, 0
        del self.requests[req.request_id]
        if req.was_scheduled:
            self._finished_ids.append(req.request_id)

    def _event(self, req: RequestState, token_ids: list[int], logprob: SampledToken | None) -> TokenEvent:
        return TokenEvent(
            request_id=req.request_id,
            token_ids=token_ids,
            finish_reason=req.finish_reason,
            logprobs=None if logprob is None else [logprob],
            num_prompt_tokens=req.num_prompt_tokens,
            num_output_tokens=req.num_output_tokens,
            num_cached_tokens=req.num_cached_tokens,
            error=req.error,
        )

    # -- introspection -----------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.requests)

    def is_idle(self) -> bool:
        return not self.requests

    def pop_finished_ids(self) -> list[str]:
        """Finished ids not yet sent in a batch (for a stage that goes idle)."""
        out, self._finished_ids = self._finished_ids, []
        return out

    def stats(self) -> SchedulerStats:
        return collect_stats(self)

    def check(self) -> None:
        """Assert every invariant of the pool and of the requests' hold on it (see invariants.py)."""
        check_scheduler(self)
