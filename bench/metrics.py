"""Summary metrics computed exactly as `vllm bench serve` computes them, so the numbers compare.

- Only successful requests count; a failed request adds 0 output tokens.
- TTFT and E2E latency per request; TPOT = (latency - TTFT) / (output_tokens - 1) for requests with
  more than one output token; ITL pools every gap of every request.
- Percentiles by numpy's default (linear interpolation); an empty list gives 0, as in vLLM.
- Throughputs divide by the wall time of the whole measured run.
- `percentile_metrics` and `percentiles` (vLLM's --percentile-metrics and --metric-percentiles): which
  metrics get percentile keys (`p99_ttft_ms`; `p99.9_ttft_ms` for a fraction), and which percentiles.
  Ours default to all four metrics at P50/P95/P99 (vLLM's to ttft,tpot,itl at P99); mean, median and
  std are kept for every metric, so a report always has them.
- Goodput with SLOs (bench/goodput.py).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bench.goodput import goodput_metrics
from bench.sample import RequestSample

PERCENTILES = (50, 95, 99)
METRIC_NAMES = ("ttft", "tpot", "itl", "e2el")


def percentile_word(p: float) -> str:
    """How vLLM writes a percentile in its keys: 99 -> '99', 99.9 -> '99.9'."""
    return str(int(p)) if int(p) == p else str(p)


def summarize_ms(name: str, values_s: Sequence[float], percentiles: Sequence[float] = PERCENTILES) -> dict[str, float]:
    """mean/std/median and the percentiles of a list of seconds, in milliseconds, under vLLM's key names."""
    arr = np.asarray(values_s if len(values_s) else [0.0], dtype=np.float64) * 1000.0
    out = {
        f"mean_{name}_ms": float(arr.mean()),
        f"std_{name}_ms": float(arr.std()),
        f"median_{name}_ms": float(np.median(arr)),
    }
    for p in percentiles:
        out[f"p{percentile_word(p)}_{name}_ms"] = float(np.percentile(arr, p))
    return out


def compute_metrics(
    samples: Sequence[RequestSample],
    duration_s: float,
    max_in_flight: int = 0,
    percentiles: Sequence[float] = PERCENTILES,
    percentile_metrics: Sequence[str] = METRIC_NAMES,
    goodput_slos_ms: dict[str, float] | None = None,
) -> dict:
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    ok = [s for s in samples if s.success]
    ttfts = [s.ttft_s for s in ok]
    e2els = [s.latency_s for s in ok]
    tpots = [t for s in ok if (t := s.tpot_s()) is not None]
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
        metrics.update(summarize_ms(name, values, percentiles if name in percentile_metrics else ()))  # type: ignore[arg-type]
    metrics["percentile_metrics"] = [m for m in METRIC_NAMES if m in percentile_metrics]
    metrics["percentiles"] = list(percentiles)
    metrics.update(goodput_metrics(samples, duration_s, goodput_slos_ms))
    errors = [s.error for s in samples if not s.success]
    metrics["errors"] = sorted(set(errors))[:10]  # distinct messages, so a failing run says why
    return metrics
