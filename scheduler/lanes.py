"""LanesPolicy: a short prompt never waits behind a long one, and a burst of prompts gets its first
tokens shortest first, in small steps.

A request whose uncached prompt (what it must compute, after prefix hits) is shorter than the lane
threshold is in the short lane; the others are in the long lane. Each step serves, in this order:
  1. running decodes (one token each: the running batch always moves),
  2. promoted prefills (see aging), oldest first, then
  3. the short lane: running and waiting short prefills, shortest remaining prefill first (a
     waiting request counts its uncached tokens when it was queued), then
  4. the long lane: long prefills, oldest first (shortest-first there would let 8K prompts starve
     a 32K one until aging: the sim's long P99 TTFT doubled);
everything by `priority` (lower first) before the above, and arrival breaks ties. A waiting request
that does not fit is skipped, not waited for: the requests behind it still run (no head-of-line
blocking), unless it is promoted: then nothing behind it is admitted until it fits.

Step size (`prefill_step_tokens`, the cap): shortest-first alone does not help a burst if one step
takes the whole burst, since every first token then waits for that whole step. So a step's first
prefill always runs (chunked at `long_prefill_threshold`), and other prompts join it only whole and
only while the tokens they add stay within the cap. Joining delays the first token of every prompt
already in the step by the joiner's compute and saves the joiner only one step's fixed cost: worth
it for prompts small next to the step (many short ones under load), not for a burst of big ones.
Under a deep backlog (the waiting prompts' uncached tokens reach `prefill_backlog_steps` full
budgets) prompts as long as the step's first may join it past the cap: first tokens then wait
mostly in the queue, for the backlog over the prefill rate, and full steps prefill faster per token.
With the H200 default (768) a burst of 512, 512, 1024, 1024, 2048, 2048, 4096, 4096 tokens runs as
512+512, 1024, 1024, 2048, 2048, 4096, 4096: the first tokens after ~25, 50, 75, 120, ... ms
instead of all after one ~150 ms step. A prompt that would not complete in the step waits for one
it heads (its chunk would delay the prompts that do complete). Without a cap (0) prefills fill the
budget, chunked. On CPU (cap 128) a step's cost grows with its tokens, so a second long prompt
beside the first would only delay the first one's first token.

Aging: a prefill (either lane) that has been waiting or prefilling for `aging_steps` steps since it
entered the queue is promoted ahead of both lanes until its prefill completes; the oldest promoted
one heads every step (priority aside) with a full chunk, and shorter prompts may still join it
within the cap, so nothing is starved however many shorter prompts arrive.

Preemption victim: requests preempted `max_preemptions_unprotected` times are protected while any
other candidate exists (anti-thrash); among the rest, the lowest priority, then the cheapest to
recompute (fewest computed tokens), then the newest. The cheapest-first rule never picks the request
that has computed the most, so it always progresses (no livelock).
"""
from __future__ import annotations

from operator import attrgetter

from scheduler.config import SchedulerConfig
from scheduler.context_chunks import context_chunk
from scheduler.request_state import RequestState, RequestStatus, is_decode
from scheduler.step_builder import StepBuilder

_DECODE, _PROMOTED, _SHORT, _LONG = 0, 1, 2, 3
_priority = attrgetter("priority")  # a request's priority (lower runs first)
_queued_uncached = attrgetter("num_queued_uncached")


class LanesPolicy:
    name = "lanes"
    decodes_in_arrival_order = True  # as FcfsPolicy's (deep_backlog is only read within a step)

    def __init__(self, config: SchedulerConfig) -> None:
        self.max_chunk_tokens = config.max_chunk_tokens
        self.lane_threshold = config.lane_threshold
        self.prefill_step_cap = config.prefill_step_cap
        self.backlog_tokens = config.prefill_backlog_steps * config.max_num_batched_tokens
        self.context_weight = config.prefill_context_weight
        self.deep_backlog = False  # this step's (order()): see chunk_size
        self.alone = False  # this step's (order()): one request to serve and nobody waiting
        self.aging_steps = config.aging_steps
        self.max_preemptions_unprotected = config.max_preemptions_unprotected
        self.blocks_for = config.blocks_for

    def on_queued(self, req: RequestState, num_uncached: int, step_id: int) -> None:
        req.is_long = num_uncached >= self.lane_threshold
        req.lane_since_step = step_id
        req.num_queued_uncached = num_uncached

    def blocks_queue(self, req: RequestState) -> bool:
        """Only a promoted (aged) request holds back the requests behind it when it does not fit:
        the others wait for room without blocking anyone."""
        return req.promoted

    def group(self, req: RequestState, step_id: int) -> int:
        if is_decode(req):
            return _DECODE
        if not req.promoted and step_id - req.lane_since_step >= self.aging_steps:
            req.promoted = True  # sticky: it heads the steps until its prefill completes
        if req.promoted:
            return _PROMOTED
        return _LONG if req.is_long else _SHORT

    def order(self, running: list[RequestState], waiting: list[RequestState],
              step_id: int) -> list[RequestState]:
        """Sorted by (not a decode, priority, group, remaining prefill in the short lane, arrival).
        Decodes, the bulk of every step, are split off without a key each: `running` is already
        in arrival order, so a stable sort by priority (skipped when all are equal) gives theirs."""
        def key(req: RequestState) -> tuple[int, int, int, int]:
            group = self.group(req, step_id)
            if group != _SHORT:
                return (req.priority, group, 0, req.arrival_seq)  # oldest first
            if req.status is RequestStatus.RUNNING:
                remaining = len(req.all_token_ids) - req.num_computed_tokens
            else:
                remaining = req.num_queued_uncached
            return (req.priority, group, remaining, req.arrival_seq)

        self.deep_backlog = (self.prefill_step_cap is not None and self.backlog_tokens > 0
                             and sum(map(_queued_uncached, waiting)) >= self.backlog_tokens)
        self.alone = len(running) + len(waiting) == 1
        decodes: list[RequestState] = []
        others: list[RequestState] = []
        for req in running:  # all RUNNING: a decode lacks exactly one token
            if len(req.all_token_ids) - req.num_computed_tokens == 1:
                decodes.append(req)
            else:
                others.append(req)
        # (maps over an attrgetter: no Python frame per decode; a spurious True, NotImplemented
        # for a priority that is not an int, would only cost a stable sort that changes nothing)
        if len(decodes) > 1 and any(map(decodes[0].priority.__ne__, map(_priority, decodes))):
            decodes.sort(key=_priority)
        if others or waiting:
            others.extend(waiting)  # never decodes: not running
            others.sort(key=key)
            decodes.extend(others)
        return decodes

    def chunk_size(self, req: RequestState, num_uncomputed: int, step: StepBuilder) -> int:
        """The step's first prefill: a chunk; a later one: all it lacks if that fits the budget
        and the cap, else nothing (0). Without a cap: a chunk of whatever budget is left.
        Under a deep backlog a prompt no longer than the step's first prefill joins whole past
        the cap: it delays nobody's first token by more than its own size would, and full steps
        prefill faster per token (shortest-first order: the joiners after the first are as long
        or longer, so this admits equal prompts, the queue where ordering cannot help).
        A prefill with nobody else to serve (no other request running or waiting) is not chunked
        below the budget: chunks exist to let others in between, and alone they only delay its
        own first token (H200: 8,192 tokens in two 4,096 chunks ~230 ms, in one step ~213; the
        second chunk's attention over the first is slower than one causal pass). A request that
        arrives during that step waits for it, as for any step. With a context weight the limit
        shrinks as the prompt's context grows (context_chunks.py)."""
        limit = step.budget_left if self.alone else self.max_chunk_tokens
        if self.context_weight:
            limit = context_chunk(limit, len(req.all_token_ids) - num_uncomputed, self.context_weight)
        num = self._fit(num_uncomputed, step, limit)
        if num and self.context_weight:
            # Its age counts the steps it waits, not those it progresses in: cut chunks take more
            # steps, and a long prompt promoted for them would head every step, shorts joining
            # behind its chunk instead of running before it (the 128K sim: their wait doubled).
            req.lane_since_step += 1
        return num

    def _fit(self, num_uncomputed: int, step: StepBuilder, limit: int) -> int:
        """A chunk of up to `limit` tokens as the step's first prefill; a later one whole or 0."""
        num = min(num_uncomputed, step.budget_left, limit)
        cap = self.prefill_step_cap
        if cap is None or num_uncomputed == 1 or step.num_prefill_tokens == 0:
            return num
        if num != num_uncomputed:
            return 0
        num_joined = step.num_prefill_tokens - step.num_first_prefill_tokens
        if num_joined + num <= cap or (self.deep_backlog and num <= step.num_first_prefill_tokens):
            return num
        return 0

    def admits_prefill(self, step: StepBuilder) -> bool:
        cap = self.prefill_step_cap
        return cap is None or self.deep_backlog or step.num_prefill_tokens - step.num_first_prefill_tokens < cap

    def can_start(self, req: RequestState, num_new_blocks: int, num_allocatable: int,
                  running: list[RequestState]) -> bool:
        """Start a long prefill only if the pool holds the rest of its prompt besides the rest of
        the prefills already running: chunked long prefills progress side by side, and without
        this they fill the pool half-done and preempt each other forever (with shadowing on,
        claims already ensure it)."""
        if not req.is_long:
            return True
        num_committed = sum(self.blocks_for(r.num_tokens) - len(r.block_ids)
                            for r in running if r.num_computed_tokens + r.num_in_flight_tokens < r.num_tokens)
        return num_new_blocks + num_committed <= num_allocatable

    def pick_victim(self, running: list[RequestState]) -> RequestState | None:
        def key(req: RequestState) -> tuple[bool, int, int, int]:
            protected = req.num_preemptions >= self.max_preemptions_unprotected
            return (protected, -req.priority, req.num_computed_tokens, -req.arrival_seq)

        candidates = [r for r in running if r.in_flight_step is None]
        return min(candidates, key=key) if candidates else None
