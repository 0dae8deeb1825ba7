"""The scheduler's invariants (asserted by `Scheduler.check()`) and its stats for metrics.

Beyond the pool's own check: every live request is in exactly one queue with a matching status;
a running request's block table covers exactly its computed plus in-flight positions; waiting and
preempted requests hold nothing; and the pool's ref counts are exactly the blocks the requests hold
(so nothing leaks, nothing is freed twice, and when idle nothing is in use).
Both read a scheduler through SchedulerState, which names what they read.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Collection, Protocol

from scheduler.config import SchedulerConfig
from scheduler.kv_manager import KVManager
from scheduler.kv_tiers.manager import KvTierManager
from scheduler.kv_tiers.no_tiers import NoTiers
from scheduler.request_state import RequestState, RequestStatus
from scheduler.shadow import ShadowAdmission
from scheduler.step_placement import StepPlacement
from stages.messages import MAX_STEPS_IN_FLIGHT


class SchedulerState(Protocol):
    """What the checks and the stats read of a scheduler (scheduler.py's Scheduler)."""
    config: SchedulerConfig
    kv: KVManager
    shadow: ShadowAdmission
    tiers: KvTierManager | NoTiers
    placement: StepPlacement
    requests: dict[str, RequestState]
    running: list[RequestState]
    num_decodes_ahead: int

    @property
    def waiting(self) -> Collection[RequestState]: ...

    @property
    def num_preemptions(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    num_waiting: int
    num_running: int
    num_preemptions: int  # since start
    num_decodes_ahead: int  # since start: decodes built before their input was sampled
    num_free_blocks: int
    num_used_blocks: int
    num_cached_blocks: int
    num_usable_blocks: int  # free + used + cached; the null block is not counted
    num_evictions: int
    prefix_hit_rate: float  # prompt tokens served from the cache / prompt tokens looked up
    # The rate's terms, since start (vLLM's prefix_cache_queries / prefix_cache_hits, in tokens).
    num_prefix_query_tokens: int = 0
    num_prefix_hit_tokens: int = 0
    # Shadowing (ttft_kv_reserved_blocks: claims are not a state of the free/used/cached blocks).
    num_reserved_blocks: int = 0
    num_waiting_for_room: int = 0  # queued without a claim yet
    num_reclaimed_blocks: int = 0  # cached blocks evicted ahead of need, since start
    num_revoked_reservations: int = 0  # since start
    # Lanes: first admissions by lane, since start.
    num_admitted_short: int = 0
    num_admitted_long: int = 0


def collect_stats(s: SchedulerState) -> SchedulerStats:
    pool, kv = s.kv.pool, s.kv
    return SchedulerStats(
        num_waiting=len(s.waiting), num_running=len(s.running),
        num_preemptions=s.num_preemptions, num_decodes_ahead=s.num_decodes_ahead,
        num_free_blocks=pool.num_free,
        num_used_blocks=pool.num_used, num_cached_blocks=pool.num_cached,
        num_usable_blocks=pool.num_usable_blocks, num_evictions=pool.num_evictions,
        prefix_hit_rate=kv.num_hit_tokens / kv.num_hit_queries if kv.num_hit_queries else 0.0,
        num_prefix_query_tokens=kv.num_hit_queries, num_prefix_hit_tokens=kv.num_hit_tokens,
        num_reserved_blocks=s.shadow.num_reserved, num_waiting_for_room=len(s.shadow.pending),
        num_reclaimed_blocks=s.shadow.num_reclaimed, num_revoked_reservations=s.shadow.num_revoked,
        num_admitted_short=s.placement.num_admitted_by_lane["short"],
        num_admitted_long=s.placement.num_admitted_by_lane["long"],
    )


def check_scheduler(s: SchedulerState) -> None:
    pool, config = s.kv.pool, s.config
    pool.check()
    assert len(s.running) <= config.max_num_seqs
    assert [r.arrival_seq for r in s.running] == sorted(r.arrival_seq for r in s.running)
    live = {id(r) for r in s.running} | {id(r) for r in s.waiting}
    assert len(live) == len(s.running) + len(s.waiting) == len(s.requests)
    assert all(id(r) in live and r.request_id == rid for rid, r in s.requests.items())
    held: Counter[int] = Counter()
    for req in s.running:
        assert req.status is RequestStatus.RUNNING, req
        covered = req.num_computed_tokens + req.num_in_flight_tokens
        assert len(req.block_ids) == config.blocks_for(covered), req
        # A decode built ahead covers the position of the token its step in flight samples: at
        # most one token is not known yet, and only while the latest step in flight is ahead.
        # A row carrying guesses covers their positions too (not known tokens).
        unknown = covered - req.num_tokens - req.num_guessed_in_flight
        assert 0 <= req.num_computed_tokens <= covered and unknown <= 1, req
        assert unknown < 1 or req.in_flight[-1][2], req
        assert not req.num_guessed_in_flight or len(req.in_flight) == 1, req
        assert req.num_in_flight_tokens == sum(n for _, n, _ in req.in_flight), req
        assert len(req.in_flight) <= MAX_STEPS_IN_FLIGHT, req
        assert req.in_flight_step == (req.in_flight[-1][0] if req.in_flight else None), req
        assert req.num_hashed_blocks <= len(req.block_ids), req
        held.update(req.block_ids)
    for req in s.waiting:
        assert req.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED), req
        assert not req.block_ids and req.num_computed_tokens == 0 and not req.in_flight
    for req in s.requests.values():
        assert req.num_tokens <= config.max_model_len, req
        assert req.num_output_tokens <= req.params.max_tokens, req
    s.tiers.check()
    refs = {b: r for b, r in enumerate(pool.ref_counts) if r > 0}
    assert dict(held) == refs, f"pool refs {refs} != blocks held by requests {dict(held)}"
    if not s.requests:
        assert pool.num_used == 0, "idle, yet blocks are in use"
    check_reservations(s)


def check_reservations(s: SchedulerState) -> None:
    """Claims add up, never exceed what the pool can hand out, and vanish when idle; a waiting
    request holds a claim exactly when it is not waiting for room (shadow on)."""
    shadow, pool = s.shadow, s.kv.pool
    live = s.requests.values()
    assert shadow.num_reserved == sum(r.num_reserved_blocks for r in live) >= 0
    assert shadow.num_claimed_hits == sum(r.num_claimed_hits for r in live) >= 0
    assert shadow.num_reserved <= pool.num_allocatable, (shadow.num_reserved, pool.num_allocatable)
    pending = {id(r) for r in shadow.pending}
    assert len(pending) == len(shadow.pending)
    keys = [(r.priority, r.arrival_seq) for r in shadow.pending]
    assert keys == sorted(keys), "pending out of order"
    for req in s.waiting:
        if shadow.enabled:
            assert req.has_reservation != (id(req) in pending), req
        else:
            assert not req.has_reservation and req.num_reserved_blocks == 0
    assert pending <= {id(r) for r in s.waiting}
    assert all(r.has_reservation or r.num_reserved_blocks == 0 for r in live)
    if not s.requests:
        assert shadow.num_reserved == 0 and not shadow.pending, "idle, yet blocks are reserved"
