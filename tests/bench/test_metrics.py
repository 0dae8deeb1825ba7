"""Summary metrics on hand-made samples, checked against numbers worked out by hand."""
from __future__ import annotations

import pytest

from bench.metrics import compute_metrics, summarize_ms
from bench.sample import RequestSample


def sample(rid, chunks, output_tokens=None, latency=None, success=True, prompt_tokens=None, prompt_len=10):
    s = RequestSample(rid, prompt_len, 8, chunk_times_s=list(chunks), success=success,
                      prompt_tokens=prompt_tokens)
    s.ttft_s = chunks[0] if chunks else None
    s.latency_s = latency if latency is not None else (chunks[-1] if chunks else None)
    s.output_tokens = output_tokens if output_tokens is not None else len(chunks)
    s.error = "" if success else "boom"
    return s


def test_percentiles_interpolate_linearly_like_numpy():
    m = summarize_ms("x", [0.001, 0.002, 0.003, 0.004, 0.010])
    assert m["mean_x_ms"] == pytest.approx(4.0)
    assert m["median_x_ms"] == m["p50_x_ms"] == pytest.approx(3.0)
    # rank 0.95 * 4 = 3.8 -> 4 + 0.8 * (10 - 4); rank 3.96 -> 4 + 0.96 * 6
    assert m["p95_x_ms"] == pytest.approx(8.8)
    assert m["p99_x_ms"] == pytest.approx(9.76)
    assert summarize_ms("y", [])["p99_y_ms"] == 0.0  # vLLM's convention for an empty list


def test_tpot_counts_tokens_not_chunks():
    # 5 tokens in 3 chunks (usage says 5): TPOT = (0.5 - 0.1) / 4
    s = sample("a", [0.1, 0.3, 0.5], output_tokens=5)
    assert s.tpot_s() == pytest.approx(0.1)
    assert s.itl_s() == pytest.approx([0.2, 0.2])
    assert sample("b", [0.2], output_tokens=1).tpot_s() is None


def test_compute_metrics():
    samples = [
        sample("a", [0.100, 0.120, 0.150], prompt_tokens=12),  # tpot 0.025, itl 0.02 0.03
        sample("b", [0.200, 0.210, 0.220, 0.250]),  # tpot (0.25-0.2)/3, itl 0.01 0.01 0.03
        sample("c", [0.300], latency=0.31),  # one token: no tpot, no itl
        sample("d", [], success=False),
    ]
    m = compute_metrics(samples, duration_s=2.0, max_in_flight=3)
    assert (m["completed"], m["failed"]) == (3, 1)
    assert m["total_input_tokens"] == 12 + 10 + 10  # usage's count when the server sent one
    assert m["total_output_tokens"] == 8
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(4.0)
    assert m["total_token_throughput"] == pytest.approx(20.0)
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    assert m["mean_tpot_ms"] == pytest.approx((25.0 + 50.0 / 3) / 2)
    assert m["mean_itl_ms"] == pytest.approx(20.0)  # pooled: 20, 30, 10, 10, 30
    assert m["median_itl_ms"] == pytest.approx(20.0)
    assert m["p99_itl_ms"] == pytest.approx(30.0)
    assert m["mean_e2el_ms"] == pytest.approx((150 + 250 + 310) / 3)
    assert m["max_concurrent_requests"] == 3
    assert m["errors"] == ["boom"]
    with pytest.raises(ValueError):
        compute_metrics(samples, 0.0)


def test_percentile_metrics_and_metric_percentiles_choose_the_percentile_keys():
    samples = [sample(str(i), [0.01 * (i + 1), 0.01 * (i + 2)]) for i in range(10)]  # ttft 10..100 ms
    m = compute_metrics(samples, 1.0, percentiles=(25, 50, 99.9), percentile_metrics=("ttft", "e2el"))
    assert m["p25_ttft_ms"] == pytest.approx(32.5) and m["p50_ttft_ms"] == pytest.approx(55.0)
    assert m["p99.9_ttft_ms"] == pytest.approx(99.91)  # vLLM's key for a fractional percentile
    assert "p25_e2el_ms" in m and "p95_ttft_ms" not in m and "p99_ttft_ms" not in m
    assert not any(k.startswith("p") and k.endswith(("_tpot_ms", "_itl_ms")) for k in m)
    assert "mean_itl_ms" in m and "median_tpot_ms" in m  # mean, median, std stay for every metric
    assert m["percentile_metrics"] == ["ttft", "e2el"] and m["percentiles"] == [25, 50, 99.9]
    default = compute_metrics(samples, 1.0)  # our default: every metric at P50/P95/P99
    assert all(f"p{p}_{n}_ms" in default for p in (50, 95, 99) for n in ("ttft", "tpot", "itl", "e2el"))
    assert default["request_goodput"] is None and "goodput_fraction" not in default
