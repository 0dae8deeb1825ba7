"""TtftPredictor: queue wait plus uncached prefill, the rate it learns, and what it will not learn from."""
from __future__ import annotations

import pytest

from router.replica import Replica
from router.ttft_predictor import TOKENS_PER_BLOCK, PredictorConfig, TtftPredictor


def replica(**load) -> Replica:
    r = Replica("http://127.0.0.1:1")
    for k, v in load.items():
        setattr(r.load, k, v)
    return r


CFG = PredictorConfig(prior_prefill_tokens_per_s=1000.0, decode_s_per_request=0.001, mean_prompt_tokens=100.0)


def test_an_idle_replica_costs_the_uncached_prefill_only() -> None:
    p = TtftPredictor(CFG)
    assert p.predict_s(replica(), 500, 0) == pytest.approx(0.5)
    assert p.predict_s(replica(), 500, 10) == pytest.approx((500 - 10 * TOKENS_PER_BLOCK) / 1000)
    assert p.predict_s(replica(), 500, 1000) == pytest.approx(0.001)  # a full hit still computes one token


def test_queued_prefill_and_running_decodes_add_wait() -> None:
    p = TtftPredictor(CFG)
    busy = replica(num_pending_prefill_tokens=2000, num_in_flight=4)
    assert p.queue_wait_s(busy) == pytest.approx(2.0 + 0.004)
    # the replica's own count of waiting requests wins when it is larger (other routers' requests)
    assert p.queue_wait_s(replica(num_waiting=30, num_pending_prefill_tokens=100)) == pytest.approx(3.0)


def test_published_queued_tokens_replace_the_count_at_the_mean_size() -> None:
    p = TtftPredictor(CFG)
    # thirty waiting returning turns whose prefixes are cached: 300 uncached tokens, not 30 prompts
    assert p.queue_wait_s(replica(num_waiting=30, num_queued_prefill_tokens=300)) == pytest.approx(0.3)
    assert p.queue_wait_s(replica(num_waiting=30, num_queued_prefill_tokens=0, num_pending_prefill_tokens=500)) \
        == pytest.approx(0.5)


def test_a_cached_prefix_on_a_busy_replica_loses_to_an_idle_one_when_the_queue_costs_more() -> None:
    p = TtftPredictor(CFG)
    hot_busy = p.predict_s(replica(num_pending_prefill_tokens=5000), 1000, 50)
    cold_idle = p.predict_s(replica(), 1000, 0)
    assert cold_idle < hot_busy
    hot_light = p.predict_s(replica(num_pending_prefill_tokens=50), 1000, 50)
    assert hot_light < cold_idle


def test_the_published_rate_wins_and_the_learned_one_moves_by_its_weight() -> None:
    p = TtftPredictor(CFG)
    r = replica(prefill_tokens_per_s=4000.0)
    assert p.predict_s(r, 400, 0) == pytest.approx(0.1)
    fresh = replica()
    p.observe(fresh, 1000, 0.25, was_idle=True)
    assert fresh.load.prefill_tokens_per_s == pytest.approx(4000.0)
    p.observe(fresh, 1000, 0.5, was_idle=True)
    assert fresh.load.prefill_tokens_per_s == pytest.approx(4000.0 + 0.2 * (2000.0 - 4000.0))


def test_no_rate_is_learned_from_a_queue_a_short_prompt_or_a_zero_time() -> None:
    p = TtftPredictor(CFG)
    r = replica()
    p.observe(r, 1000, 0.1, was_idle=False)
    p.observe(r, 10, 0.1, was_idle=True)
    p.observe(r, 1000, 0.0, was_idle=True)
    assert r.load.prefill_tokens_per_s is None


def test_a_replica_not_seen_yet_takes_the_rate_learned_of_the_others_not_the_prior() -> None:
    p = TtftPredictor(CFG)
    seen, unseen = replica(), replica()
    assert p.rate(unseen) == CFG.prior_prefill_tokens_per_s
    p.observe(seen, 40_000, 1.0, was_idle=True)  # 20x the prior, as a GPU is
    assert p.rate(unseen) == pytest.approx(40_000.0)
    # the seen one with two prompts queued is slower than the unseen idle one, as it really is
    seen.load.num_pending_prefill_tokens = 2000
    assert p.predict_s(unseen, 1000, 0) < p.predict_s(seen, 1000, 0)
