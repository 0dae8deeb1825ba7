"""ShadowAdmission: reserve each request's KV footprint the moment it arrives.

At arrival (and again when a preempted request is requeued) the request's footprint is computed:
its prompt blocks, minus the prefix blocks other requests already hold, plus the blocks of its
predicted output (predictor.py, capped by max_tokens). That many blocks are claimed against the pool
(`num_reserved`: a count, so the claim and the later admission are O(1)). A waiting request may be
admitted only once it holds a claim, so admission needs no search of the pool and admitted requests
rarely run out of blocks. Claims are counted against free + cached blocks; when they exceed the free
blocks alone, cold cached blocks must be evicted: `reclaim()` does it between steps (the stage may
call it while a step runs on the GPU; `schedule()` runs it otherwise, always before any admission),
so an admission never evicts inline. The trace shows it: `info["shadow"]["reclaim_done_ns"]`.

A request that does not fit now waits in `pending` (sorted by priority, then arrival) without
blocking later requests that fit: they take claims past it, each time counted as a bypass; after
`max_reservation_bypasses` nobody overtakes it any more (a barrier), so it is never starved.
Claims never starve the running batch: growth ignores them, and when growth (a reply longer than
predicted) leaves fewer allocatable blocks than claimed, the newest waiting claims are revoked.
Invariant: num_reserved == sum of the live requests' claims <= free + cached blocks.
"""
from __future__ import annotations

import bisect
import time
from typing import Iterable

from scheduler.config import SchedulerConfig
from scheduler.kv_manager import KVManager
from scheduler.predictor import OutputLengthPredictor
from scheduler.request_state import RequestState
from scheduler.sample_group import num_blocks_from_leader


def _order(req: RequestState) -> tuple[int, int]:
    return (req.priority, req.arrival_seq)


class ShadowAdmission:
    def __init__(self, config: SchedulerConfig, kv: KVManager, predictor: OutputLengthPredictor,
                 num_slots_past_end: int = 0) -> None:
        """`num_slots_past_end`: KV positions a row may take past its last token (its step hooks'
        guesses, scheduler/step_hooks.py): every footprint counts them."""
        self.config = config
        self.num_slots_past_end = num_slots_past_end
        self.kv = kv
        self.pool = kv.pool
        self.predictor = predictor
        self.enabled = config.shadow
        self.num_reserved = 0  # blocks claimed by live requests (the ttft_kv_reserved_blocks gauge)
        self.pending: list[RequestState] = []  # waiting for a claim, by (priority, arrival)
        self.num_reclaimed = 0  # cached blocks evicted ahead of need, since start
        self.num_revoked = 0  # claims taken back from waiting requests, since start
        self._awaiting_reclaim: list[RequestState] = []
        # Cached (ref 0) prefix-hit blocks inside waiting requests' claims: a reclaim must leave
        # them (they are reused, not allocated), so they do not count towards its target.
        self.num_claimed_hits = 0

    # -- footprint -------------------------------------------------------------------------------
    def footprint(self, req: RequestState, hits: list[int]) -> int:
        """Blocks the request will take out of the free + cached set: every block of its predicted
        largest size except prefix hits that another request already holds (a cached hit leaves the
        evictable set when touched, so it counts)."""
        predicted = self.predictor.predict(req.params.max_tokens)
        num_remaining = max(1, predicted - req.num_output_tokens)
        # The last sampled token is never computed, so it needs no KV slot.
        num_positions = min(req.num_tokens + num_remaining - 1,
                            req.num_prompt_tokens + req.params.max_tokens - 1)
        num_positions += self.num_slots_past_end
        num_busy_hits = sum(self.pool.ref_counts[b] > 0 for b in hits)
        # A sample group's follower shares its leader's prompt blocks: the leader's claim has them.
        num_busy_hits = max(num_busy_hits, num_blocks_from_leader(req))
        return self.config.blocks_for(num_positions) - num_busy_hits

    # -- arrival ---------------------------------------------------------------------------------
    def on_queued(self, req: RequestState, hits: list[int]) -> None:
        """Shadow a request entering the queue (new, or preempted): claim its footprint or wait."""
        start_ns = time.perf_counter_ns()
        if self.enabled:  # blocks it will hit are the last a reclaim evicts (chain head last)
            self.pool.refresh(reversed(hits))
        need = self.footprint(req, hits) if self.enabled else 0
        info = req.request.trace.info.setdefault("shadow", {"num_requeues": -1})
        assert isinstance(info, dict)
        info.update(hit_blocks=len(hits), footprint_blocks=need, reserved_blocks=0, wait_reason=None,
                    num_requeues=info["num_requeues"] + 1)
        if not self.enabled:
            info["wait_reason"] = "no_shadow"
        elif self.pending and self.pending[0].num_bypassed >= self.config.max_reservation_bypasses:
            self._wait(req, "behind_older_request")
        elif self._try_claim(req, need, hits):
            self._count_bypass(req)
        else:
            self._wait(req, "pool_short")
        info["cost_us"] = (time.perf_counter_ns() - start_ns) / 1e3

    def grant_pending(self) -> None:
        """Give claims to waiting requests that fit now, oldest (by priority) first, skipping those
        that do not fit unless one of them has been overtaken too often."""
        if not self.pending:
            return
        i = 0
        while i < len(self.pending):
            req = self.pending[i]
            room = self.pool.num_allocatable - self.num_reserved
            need = req.request.trace.info["shadow"]["footprint_blocks"]  # type: ignore[index]
            hits = self.kv.find_prefix(req) if need <= room else []
            if need <= room and self._try_claim(req, self.footprint(req, hits), hits):
                del self.pending[i]
                for older in self.pending[:i]:
                    older.num_bypassed += 1
                continue
            if req.num_bypassed >= self.config.max_reservation_bypasses:
                return  # a barrier: nobody overtakes it any more
            i += 1

    def _try_claim(self, req: RequestState, need: int, hits: list[int]) -> bool:
        info = req.request.trace.info["shadow"]
        info["footprint_blocks"] = need  # type: ignore[index]
        if need > self.pool.num_allocatable - self.num_reserved:
            return False
        req.num_reserved_blocks, req.has_reservation = need, True
        self.num_reserved += need
        req.num_claimed_hits = sum(self.pool.ref_counts[b] == 0 for b in hits)
        self.num_claimed_hits += req.num_claimed_hits
        info["reserved_blocks"] = need  # type: ignore[index]
        req.request.trace.mark("reserved")
        if self.num_reserved - self.num_claimed_hits > self.pool.num_free:  # needs evictions
            req.awaiting_reclaim = True
            self._awaiting_reclaim.append(req)
        return True

    def _wait(self, req: RequestState, reason: str) -> None:
        req.request.trace.info["shadow"]["wait_reason"] = reason  # type: ignore[index]
        bisect.insort(self.pending, req, key=_order)

    def _count_bypass(self, req: RequestState) -> None:
        key = _order(req)
        for older in self.pending:
            if _order(older) >= key:
                break
            older.num_bypassed += 1

    def is_settled(self) -> bool:
        """Whether grant_pending(), reclaim() and enforce() would all do nothing now: no request
        waits for a claim or for a reclaim, the claims are backed by free blocks and fit the pool."""
        return (not self.pending and not self._awaiting_reclaim
                and self.num_reserved - self.num_claimed_hits <= self.pool.num_free
                and self.num_reserved <= self.pool.num_allocatable)

    # -- admission, growth, release --------------------------------------------------------------
    def admissible(self, req: RequestState) -> bool:
        """May this waiting request be admitted now (O(1))?"""
        return not self.enabled or (req.has_reservation and not req.awaiting_reclaim)

    def consume(self, req: RequestState, num_taken: int) -> None:
        """`req` just took `num_taken` blocks out of the free + cached set: its claim shrinks.
        Its prefix hits are touched (or gone) by now: they no longer hold back a reclaim."""
        self.num_claimed_hits -= req.num_claimed_hits
        req.num_claimed_hits = 0
        take = min(num_taken, req.num_reserved_blocks)
        req.num_reserved_blocks -= take
        self.num_reserved -= take

    def refund(self, req: RequestState, num_blocks: int) -> None:
        """`req` gave `num_blocks` back to the pool (its rejected guesses' blocks): its claim
        grows again by them, which the pool now holds for it (claims stay <= allocatable)."""
        if req.has_reservation and num_blocks > 0:
            req.num_reserved_blocks += num_blocks
            self.num_reserved += num_blocks

    def protect_hits(self, req: RequestState | None, num_blocks: int) -> None:
        """Blocks fetched from a lower KV tier for a request already holding a claim are now cached
        prefix hits inside that claim: a reclaim must leave them, as it leaves the hits counted
        at claim time. (None: the request ended meanwhile.)"""
        if req is None or not req.has_reservation:
            return  # its claim, when granted, counts them itself
        num = min(num_blocks, req.num_reserved_blocks - req.num_claimed_hits)
        if num > 0:
            req.num_claimed_hits += num
            self.num_claimed_hits += num

    def release(self, req: RequestState) -> None:
        """The request holds no claim any more (finished, aborted, preempted)."""
        self.num_reserved -= req.num_reserved_blocks
        self.num_claimed_hits -= req.num_claimed_hits
        req.num_reserved_blocks, req.has_reservation, req.num_claimed_hits = 0, False, 0
        if req.awaiting_reclaim:
            req.awaiting_reclaim = False
            self._awaiting_reclaim.remove(req)
        i = bisect.bisect_left(self.pending, _order(req), key=_order)
        if i < len(self.pending) and self.pending[i] is req:
            del self.pending[i]

    def enforce(self, waiting: Iterable[RequestState], running: list[RequestState]) -> None:
        """Growth first: if claims exceed what the pool can hand out, revoke the newest waiting
        claims (back to pending), then trim running requests' unused claims, newest first."""
        excess = self.num_reserved - self.pool.num_allocatable
        if excess <= 0:
            return  # almost every step
        for req in reversed(list(waiting)):
            if excess <= 0:
                break
            if req.has_reservation:
                excess -= req.num_reserved_blocks
                self.release(req)
                self.num_revoked += 1
                self._wait(req, "revoked")
        for req in reversed(running):
            if excess <= 0:
                break
            cut = min(excess, req.num_reserved_blocks)
            req.num_reserved_blocks -= cut
            self.num_reserved -= cut
            excess -= cut

    # -- reclaim -----------------------------------------------------------------------------------
    def reclaim(self, max_blocks: int | None = None) -> int:
        """Evict cold cached blocks until the claims are backed by free blocks (at most
        `max_blocks` now). Requests whose claim waited for it become admissible."""
        deficit = self.num_reserved - self.num_claimed_hits - self.pool.num_free
        limit = deficit if max_blocks is None else min(deficit, max_blocks)
        num = self.pool.reclaim(limit) if limit > 0 else 0
        self.num_reclaimed += num
        if self._awaiting_reclaim and self.num_reserved - self.num_claimed_hits <= self.pool.num_free:
            now_ns = time.perf_counter_ns()
            for req in self._awaiting_reclaim:
                req.awaiting_reclaim = False
                req.request.trace.info["shadow"]["reclaim_done_ns"] = now_ns  # type: ignore[index]
            self._awaiting_reclaim = []
        return num


def fetch_room(shadow: ShadowAdmission, req: RequestState | None) -> int:
    """Device blocks a tier fetch for this request may take: what nobody has claimed, plus the
    request's own claim (the fetched blocks are part of what it reserved; None: it ended)."""
    own = req.num_reserved_blocks if req is not None else 0
    return shadow.pool.num_allocatable - shadow.num_reserved + own
