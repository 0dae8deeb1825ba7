"""Routing policies, by name (`ttft route --routing-policy`): each picks one of the ready replicas.

`predicted-ttft` sends a request where its first token is predicted soonest (router/ttft_predictor.py);
among replicas within `tie_s` of the best it keeps a conversation together (the longest prefix held),
then spreads (fewest in flight). Its competitors are here for comparison: `round-robin`,
`least-loaded` (fewest requests in flight and waiting) and `prefix-affinity` (the longest prefix held,
whatever the load: the policy that piles a popular prefix onto one busy replica).
A new policy is one class and one line in POLICIES.
"""
from __future__ import annotations

from typing import Callable, Protocol

from router.prefix_index import PrefixIndex
from router.replica import Replica
from router.request_key import RoutedRequest
from router.ttft_predictor import TtftPredictor


class Policy(Protocol):
    def choose(self, candidates: list[tuple[int, Replica]], request: RoutedRequest) -> int:
        """The index (into the router's replica list) of the replica to use; candidates is not empty."""
        ...


def _load(replica: Replica) -> int:
    return replica.load.num_in_flight + replica.load.num_waiting


class RoundRobin:
    def __init__(self, index: PrefixIndex, predictor: TtftPredictor) -> None:
        self._next = 0

    def choose(self, candidates: list[tuple[int, Replica]], request: RoutedRequest) -> int:
        self._next += 1
        return candidates[self._next % len(candidates)][0]


class LeastLoaded(RoundRobin):
    def choose(self, candidates: list[tuple[int, Replica]], request: RoutedRequest) -> int:
        self._next += 1  # rotates among equals, so an idle fleet is not all sent to the first
        n = len(candidates)
        best = min(range(n), key=lambda k: (_load(candidates[k][1]), (k - self._next) % n))
        return candidates[best][0]


class PrefixAffinity(RoundRobin):
    def __init__(self, index: PrefixIndex, predictor: TtftPredictor) -> None:
        super().__init__(index, predictor)
        self.index = index

    def choose(self, candidates: list[tuple[int, Replica]], request: RoutedRequest) -> int:
        self._next += 1
        n = len(candidates)
        best = max(range(n), key=lambda k: (self.index.held(candidates[k][0], request.block_hashes)[0],
                                            -((k - self._next) % n)))
        return candidates[best][0]


class PredictedTtft(RoundRobin):
    def __init__(self, index: PrefixIndex, predictor: TtftPredictor, tie_s: float = 0.002) -> None:
        super().__init__(index, predictor)
        self.index, self.predictor, self.tie_s = index, predictor, tie_s

    def choose(self, candidates: list[tuple[int, Replica]], request: RoutedRequest) -> int:
        self._next += 1
        n = len(candidates)
        scored = []
        for k, (i, replica) in enumerate(candidates):
            hit, host = self.index.held(i, request.block_hashes)
            scored.append((self.predictor.predict_s(replica, request.num_prompt_tokens, hit, host), hit, k))
        best_s = min(s for s, _, _ in scored)
        ties = [t for t in scored if t[0] <= best_s + self.tie_s]
        _, _, k = min(ties, key=lambda t: (-t[1], candidates[t[2]][1].load.num_in_flight, (t[2] - self._next) % n))
        return candidates[k][0]


POLICIES: dict[str, Callable[[PrefixIndex, TtftPredictor], Policy]] = {
    "predicted-ttft": PredictedTtft,
    "round-robin": RoundRobin,
    "least-loaded": LeastLoaded,
    "prefix-affinity": PrefixAffinity,
}
