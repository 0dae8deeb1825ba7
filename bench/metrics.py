"""Summary metrics computed exactly as `vllm bench serve` computes them, so the numbers compare.

- Only successful requests count; a failed request adds 0 output tokens.
- TTFT and E2E latency per request; TPOT = (latency - TTFT) / (output_tokens - 1) for requests with
  more than one output token; ITL pools every gap of every request.
- Percentiles by numpy's default (linear interpolation); an empty list gives 0, as in vLLM.
- Throughputs divide by the wall time of the whole measured run.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bench.sample import RequestSample

PERCENTILES = (50, 95, 99)
METRIC_NAMES = ("ttft", "tpot", "itl", "e2el")


def summarize_ms(name: str, values_s: Sequence[float]) -> dict[str, float]:
    """mean/std/median and P50/P95/P99 of a list of seconds, in milliseconds, under vLLM's key names."""
    arr = np.asarray(values_s if len(values_s) else [0.0], dtype=np.float64) * 1000.0
    out = {
        f"mean_{name}_ms": float(arr.mean()),
        f"std_{name}_ms": float(arr.std()),
        f"median_{name}_ms": float(np.median(arr)),
    }
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = float(np.percentile(arr, p))
    return out


def tpot_s(sample: RequestSample) -> float | None:
    """Time per output token after the first; None when there is at most one output token."""
    if sample.output_tokens <= 1 or sample.latency_s is None or sample.ttft_s is None:
        return None
    return (sample.latency_s - sample.ttft_s) / (sample.output_tokens - 1)


def compute_metrics(samples: Sequence[RequestSample], duration_s: float, max_in_flight: int = 0) -> dict:
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    ok = [s for s in samples if s.success]
    ttfts = [s.ttft_s for s in ok]
    e2els = [s.latency_s for s in ok]
    tpots = [t for s in ok if (t := tpot_s(s)) is not None]
    itls = [gap for s in ok for gap in s.itl_s()]
    total_input = sum(s.prompt_tokens if s.prompt_tokens is not None else s.prompt_len for s in ok)
    total_output = sum(s.output_tokens for s in ok)
    metrics: dict = {
        "completed": len(ok),
        "failed": len(samples) - len(ok),
        "duration_s": duration_s,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / duration_s,
        "output_throughput": total_output / duration_s,
        "total_token_throughput": (total_input + total_output) / duration_s,
        "max_concurrent_requests": max_in_flight,
    }
    for name, values in zip(METRIC_NAMES, (ttfts, tpots, itls, e2els)):
        metrics.update(summarize_ms(name, values))  # type: ignore[arg-type]
    errors = [s.error for s in samples if not s.success]
    metrics["errors"] = sorted(set(errors))[:10]  # distinct messages, so a failing run says why
    return metrics
