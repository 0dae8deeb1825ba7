"""The steady decode step, built in one pass: the bulk of a busy server's steps.

When nobody waits, no claim is pending and every running request lacks exactly one token (its
slot in its last block or, at a block boundary, in a block the pool can give it),
`Scheduler.schedule()` would walk the policy's order (decodes first, in arrival order, by
priority), call the shadow's no-op hooks and add one decode per request. That walk costs little
in a hot loop, but between two steps the rest of the process (the model, HTTP, asyncio, the
emitter) evicts it from the caches, and each function, object and list it touches is a miss
again: several times its hot cost, most of a decode request's scheduling work. This builds the
same chunks, in the same order, touching only the running requests, and declines (None, nothing
changed) whenever the general walk might differ.
"""
from __future__ import annotations

from typing import Callable

from scheduler.request_state import RequestState
from stages.messages import ScheduledChunk


def decode_chunks(running: list[RequestState], step_id: int, block_size: int, token_budget: int,
                  num_allocatable: int, grow: Callable[[RequestState, int], bool]) -> list[ScheduledChunk] | None:
    """One decode chunk per running request, in `running` (arrival) order, each request marked in
    flight for `step_id`; None (no request touched) unless every one of them is a plain decode: not
    in flight, one token short, all of one priority (the order the policies give decodes then is
    arrival order), and the budget holds them all. A decode whose slot starts a new block gets it
    from `grow(req, num_tokens)`, in that order, as the general walk does; the step is declined
    when the pool (`num_allocatable`) cannot give all of them one (the walk would preempt)."""
    if not running or len(running) > token_budget:
        return None
    priority = running[0].priority
    chunks: list[ScheduledChunk] = []
    append = chunks.append
    num_growing = 0
    for req in running:
        token_ids = req.all_token_ids
        start = req.num_computed_tokens
        if req.in_flight or len(token_ids) - start != 1 or req.priority != priority:
            return None
        if start >= len(req.block_ids) * block_size:
            num_growing += 1  # its slot is the first of a new block
        # As StepBuilder.add_decode: the last token, its block table shared (see KVManager).
        append(ScheduledChunk(req.request_id, token_ids[start:], start, req.block_ids, True))
    if num_growing > num_allocatable:
        return None
    entry = (step_id, 1, False)  # (step id, tokens, ahead): immutable, so shared by every request
    for req in running:
        if num_growing and req.num_computed_tokens >= len(req.block_ids) * block_size:
            ok = grow(req, req.num_computed_tokens + 1)
            assert ok, "a block was counted for it"
        req.in_flight.append(entry)
        req.in_flight_step = step_id
        req.num_in_flight_tokens += 1
    return chunks
