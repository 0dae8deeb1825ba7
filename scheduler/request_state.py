"""RequestState: what the scheduler knows about one request across its life.

Catch-up scheduling in one line: `num_computed_tokens` (KV written) chases `num_tokens` (prompt plus
sampled outputs). A prefill, a chunked prefill, a prefix hit and a recompute after preemption are all
the same thing: computed < known, schedule the difference under the budget.
"""
from __future__ import annotations

import enum

from stages.messages import GenerateRequest
from stages.sampling import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, never scheduled
    RUNNING = "running"  # holds blocks, scheduled every step it can be
    PREEMPTED = "preempted"  # blocks taken back; waits at the front of the queue to recompute
    FINISHED = "finished"  # done or aborted; holds nothing


class RequestState:
    __slots__ = (
        "request", "request_id", "params", "all_token_ids", "num_prompt_tokens",
        "num_computed_tokens", "block_ids", "status", "num_preemptions", "finish_reason", "error",
        "arrival_seq", "in_flight_step", "num_in_flight_tokens", "in_flight", "was_scheduled",
        "block_hashes", "num_hashed_blocks", "num_cached_tokens",
        "priority", "num_reserved_blocks", "has_reservation", "awaiting_reclaim",
        "num_bypassed", "num_claimed_hits", "is_long", "lane_since_step", "promoted",
        "num_queued_uncached",
        "sample_leader", "num_shared_blocks", "num_guessed_in_flight", "num_held_tokens",
    )

    def __init__(self, request: GenerateRequest, arrival_seq: int) -> None:
        self.request = request
        self.request_id = request.request_id
        self.params: SamplingParams = request.params
        self.all_token_ids: list[int] = list(request.prompt_token_ids)
        self.num_prompt_tokens = len(request.prompt_token_ids)
        self.num_computed_tokens = 0
        self.block_ids: list[int] = []  # block table: block i holds positions [i*B, (i+1)*B)
        self.status = RequestStatus.WAITING
        self.num_preemptions = 0
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.arrival_seq = arrival_seq  # order of add_request; preemption victims: latest first
        # Steps whose results this request still awaits, oldest first: (step id, tokens, ahead).
        # At most two (async scheduling): the running one and a decode built ahead of it, whose
        # input token is the one the running step samples.
        self.in_flight: list[tuple[int, int, bool]] = []
        self.in_flight_step: int | None = None  # the latest of them
        self.num_in_flight_tokens = 0  # theirs together
        self.was_scheduled = False  # NewRequestData sent to the GPU stage
        # Prefix cache: chained hashes of the full blocks of all_token_ids, and how many of this
        # request's blocks are already registered in the pool's cache.
        self.block_hashes: list[bytes] = []
        self.num_hashed_blocks = 0
        self.num_cached_tokens = 0  # prompt tokens served by a prefix hit at (first) admission
        self.priority = request.priority  # lower runs first where the policy honours it
        # Shadow admission (shadow.py): blocks still claimed from the pool for this request's
        # predicted footprint; whether it holds a claim (a waiting request may be admitted only
        # then); whether that claim waits for a reclaim; how many requests took a claim first.
        self.num_reserved_blocks = 0
        self.has_reservation = False
        self.awaiting_reclaim = False
        self.num_bypassed = 0
        self.num_claimed_hits = 0  # cached prefix-hit blocks counted in the claim
        # Lanes (lanes.py): long-lane membership, the step the current wait began, and aging.
        self.is_long = False
        self.lane_since_step = 0
        self.promoted = False
        self.num_queued_uncached = 0  # uncached prompt tokens when (re)queued: shortest first
        # Sample groups (sample_group.py): a follower's leader (sample 0 of the same n > 1
        # request) while it lives, and how many of its prompt blocks the follower shares.
        self.sample_leader: RequestState | None = None
        self.num_shared_blocks = 0
        # Tokens a step hook guessed past the known ones in the step in flight (StepBuilder.add_guesses).
        self.num_guessed_in_flight = 0
        # 1 while its first sampled token waits for its sampling gate (sampling_gates.py): its
        # chunks stop before the last known token.
        self.num_held_tokens = 0

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.all_token_ids[self.num_prompt_tokens:]

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    def __repr__(self) -> str:
        return (f"RequestState({self.request_id!r}, {self.status.value}, "
                f"computed={self.num_computed_tokens}/{self.num_tokens}, blocks={self.block_ids})")


def is_decode(req: RequestState) -> bool:
    """A running request that lacks one token: its step is a decode (or the last prefill token)."""
    return req.status is RequestStatus.RUNNING and req.num_uncomputed_tokens == 1
