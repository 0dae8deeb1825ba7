"""Per-step policies: which requests a step serves first, how big their chunks are, and who is
preempted. `Scheduler.schedule()` walks `order()` and fills the token budget; it holds no policy.

FcfsPolicy is vLLM V1's (the engine vLLM ships today), not a strawman: the same token budget and
chunked prefill, running decodes first, then running prefills and the queue in arrival order (a
preempted request goes back to the queue's front); the head of the queue that does not fit stops
admission (nobody overtakes it); the victim is the newest running request, so the oldest one always
progresses (no livelock: a request that fits the pool alone finishes). It ignores `priority`.
LanesPolicy (lanes.py) changes `order()`, `chunk_size()`, `admits_prefill()` and `pick_victim()`.
"""
from __future__ import annotations

from typing import Protocol

from scheduler.config import SchedulerConfig
from scheduler.lanes import LanesPolicy
from scheduler.request_state import RequestState
from scheduler.step_builder import StepBuilder


class Policy(Protocol):
    name: str

    def blocks_queue(self, req: RequestState) -> bool:
        """Whether a waiting `req` that cannot be admitted stops admission for this step."""

    def on_queued(self, req: RequestState, num_uncached: int, step_id: int) -> None: ...

    def order(self, running: list[RequestState], waiting: list[RequestState],
              step_id: int) -> list[RequestState]: ...

    def chunk_size(self, req: RequestState, num_uncomputed: int, step: StepBuilder) -> int:
        """Tokens `req` gets in `step` (at most `step.budget_left`); 0: none in this step."""

    def admits_prefill(self, step: StepBuilder) -> bool:
        """Whether another prefill may still join `step` (every order puts the decodes first, so
        once this is False the scheduler stops walking the order at the first other request)."""

    def can_start(self, req: RequestState, num_new_blocks: int, num_allocatable: int,
                  running: list[RequestState]) -> bool: ...

    def pick_victim(self, running: list[RequestState]) -> RequestState | None: ...


class FcfsPolicy:
    name = "fcfs"
    # When nobody waits and every running request decodes with one priority, order() is the
    # running list as it stands, with no other effect: Scheduler may then skip the walk.
    decodes_in_arrival_order = True

    def blocks_queue(self, req: RequestState) -> bool:
        return True  # the head of the queue waits for room; nobody overtakes it

    def __init__(self, config: SchedulerConfig) -> None:
        self.max_chunk_tokens = config.max_chunk_tokens
        self.lane_threshold = config.lane_threshold

    def on_queued(self, req: RequestState, num_uncached: int, step_id: int) -> None:
        """Only for the per-lane counts in stats: FCFS treats both lanes alike."""
        req.is_long = num_uncached >= self.lane_threshold
        req.lane_since_step = step_id

    def order(self, running: list[RequestState], waiting: list[RequestState],
              step_id: int) -> list[RequestState]:
        """Decodes, then prefills, oldest first; then the queue as it stands (preempted in front)."""
        decodes: list[RequestState] = []
        prefills: list[RequestState] = []
        for req in running:  # all RUNNING (see request_state.is_decode): one pass, no property calls
            if len(req.all_token_ids) - req.num_computed_tokens == 1:
                decodes.append(req)
            else:
                prefills.append(req)
        return decodes + prefills + waiting

    def chunk_size(self, req: RequestState, num_uncomputed: int, step: StepBuilder) -> int:
        """Tokens `req` gets this step: all it lacks, bounded by the budget and the chunk cap."""
        return min(num_uncomputed, step.budget_left, self.max_chunk_tokens)

    def admits_prefill(self, step: StepBuilder) -> bool:
        return True  # until the budget runs out

    def can_start(self, req: RequestState, num_new_blocks: int, num_allocatable: int,
                  running: list[RequestState]) -> bool:
        """Plain admission: the first chunk fitting is enough."""
        return True

    def pick_victim(self, running: list[RequestState]) -> RequestState | None:
        """The newest running request with no step in flight (`running` is in arrival order, and
        requests scheduled in the current step are already marked in flight)."""
        for req in reversed(running):
            if req.in_flight_step is None:
                return req
        return None


def make_policy(config: SchedulerConfig) -> Policy:
    return LanesPolicy(config) if config.policy == "lanes" else FcfsPolicy(config)
