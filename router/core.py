"""Router: the replicas, the policy and the bookkeeping around each request it sends (no I/O here
but the health watch it owns; router/proxy.py moves the bytes)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from router.health_watch import HealthWatch
from router.kv_event_feed import KvEventFeed
from router.policies import POLICIES
from router.prefix_index import PrefixIndex
from router.replica import DOWN, Replica
from router.request_key import RoutedRequest
from router.ttft_predictor import TOKENS_PER_BLOCK, TtftPredictor


@dataclass
class Dispatch:
    """One request on one replica, from sending to its first token."""
    replica_index: int
    replica: Replica
    num_uncached_tokens: int
    was_idle: bool
    sent_at: float
    started: bool = False


class Router:
    def __init__(self, urls: list[str], policy: str = "predicted-ttft", health_interval_s: float = 0.5,
                 health_timeout_s: float = 1.0, predictor: TtftPredictor | None = None,
                 api_key: str | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock  # TTFTs the predictor learns from (the simulator's is simulated time)
        self.replicas = [Replica(url) for url in urls]
        self.index = PrefixIndex()
        self.predictor = predictor or TtftPredictor()
        self.policy_name = policy
        self.policy = POLICIES[policy](self.index, self.predictor)
        self.events = KvEventFeed(self.index)  # the replicas' own word on what they hold
        self.health = HealthWatch(self.replicas, health_interval_s, health_timeout_s, self.events, api_key)
        self._seen_down = [False] * len(self.replicas)

    def ready(self, exclude: set[int] = frozenset()) -> list[tuple[int, Replica]]:
        self._forget_lost()
        return [(i, r) for i, r in enumerate(self.replicas) if r.routable and i not in exclude]

    def _forget_lost(self) -> None:
        """A replica that went down lost its prefix cache: the index must not send turns there for it."""
        for i, r in enumerate(self.replicas):
            down = r.state == DOWN
            if down and not self._seen_down[i]:
                self.index.forget(i)
            self._seen_down[i] = down

    def dispatch(self, request: RoutedRequest, exclude: set[int] = frozenset()) -> Dispatch | None:
        """Pick a replica and count the request on it; None when no replica is ready."""
        candidates = self.ready(exclude)
        if not candidates:
            return None
        i = self.policy.choose(candidates, request)
        replica = self.replicas[i]
        hit, host = self.index.held(i, request.block_hashes)  # (the policy's own look-up, if it made one)
        uncached = self.predictor.prefill_tokens(request.num_prompt_tokens, hit, host)
        load = replica.load
        was_idle = load.num_in_flight == 0 and load.num_waiting == 0
        load.num_in_flight += 1
        load.num_pending_prefill_tokens += uncached
        self.index.record(i, request.block_hashes)
        return Dispatch(i, replica, uncached, was_idle, self.clock())

    def first_token(self, d: Dispatch) -> None:
        """The replica's first body bytes arrived: the prefill is no longer queued there."""
        if not d.started:
            d.started = True
            d.replica.load.num_pending_prefill_tokens -= d.num_uncached_tokens
            self.predictor.observe(d.replica, d.num_uncached_tokens, self.clock() - d.sent_at, d.was_idle)

    def finish(self, d: Dispatch) -> None:
        if not d.started:
            d.started = True
            d.replica.load.num_pending_prefill_tokens -= d.num_uncached_tokens
        d.replica.load.num_in_flight -= 1

    def describe(self) -> dict:
        ready = sum(r.routable for r in self.replicas)
        return {"status": "ready" if ready else "unavailable", "policy": self.policy_name,
                "num_ready": ready, "replicas": [r.describe() for r in self.replicas],
                "tokens_per_block": TOKENS_PER_BLOCK, "num_kv_events": self.events.num_events}

    def why_none_ready(self) -> str:
        """Each replica's reason for not taking requests, for the client's 503: a replica that refuses
        the router's key must say so to whoever sees the error, not leave them guessing."""
        reasons = [f"{r.url} is {r.state}" + (f" ({r.reason})" if r.reason else "")
                   for r in self.replicas if not r.routable]
        return "; ".join(reasons)
