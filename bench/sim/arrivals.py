"""When simulated requests reach the server: at fixed times (open loop) or when a client is free
(closed loop). The engine asks `due(now)` before every step and reports every end to `on_finished`.

A closed loop is what `ttft bench --concurrency N` does (bench/runner.py): N clients, each sending
the next request of the list the moment its previous one ended. Arrival times are therefore an
outcome of the schedule: a policy that spreads finishing times also spreads the next arrivals.
"""
from __future__ import annotations

import heapq
import random
from typing import Protocol

from bench.sim.workloads import SimRequest


class Arrivals(Protocol):
    def due(self, now: float) -> list[tuple[SimRequest, float]]:
        """Requests that have arrived by `now`, each with its arrival time, in arrival order."""

    def next_arrival_s(self) -> float | None:
        """When the next request arrives if nothing else ends first; None: none is known yet."""

    def on_finished(self, now: float) -> None:
        """A request ended (finished, failed or rejected) at `now`."""


class OpenLoop:
    """Arrival times fixed in advance (Poisson, or all at t=0)."""

    def __init__(self, requests: list[SimRequest]) -> None:
        self._pending = sorted(requests, key=lambda r: r.arrival_s)
        self._next = 0

    def due(self, now: float) -> list[tuple[SimRequest, float]]:
        out = []
        while self._next < len(self._pending) and self._pending[self._next].arrival_s <= now:
            req = self._pending[self._next]
            out.append((req, req.arrival_s))
            self._next += 1
        return out

    def next_arrival_s(self) -> float | None:
        return self._pending[self._next].arrival_s if self._next < len(self._pending) else None

    def on_finished(self, now: float) -> None:
        pass


class ClosedLoop:
    """`num_clients` clients; each sends the next request of the list when its previous one ends,
    after a uniform random delay of up to `max_delay_s` (a real client's turnaround and the
    request's way in: about 0.5 ms between one response's end and the next arrival in the H200
    reference run; the first requests arrive that staggered too). `SimRequest.arrival_s` is
    ignored."""

    def __init__(self, requests: list[SimRequest], num_clients: int, max_delay_s: float = 0.0,
                 seed: int = 0) -> None:
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        self._requests = list(requests)
        self._next = 0
        self._rng = random.Random(seed)
        self._max_delay_s = max_delay_s
        self._free_at = sorted(self._delay() for _ in range(min(num_clients, len(requests))))  # a heap

    def due(self, now: float) -> list[tuple[SimRequest, float]]:
        out = []
        while self._free_at and self._free_at[0] <= now and self._next < len(self._requests):
            out.append((self._requests[self._next], heapq.heappop(self._free_at)))
            self._next += 1
        return out

    def next_arrival_s(self) -> float | None:
        if self._free_at and self._next < len(self._requests):
            return self._free_at[0]
        return None

    def on_finished(self, now: float) -> None:
        heapq.heappush(self._free_at, now + self._delay())

    def _delay(self) -> float:
        return self._rng.uniform(0.0, self._max_delay_s) if self._max_delay_s > 0 else 0.0
