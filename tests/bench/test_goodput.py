"""Goodput: requests meeting every SLO, as vLLM counts them, on hand-made samples."""
from __future__ import annotations

import pytest

from bench.goodput import goodput_metrics, is_good, parse_goodput
from bench.sample import RequestSample


def sample(ttft_s: float, latency_s: float, output_tokens: int, success: bool = True) -> RequestSample:
    return RequestSample("r", 10, 8, ttft_s=ttft_s, latency_s=latency_s, output_tokens=output_tokens,
                         success=success)


def test_parse_goodput():
    assert parse_goodput(["ttft:200", "tpot:50", "e2el:1500.5"]) == {"ttft": 200.0, "tpot": 50.0, "e2el": 1500.5}
    for bad, word in (["ttft"], "KEY:MILLISECONDS"), (["ttft:fast"], "KEY:MILLISECONDS"), \
                     (["itl:5"], "one of ttft, tpot, e2el"), (["ttft:-1"], ">= 0"):
        with pytest.raises(ValueError, match=word):
            parse_goodput(bad)


def test_a_request_is_good_when_it_meets_every_slo():
    slos = {"ttft": 100.0, "tpot": 20.0}
    assert is_good(sample(0.100, 0.300, 11), slos)  # ttft exactly 100 ms, tpot (0.3-0.1)/10 = 20 ms
    assert not is_good(sample(0.101, 0.300, 11), slos)  # ttft misses
    assert not is_good(sample(0.050, 0.300, 6), slos)  # tpot 50 ms misses
    assert is_good(sample(0.050, 5.000, 1), slos)  # one token: tpot 0, as vLLM counts it
    assert not is_good(sample(0.050, 0.060, 2, success=False), slos)  # a failure is never good
    assert not is_good(sample(0.050, 2.0, 1), {"e2el": 1000.0})


def test_goodput_metrics():
    samples = [sample(0.05, 0.2, 4), sample(0.5, 0.9, 4), sample(0.05, 0.1, 2), sample(0.05, 0.1, 2, success=False)]
    m = goodput_metrics(samples, 2.0, {"ttft": 100.0})
    assert m == {"request_goodput": 1.0, "num_good_requests": 2, "goodput_fraction": 0.5,
                 "goodput_slos_ms": {"ttft": 100.0}}
    assert goodput_metrics(samples, 2.0, None) == {"request_goodput": None}
