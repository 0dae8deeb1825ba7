"""Multi-turn metrics: opening and returning turns apart, TTFT by turn, cached tokens; the KV probe's deltas."""
from __future__ import annotations

import pytest

from bench.kv_probe import kv_summary
from bench.multi_turn_report import multi_turn_metrics, multi_turn_table
from bench.multi_turn_runner import MultiTurnRun, TurnRecord
from bench.sample import RequestSample


def record(conv: int, turn: int, ttft_s: float, prompt: int, cached: int | None, ok: bool = True) -> TurnRecord:
    s = RequestSample(f"conv-{conv}-turn-{turn}", prompt, 3, success=ok, ttft_s=ttft_s, latency_s=ttft_s + 0.02,
                      chunk_times_s=[ttft_s, ttft_s + 0.01, ttft_s + 0.02], output_tokens=3, prompt_tokens=prompt,
                      cached_tokens=cached)
    return TurnRecord(conv, turn, s)


def test_opening_and_returning_turns_are_reported_apart():
    records = [record(c, 0, 0.400 + 0.01 * c, 100, 0) for c in range(4)]
    records += [record(c, 1, 0.050 + 0.01 * c, 150, 96) for c in range(4)]
    records += [record(c, 2, 0.070, 200, 144) for c in range(3)] + [record(3, 2, 9.0, 200, None, ok=False)]
    mt = multi_turn_metrics(MultiTurnRun(records, 2.0, 2, 0), num_turns=2)

    assert mt["opening"]["completed"] == 4 and mt["opening"]["p50_ttft_ms"] == pytest.approx(415.0)
    ret = mt["returning"]
    assert (ret["completed"], ret["failed"]) == (7, 1)
    assert ret["p50_ttft_ms"] == pytest.approx(70.0)  # 50, 60, 70, 70, 70, 70, 80: the failed one is out
    assert ret["p50_itl_ms"] == pytest.approx(10.0)
    assert ret["mean_cached_tokens"] == pytest.approx((4 * 96 + 3 * 144) / 7)
    assert ret["cached_fraction"] == pytest.approx((4 * 96 + 3 * 144) / (4 * 150 + 3 * 200))
    assert [t["p50_ttft_ms"] for t in mt["per_turn"]] == pytest.approx([415.0, 65.0, 70.0])
    assert [t["completed"] for t in mt["per_turn"]] == [4, 4, 3]
    assert mt["overall"]["completed"] == 11 and mt["overall"]["failed"] == 1
    assert mt["overall"]["request_throughput"] == pytest.approx(11 / 2.0)

    result = {"config": {"conversations": 4, "turns": 2, "concurrency": 2, "label": None},
              "working_set": {"tokens": 1000, "max_context_tokens": 250, "block_size": 16,
                              "quarter_tokens": 256, "quarter_blocks": 16},
              "server_kv": {"pool_blocks": 16.0, "evictions": 40.0, "prefix_hit_rate": 0.5,
                            "tier_hits": {"host": 12.0}},
              "multi_turn": mt, "metrics": mt["overall"]}
    table = multi_turn_table(result)
    assert "| opening (cold) | 4 | 415.0 |" in table and "| returning | 7 | 70.00 |" in table
    assert "| 1 | 4 | 65.00 | 150 | 96 |" in table
    assert "--num-kv-blocks 16" in table and "40 blocks evicted" in table and "50.0%" in table
    assert "below the device pool during the run: host 12" in table


def test_servers_without_cached_tokens_say_so():
    mt = multi_turn_metrics(MultiTurnRun([record(0, 0, 0.1, 10, None), record(0, 1, 0.1, 20, None)], 1.0, 1, 0), 1)
    assert mt["returning"]["mean_cached_tokens"] is None and mt["returning"]["cached_fraction"] is None


def test_kv_summary_reports_the_pool_and_counter_deltas():
    before = {'ttft_kv_blocks{state="free"}': 10, 'ttft_kv_blocks{state="used"}': 0,
              'ttft_kv_blocks{state="cached"}': 54, "ttft_kv_evictions_total": 5, "ttft_kv_host_restores_total": 1}
    after = {**before, 'ttft_kv_blocks{state="free"}': 0, 'ttft_kv_blocks{state="cached"}': 64,
             "ttft_kv_evictions_total": 105, "ttft_kv_host_restores_total": 31, "ttft_prefix_cache_hit_rate": 0.8,
             'ttft_kv_tier_hits_total{tier="host"}': 70, 'ttft_kv_tier_hits_total{tier="disk"}': 3}
    kv = kv_summary(before, after)
    assert kv["pool_blocks"] == 64 and kv["evictions"] == 100 and kv["prefix_hit_rate"] == 0.8
    assert kv["counters"]["ttft_kv_host_restores_total"] == 30  # counters the tiers add come along
    assert kv["tier_hits"] == {"host": 70, "disk": 3}  # labelled counters too (new since `before`)
    assert "ttft_prefix_cache_hit_rate" in kv["gauges_after"]
    assert kv_summary(None, after) is None
