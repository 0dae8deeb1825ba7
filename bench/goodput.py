"""Goodput as `vllm bench serve --goodput` defines it (the DistServe paper's): the requests that meet
every given service-level objective, per second of the run.

SLOs are `KEY:MS` pairs with KEY one of ttft, tpot, e2el. A request is good when it succeeded and
each of its measured values is at most the SLO; a request with at most one output token has a TPOT
of 0 here, as in vLLM. We also report the share of all requests sent that were good (a failed
request is never good), which is what an SLO report usually quotes.
"""
from __future__ import annotations

from typing import Sequence

from bench.sample import RequestSample

GOODPUT_METRICS = ("ttft", "tpot", "e2el")


def parse_goodput(pairs: Sequence[str]) -> dict[str, float]:
    """['ttft:200', 'tpot:50'] -> {'ttft': 200.0, 'tpot': 50.0} (milliseconds); ValueError naming
    the pair that is malformed, unknown or negative."""
    slos: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition(":")
        try:
            ms = float(value) if sep else None
        except ValueError:
            ms = None
        if ms is None:
            raise ValueError(f"--goodput {pair!r}: expected KEY:MILLISECONDS, e.g. ttft:200")
        if name not in GOODPUT_METRICS:
            raise ValueError(f"--goodput {pair!r}: the metric must be one of {', '.join(GOODPUT_METRICS)}")
        if ms < 0:
            raise ValueError(f"--goodput {pair!r}: the objective must be >= 0 ms")
        slos[name] = ms
    return slos


def request_values_s(sample: RequestSample) -> dict[str, float]:
    """A successful request's ttft, tpot (0 for at most one output token) and e2el, in seconds."""
    assert sample.ttft_s is not None and sample.latency_s is not None
    return {"ttft": sample.ttft_s, "tpot": sample.tpot_s() or 0.0, "e2el": sample.latency_s}


def is_good(sample: RequestSample, slos_ms: dict[str, float]) -> bool:
    if not sample.success:
        return False
    values = request_values_s(sample)
    return all(values[name] <= ms / 1000.0 for name, ms in slos_ms.items())


def goodput_metrics(samples: Sequence[RequestSample], duration_s: float, slos_ms: dict[str, float] | None) -> dict:
    """vLLM's `request_goodput` (req/s; None without SLOs) and the good share of all requests."""
    if not slos_ms:
        return {"request_goodput": None}
    num_good = sum(is_good(s, slos_ms) for s in samples)
    return {
        "request_goodput": num_good / duration_s,
        "num_good_requests": num_good,
        "goodput_fraction": num_good / len(samples) if samples else 0.0,
        "goodput_slos_ms": dict(slos_ms),
    }
