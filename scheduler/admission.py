"""Arrival checks: why, if at all, a request is refused the moment it reaches the scheduler.

A request that can never fit (context window, or a KV footprint at max_tokens larger than the whole
pool) is refused at once rather than left to wait forever; a full queue answers OVERLOADED (503).
"""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from stages.messages import GenerateRequest

OVERLOADED = "overloaded"  # add_request's answer when the queue is full: the caller answers 503


def admission_error(config: SchedulerConfig, req: GenerateRequest, is_live: bool,
                    num_running: int, num_waiting: int) -> str | None:
    """OVERLOADED (503), another message (the client's fault: 400), or None (accepted)."""
    num_prompt, max_tokens = len(req.prompt_token_ids), req.params.max_tokens
    if num_prompt == 0:
        return "the prompt is empty"
    if max_tokens < 1:
        return f"max_tokens must be at least 1, got {max_tokens}"
    if num_prompt + max_tokens > config.max_model_len:
        return (f"context_length_exceeded: {num_prompt} prompt tokens + {max_tokens} max_tokens "
                f"exceed the context window of {config.max_model_len} tokens")
    # Blocks a request holds at its largest: the last sampled token is never computed.
    num_blocks = config.blocks_for(num_prompt + max_tokens - 1)
    if num_blocks > config.num_usable_blocks:
        return (f"the request needs {num_blocks} KV blocks ({num_prompt} prompt tokens + "
                f"{max_tokens} max_tokens) but the KV cache holds {config.num_usable_blocks}")
    if is_live:
        return f"request id {req.request_id!r} is already in use"
    # Arrivals that a free running seat will take at the next step are not "queued": the
    # bound holds whatever the stage's timing (a burst lands before any schedule()).
    free_seats = max(0, config.max_num_seqs - num_running)
    if num_waiting >= config.max_queued + free_seats:
        return OVERLOADED
    return None
