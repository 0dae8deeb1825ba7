"""LanesPolicy: a short prompt never waits behind a long one.

A request whose uncached prompt (what it must compute, after prefix hits) is shorter than the lane
threshold is in the short lane; the others are in the long lane. Each step serves, in this order:
  1. running decodes (one token each: the running batch always moves),
  2. promoted long prefills (see aging), then
  3. the short lane: running and waiting short prefills, admitted every step,
  4. the long lane: long prefills, chunked (at most `long_prefill_threshold` tokens per request
     per step), in whatever budget is left;
within each group by `priority` (lower first), then arrival. A waiting request that does not fit
is skipped, not waited for: the requests behind it still run (no head-of-line blocking), unless it
is promoted: then nothing behind it is admitted until it fits.

Aging: a long request that has been waiting or prefilling for `aging_steps` steps since it entered
the queue is promoted ahead of the short lane until its prefill completes; it then gets a full chunk
every step, so a long request is never starved however many short ones arrive.

Preemption victim: requests preempted `max_preemptions_unprotected` times are protected while any
other candidate exists (anti-thrash); among the rest, the lowest priority, then the cheapest to
recompute (fewest computed tokens), then the newest. The cheapest-first rule never picks the request
that has computed the most, so it always progresses (no livelock).
"""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.request_state import RequestState
from scheduler.policy import is_decode

_DECODE, _PROMOTED, _SHORT, _LONG = 0, 1, 2, 3


def _priority(req: RequestState) -> int:
    return req.priority


class LanesPolicy:
    name = "lanes"

    def __init__(self, config: SchedulerConfig) -> None:
        self.max_chunk_tokens = config.max_chunk_tokens
        self.lane_threshold = config.lane_threshold
        self.aging_steps = config.aging_steps
        self.max_preemptions_unprotected = config.max_preemptions_unprotected
        self.blocks_for = config.blocks_for

    def on_queued(self, req: RequestState, num_uncached: int, step_id: int) -> None:
        req.is_long = num_uncached >= self.lane_threshold
        req.lane_since_step = step_id

    def blocks_queue(self, req: RequestState) -> bool:
        """Only a promoted (aged) request holds back the requests behind it when it does not fit:
        the others wait for room without blocking anyone."""
        return req.promoted

    def group(self, req: RequestState, step_id: int) -> int:
        if is_decode(req):
            return _DECODE
        if req.is_long and not req.promoted and step_id - req.lane_since_step >= self.aging_steps:
            req.promoted = True  # sticky: a full chunk every step until its prefill completes
        if req.promoted:
            return _PROMOTED
        return _LONG if req.is_long else _SHORT

    def order(self, running: list[RequestState], waiting: list[RequestState],
              step_id: int) -> list[RequestState]:
        """Sorted by (not a decode, priority, group, arrival). Decodes, the bulk of every step,
        are split off without a key each: `running` is already in arrival order, so a stable
        sort by priority (skipped when all are equal) gives their order."""
        def key(req: RequestState) -> tuple[int, int, int]:
            return (req.priority, self.group(req, step_id), req.arrival_seq)

        decodes: list[RequestState] = []
        others: list[RequestState] = []
        for req in running:  # all RUNNING: a decode lacks exactly one token
            if len(req.all_token_ids) - req.num_computed_tokens == 1:
                decodes.append(req)
            else:
                others.append(req)
        if len(decodes) > 1 and any(r.priority != decodes[0].priority for r in decodes):
            decodes.sort(key=_priority)
        if others or waiting:
            others.extend(waiting)  # never decodes: not running
            others.sort(key=key)
            decodes.extend(others)
        return decodes

    def chunk_size(self, req: RequestState, num_uncomputed: int, budget_left: int) -> int:
        return min(num_uncomputed, budget_left, self.max_chunk_tokens)

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
