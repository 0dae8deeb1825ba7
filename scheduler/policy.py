"""FcfsPolicy: the per-step choices the scheduler delegates, in their simplest (vLLM V1) form.

Arrival order everywhere: running requests are served oldest first, the waiting queue is FIFO with
preempted requests put back at its front, and the preemption victim is the newest running request,
so the oldest request always makes progress (no livelock: a request that fits the pool alone finishes).
The lanes policy of the next issue replaces these methods, not `Scheduler.schedule()`.
"""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.request_state import RequestState


class FcfsPolicy:
    def __init__(self, config: SchedulerConfig) -> None:
        self.max_chunk_tokens = config.max_chunk_tokens

    def chunk_size(self, req: RequestState, num_uncomputed: int, budget_left: int) -> int:
        """Tokens `req` gets this step: all it lacks, bounded by the budget and the chunk cap."""
        return min(num_uncomputed, budget_left, self.max_chunk_tokens)

    def pick_victim(self, running: list[RequestState]) -> RequestState | None:
        """The newest running request with no step in flight (`running` is in arrival order, and
        requests scheduled in the current step are already marked in flight)."""
        for req in reversed(running):
            if req.in_flight_step is None:
                return req
        return None
