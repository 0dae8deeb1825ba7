"""Scheduler: the synchronous core that turns queued requests into steps and step results into tokens.

    add_request (shadow: claim KV) -> WAITING --schedule--> RUNNING --update (finish)--> FINISHED
                                         ^            |  (out of blocks)
                                         +-PREEMPTED--+     abort: from any state, frees once

Steps in flight: a request with a step in flight is not preempted, and a result for a request that
was aborted meanwhile is recognised (its step id no longer matches) and dropped. With async
scheduling, while only decode steps are in flight the stage may ask for the next step at once: a
decode in flight then gets its next decode ahead of its result (its input is PENDING_TOKEN, the
token the step in flight samples). Results arrive in step order; a request that ends in step N
drops what the step built ahead of N computed for it.
Who runs first is the policy's (policy.py, lanes.py); who may be admitted is the shadow's (shadow.py).
"""
from __future__ import annotations

import bisect
from collections import deque
from typing import Iterable

from scheduler.admission import OVERLOADED, admission_error
from scheduler.config import SchedulerConfig
from scheduler.decode_step import decode_chunks
from scheduler.finish import finish_reason
from scheduler.invariants import SchedulerStats, check_scheduler, collect_stats
from scheduler.kv_manager import KVManager
from scheduler.kv_tiers.config import TierConfig
from scheduler.kv_tiers.manager import KvTierManager
from scheduler.policy import Policy, is_decode, make_policy
from scheduler.predictor import OutputLengthPredictor
from scheduler.request_state import RequestState, RequestStatus
from scheduler.sample_group import admission_hits, is_held, link
from scheduler.shadow import ShadowAdmission
from scheduler.step_builder import StepBuilder
from stages.messages import (
    MAX_STEPS_IN_FLIGHT, GenerateRequest, SampledToken, ScheduledChunk, StepBatch, StepResult, TokenEvent,
)

__all__ = ["OVERLOADED", "Scheduler"]


class Scheduler:
    def __init__(self, config: SchedulerConfig, policy: Policy | None = None,
                 tiers: TierConfig | None = None, disk_blocks: Iterable[bytes] = ()) -> None:
        self.config = config
        self._block_size = config.block_size
        self._caching = config.enable_prefix_caching
        self._eos_token_ids = config.eos_token_ids
        self._max_model_len = config.max_model_len
        self.kv = KVManager(config)
        self.policy = policy or make_policy(config)
        self.predictor = OutputLengthPredictor(config.prior_output_tokens)
        self.shadow = ShadowAdmission(config, self.kv, self.predictor)
        # KV tiers below the device pool (host memory, disk); `disk_blocks`: what the disk holds.
        self.tiers = KvTierManager(tiers, self.kv.pool, self._tier_room, self._tier_fetched, disk_blocks
                                   ) if tiers is not None and tiers.enabled else None
        self.requests: dict[str, RequestState] = {}  # live (not finished) requests
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []  # sorted by arrival_seq
        self.num_preemptions = 0
        self.num_decodes_ahead = 0
        self.num_admitted_by_lane = {"short": 0, "long": 0}  # first admissions
        self._next_arrival = 0
        self._next_step_id = 0
        self._finished_ids: list[str] = []  # ended since the last batch, known to the GPU stage
        self._steps_in_flight: dict[int, bool] = {}  # step id -> whether it is decodes only
        # Steady decode steps in one pass (decode_step.py), for the policies whose order then
        # is arrival order; off: every step walks the policy's order (the tests compare both).
        self._decode_fast_path = getattr(self.policy, "decodes_in_arrival_order", False)

    # -- arrivals and aborts -----------------------------------------------------------------
    def add_request(self, req: GenerateRequest) -> str | None:
        """Queue a request and shadow it (claim its KV footprint, or wait for room); or say why
        not: OVERLOADED (503), anything else is the client's (400)."""
        error = admission_error(self.config, req, req.request_id in self.requests,
                                len(self.running), len(self.waiting))
        if error is not None:
            return error
        state = RequestState(req, self._next_arrival)
        self._next_arrival += 1
        link(state, self.requests, self._block_size)  # a sample of an n > 1 request: its leader
        self.kv.update_hashes(state)
        self.requests[req.request_id] = state
        self.waiting.append(state)
        req.trace.mark("queued")
        self._shadow(state)
        return None

    def _shadow(self, req: RequestState) -> None:
        hits = self.kv.find_prefix(req)
        if self.tiers is not None:  # fetch what the prefix has below the device, now
            self.tiers.prefetch(req, hits)
            hits = self.kv.find_prefix(req)
        self.policy.on_queued(req, req.num_tokens - len(hits) * self.config.block_size, self._next_step_id)
        self.shadow.on_queued(req, hits)

    def _tier_room(self, request_id: str) -> int:
        """Device blocks a tier fetch for this request may take: what nobody has claimed, plus
        the request's own claim (the fetched blocks are part of what it reserved)."""
        req = self.requests.get(request_id)
        own = req.num_reserved_blocks if req is not None else 0
        return self.kv.pool.num_allocatable - self.shadow.num_reserved + own

    def _tier_fetched(self, request_id: str, num_blocks: int) -> None:
        req = self.requests.get(request_id)
        if req is not None:
            self.shadow.protect_hits(req, num_blocks)

    def reclaim(self, max_blocks: int | None = None) -> int:
        """Evict up to `max_blocks` cold cached blocks that claims will need; the stage calls it
        between bursts (e.g. while a step runs on the GPU) so that no admission evicts inline."""
        return self.shadow.reclaim(max_blocks)

    def abort(self, request_id: str, reason: str = "abort", error: str | None = None) -> TokenEvent | None:
        """End a live request from any state, freeing its blocks; None if it is not live (unknown,
        finished, or already aborted), so a second abort or one racing completion is a no-op."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        self._retire(req, reason, error)
        return self._event(req, [], None)

    def fail_all(self, message: str) -> list[TokenEvent]:
        """The engine broke: every live request ends with finish_reason "error"."""
        return [e for rid in list(self.requests) if (e := self.abort(rid, "error", message)) is not None]

    # -- one step ----------------------------------------------------------------------------
    def schedule(self) -> StepBatch | None:
        """The next step, or None when nothing can run (finished ids then ride the next batch).
        Walks the policy's order under the token budget: running requests get their chunk
        (preempting if short of blocks), waiting ones are admitted if the shadow allows."""
        if (self._decode_fast_path and not self.waiting and self.tiers is None
                and self.shadow.is_settled()):
            num_allocatable = self.kv.pool.num_allocatable
            chunks = decode_chunks(self.running, self._next_step_id, self._block_size,
                                   self.config.max_num_batched_tokens, num_allocatable, self._grow)
            if chunks is not None:  # the general walk below would build exactly these
                if self.kv.pool.num_allocatable != num_allocatable:  # blocks were taken: claims may exceed
                    self.shadow.enforce(self.waiting, self.running)
                return self._decode_batch(chunks)
        self.shadow.grant_pending()
        self.shadow.reclaim()  # what the stage has not reclaimed yet: before any admission
        step = StepBuilder(self._next_step_id, self.config.max_num_batched_tokens)
        admitting = len(self.running) < self.config.max_num_seqs
        waiting = list(self.waiting) if admitting and self.waiting else []
        ahead = self.can_schedule_ahead()
        running_status, block_size = RequestStatus.RUNNING, self._block_size
        for req in self.policy.order(self.running, waiting, step.step_id):
            if step.budget_left <= 0:
                break
            if step.num_prefill_tokens and not self.policy.admits_prefill(step) and not is_decode(req):
                break  # decodes come first in every order: nobody after this one joins the step
            if req.status is running_status:
                if req.in_flight:
                    if ahead:
                        self._schedule_ahead(req, step)
                elif (len(req.all_token_ids) - req.num_computed_tokens == 1
                      and req.num_computed_tokens < len(req.block_ids) * block_size):
                    # The common decode, inline: one token (every policy's chunk is 1 here), its
                    # slot already in the last block: no growth, no preemption.
                    step.add_decode(req)
                else:
                    self._schedule_running(req, step)
            elif (not admitting or req.request_id in step.preempted_ids
                  or not self.shadow.admissible(req) or is_held(req, self._block_size)
                  or self._waits_for_fetch(req)):
                continue
            elif step.num_preempted and step.chunks:
                continue  # blocks just taken back by preemption go to the running batch, not the queue
            elif not self._try_admit(req, step) and self.policy.blocks_queue(req):
                admitting = False  # admit nobody behind it; running requests still get served
        self.shadow.enforce(self.waiting, self.running)
        if not step.chunks:
            return None
        self._next_step_id += 1
        self._steps_in_flight[step.step_id] = not step.num_prefill_tokens
        finished, self._finished_ids = self._finished_ids, []
        batch = step.build(finished)
        if self.tiers is not None:
            batch.kv_ops = self.tiers.take_ops(batch.step_id)
        return batch

    def _decode_batch(self, chunks: list[ScheduledChunk]) -> StepBatch:
        """What schedule() ends with for a step of decodes only (no new requests, no admission)."""
        step_id = self._next_step_id
        self._next_step_id = step_id + 1
        self._steps_in_flight[step_id] = True
        finished, self._finished_ids = self._finished_ids, []
        return StepBatch(step_id, [], chunks, finished)

    def can_schedule_ahead(self) -> bool:
        """May a step be built now, before the results of those in flight? Only with async
        scheduling, below MAX_STEPS_IN_FLIGHT, and behind decode-only steps: a prefill step is
        long enough that the host's turn-around hides in it, and building ahead of it would make a
        request arriving meanwhile wait one step longer for its own prefill."""
        steps = self._steps_in_flight
        return (not steps or self.config.async_scheduling and len(steps) < MAX_STEPS_IN_FLIGHT
                and all(steps.values()))

    def _schedule_ahead(self, req: RequestState, step: StepBuilder) -> None:
        """The decode after the one in flight, if its input is the only thing it waits for: the
        step in flight samples the token (its chunk ends at the known tokens), that token cannot
        end the request by length, and the sampler needs no history the host has not seen yet
        (penalties; min_tokens still banning EOS). Never preempts: no room means no decode ahead."""
        params = req.params
        num_tokens = len(req.all_token_ids)  # (once per request per step: no property calls)
        num_output = num_tokens - req.num_prompt_tokens
        if (len(req.in_flight) != 1
                or req.num_computed_tokens + req.num_in_flight_tokens != num_tokens
                or num_output + 1 >= params.max_tokens
                or num_tokens + 1 >= self._max_model_len
                or params.needs_penalties or num_output < params.min_tokens):
            return
        # Its slot in the last block (most steps: no growth), else grow by a block.
        if num_tokens < len(req.block_ids) * self._block_size or self._grow(req, num_tokens + 1):
            step.add_ahead(req)
            self.num_decodes_ahead += 1

    def _waits_for_fetch(self, req: RequestState) -> bool:
        """Tiers: bring up what arrived since the request was queued, then say whether it should
        wait for the disk reads that continue its prefix rather than recompute (never blocking
        the requests behind it)."""
        if self.tiers is None or not self.tiers.has_news(req):
            return False  # the common case: no walk of the prefix on every step
        hits = self.kv.find_prefix(req)
        self.tiers.prefetch(req, hits)
        return self.tiers.must_wait(req, len(self.kv.find_prefix(req)), len(self.running))

    def _schedule_running(self, req: RequestState, step: StepBuilder) -> None:
        """A decode takes 1 token, an unfinished prefill a chunk, shrunk to the blocks there are;
        if not even one token fits, preempt the policy's victim until it does."""
        # Not in flight, so its last result is in: a running request always lacks a token. (The
        # common decode, whose slot is in its last block, never gets here: schedule() adds it.)
        num_uncomputed = len(req.all_token_ids) - req.num_computed_tokens
        assert num_uncomputed > 0, req
        num_new = self.policy.chunk_size(req, num_uncomputed, step)
        if num_new == 0:
            return  # the policy keeps it for a later step
        if num_new > 1:
            num_room = (len(req.block_ids) + self.kv.pool.num_allocatable) * self.config.block_size
            num_new = max(1, min(num_new, num_room - req.num_computed_tokens))
        while not self._grow(req, req.num_computed_tokens + num_new):
            victim = self.policy.pick_victim(self.running)
            assert victim is not None  # req itself is a candidate
            self._preempt(victim, step)
            if victim is req:
                return
        step.add(req, num_new)

    def _try_admit(self, req: RequestState, step: StepBuilder) -> bool:
        """Admit a waiting request with its first chunk (after prefix hits) if seats and blocks allow."""
        if len(self.running) >= self.config.max_num_seqs:
            return False
        hits = admission_hits(req, self.kv.find_prefix(req), self._block_size)
        num_hit_tokens = len(hits) * self.config.block_size
        num_new = self.policy.chunk_size(req, req.num_tokens - num_hit_tokens, step)
        if num_new == 0:
            return False  # the policy keeps it for a later step
        if not self.config.chunked_prefill and num_new < req.num_tokens - num_hit_tokens:
            return False  # no chunked prefill: the whole (uncached) prompt in one step, or wait
        num_prompt_blocks = self.config.blocks_for(req.num_tokens) - len(hits)
        if not self.kv.can_admit(hits, num_hit_tokens + num_new) or not self.policy.can_start(
                req, num_prompt_blocks, self.kv.pool.num_allocatable, self.running):
            return False
        num_before = self.kv.pool.num_allocatable
        self.kv.admit(req, hits, num_hit_tokens + num_new)
        self.shadow.consume(req, num_before - self.kv.pool.num_allocatable)
        if self.tiers is not None:
            self.tiers.release(req)
        self.waiting.remove(req)
        if not req.was_scheduled:
            self.num_admitted_by_lane["long" if req.is_long else "short"] += 1
        req.status = RequestStatus.RUNNING
        bisect.insort(self.running, req, key=lambda r: r.arrival_seq)
        step.add(req, num_new)
        step.admits = True
        return True

    def _grow(self, req: RequestState, num_total_tokens: int) -> bool:
        if self.config.blocks_for(num_total_tokens) <= len(req.block_ids):
            return True  # most decode steps: the last block has room
        num_before = self.kv.pool.num_allocatable
        if not self.kv.grow(req, num_total_tokens):
            return False
        self.shadow.consume(req, num_before - self.kv.pool.num_allocatable)
        return True

    def _preempt(self, req: RequestState, step: StepBuilder) -> None:
        """Recompute preemption: drop the KV, keep the tokens; back to the queue's front, shadowed
        again (its claim is recomputed for what it still needs)."""
        self.running.remove(req)
        self.kv.free(req)
        self.shadow.release(req)
        req.num_computed_tokens = 0
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        self.num_preemptions += 1
        step.num_preempted += 1
        step.preempted_ids.add(req.request_id)
        self.waiting.appendleft(req)
        self._shadow(req)

    # -- results -----------------------------------------------------------------------------
    def update(self, batch: StepBatch, result: StepResult) -> list[TokenEvent]:
        """Apply a step's result: advance computed tokens, append samples, finish requests."""
        self._steps_in_flight.pop(batch.step_id, None)
        if self.tiers is not None:
            self.tiers.on_step_done(batch.step_id)
        sampled = {s.request_id: s for s in result.sampled}
        failed = result.failed
        requests = self.requests
        step_id = batch.step_id
        caching, block_size = self._caching, self._block_size
        events: list[TokenEvent] = []
        for chunk in batch.chunks:
            req = requests.get(chunk.request_id)
            if req is None:
                continue
            in_flight = req.in_flight
            if not in_flight or in_flight[0][0] != step_id:
                continue  # aborted (or ended) while its step was in flight: drop what it produced
            req.num_in_flight_tokens -= in_flight.pop(0)[1]
            req.in_flight_step = in_flight[-1][0] if in_flight else None
            failure = failed.get(req.request_id) if failed else None
            token = sampled.get(req.request_id) if chunk.sample else None
            if failure is None and chunk.sample and token is None:
                failure = "the step sampled no token for this request"
            if failure is not None:
                self._retire(req, "error", failure)
                events.append(self._event(req, [], None))
                continue
            # Advance the computed tokens (inline: once per request per step).
            before = req.num_computed_tokens
            after = req.num_computed_tokens = before + len(chunk.token_ids)
            if before < req.num_prompt_tokens <= after:  # the first crossing is the one traced
                req.request.trace.mark("prefill_done")
            if caching and after // block_size > req.num_hashed_blocks:
                self.kv.cache_computed(req)  # only when a block has just been completed
            if token is not None:
                events.append(self._append_token(req, token))
        return events

    def _append_token(self, req: RequestState, token: SampledToken) -> TokenEvent:
        token_id = token.token_id
        token_ids = req.all_token_ids
        token_ids.append(token_id)
        num_tokens = len(token_ids)
        num_output = num_tokens - req.num_prompt_tokens
        if num_output == 1:
            req.request.trace.mark("first_token_sampled")
        if self._caching and num_tokens // self._block_size > len(req.block_hashes):
            self.kv.update_hashes(req)  # a block of known tokens just filled: hash it once
        params = req.params
        # finish_reason only for a token that may end the request: a stop id (before min_tokens
        # too, and EOS even when ignored: it decides) or one that reaches a length limit.
        if (num_output >= params.max_tokens or num_tokens >= self._max_model_len
                or token_id in self._eos_token_ids or token_id in params.stop_token_ids):
            reason = finish_reason(req, token_id, self._eos_token_ids, self._max_model_len)
            if reason is not None:
                self._retire(req, reason, None)
        # _event's TokenEvent, inline (one per request per step).
        return TokenEvent(req.request_id, [token_id], req.finish_reason,
                          None if params.logprobs is None else [token], req.num_prompt_tokens,
                          num_output, req.num_cached_tokens, req.error)

    def _retire(self, req: RequestState, reason: str, error: str | None) -> None:
        """The one exit: out of its queue, blocks and claim freed once, forgotten. Natural ends
        teach the output-length predictor."""
        if req.status is RequestStatus.RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        if req.in_flight and self.tiers is not None:  # its steps in flight write past the computed
            self.tiers.mark_dirty(req.block_ids[req.num_computed_tokens // self._block_size:], req.in_flight_step)
        self.kv.free(req)
        self.shadow.release(req)
        if self.tiers is not None:
            self.tiers.release(req)
        if reason in ("stop", "length"):
            self.predictor.observe(req.params.max_tokens, req.num_output_tokens)
        req.status = RequestStatus.FINISHED
        req.finish_reason, req.error = reason, error
        req.in_flight.clear()
        req.in_flight_step, req.num_in_flight_tokens = None, 0
        del self.requests[req.request_id]
        if req.was_scheduled:
            self._finished_ids.append(req.request_id)

    def _event(self, req: RequestState, token_ids: list[int], logprob: SampledToken | None) -> TokenEvent:
        # Positional: one is built per request per step (request_id, token_ids, finish_reason,
        # logprobs, num_prompt_tokens, num_output_tokens, num_cached_tokens, error).
        return TokenEvent(
            req.request_id, token_ids, req.finish_reason, None if logprob is None else [logprob],
            req.num_prompt_tokens, len(req.all_token_ids) - req.num_prompt_tokens,
            req.num_cached_tokens, req.error,
        )

    # -- introspection -----------------------------------------------------------------------
    @property
    def next_step_id(self) -> int:
        return self._next_step_id

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
