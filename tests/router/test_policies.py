"""The routing policies over hand-set replica loads: each picks what its name says, and
predicted-TTFT keeps a conversation's turns together unless that costs more than the tie margin."""
from __future__ import annotations

from collections import Counter

from router.policies import POLICIES, PredictedTtft
from router.prefix_index import PrefixIndex
from router.replica import READY, Replica
from router.request_key import RoutedRequest
from router.ttft_predictor import PredictorConfig, TtftPredictor

HASHES = tuple(bytes([k]) for k in range(20))  # a 20-block prompt


def fleet(n: int) -> list[tuple[int, Replica]]:
    out = []
    for i in range(n):
        r = Replica(f"http://127.0.0.1:{9000 + i}")
        r.state = READY
        out.append((i, r))
    return out


def make(name: str, index: PrefixIndex | None = None):
    cfg = PredictorConfig(prior_prefill_tokens_per_s=1000.0, decode_s_per_request=0.001)
    return POLICIES[name](index or PrefixIndex(), TtftPredictor(cfg))


def test_round_robin_and_least_loaded_spread_an_idle_fleet() -> None:
    for name in ("round-robin", "least-loaded", "predicted-ttft", "prefix-affinity"):
        policy, replicas = make(name), fleet(3)
        picks = Counter(policy.choose(replicas, RoutedRequest((), 10)) for _ in range(30))
        assert sorted(picks.values()) == [10, 10, 10], name


def test_least_loaded_picks_the_fewest_in_flight_and_waiting() -> None:
    replicas = fleet(3)
    replicas[0][1].load.num_in_flight = 3
    replicas[1][1].load.num_waiting = 1
    replicas[2][1].load.num_in_flight = 2
    assert make("least-loaded").choose(replicas, RoutedRequest((), 10)) == 1


def test_prefix_affinity_follows_the_prefix_whatever_the_load() -> None:
    index, replicas = PrefixIndex(), fleet(3)
    index.record(2, HASHES)
    replicas[2][1].load.num_pending_prefill_tokens = 10**6
    assert make("prefix-affinity", index).choose(replicas, RoutedRequest(HASHES, 400)) == 2


def test_predicted_ttft_keeps_a_conversation_where_its_prefix_is() -> None:
    index, replicas = PrefixIndex(), fleet(3)
    index.record(1, HASHES[:15])
    replicas[1][1].load.num_in_flight = 1  # a little busier, still soonest by far
    assert make("predicted-ttft", index).choose(replicas, RoutedRequest(HASHES, 400)) == 1


def test_predicted_ttft_leaves_the_prefix_when_its_replica_is_swamped() -> None:
    index, replicas = PrefixIndex(), fleet(3)
    index.record(1, HASHES)
    replicas[1][1].load.num_pending_prefill_tokens = 20_000  # 20 s of queued prefill
    assert make("predicted-ttft", index).choose(replicas, RoutedRequest(HASHES, 400)) != 1


def test_predicted_ttft_ties_go_to_the_longer_prefix_then_the_emptier_replica() -> None:
    index, replicas = PrefixIndex(), fleet(3)
    policy = PredictedTtft(index, TtftPredictor(PredictorConfig(prior_prefill_tokens_per_s=1e9)), tie_s=0.01)
    index.record(2, HASHES[:1])  # saves almost nothing at this rate: a tie, broken by the prefix
    assert policy.choose(replicas, RoutedRequest(HASHES, 400)) == 2
    replicas[0][1].load.num_in_flight = 1
    replicas[2][1].load.num_in_flight = 1
    assert policy.choose(replicas, RoutedRequest((b"other",), 400)) == 1
