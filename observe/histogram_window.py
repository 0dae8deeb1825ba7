"""Percentiles of a Prometheus histogram over the last minutes, from snapshots of its buckets.

The histograms (TTFT, inter-token latency) are already observed as requests run; this only reads
their cumulative bucket counts when the dashboard asks, keeps one snapshot per `every_s` for the
window, and answers with the difference between now and the oldest snapshot inside the window (after
a pause longer than the window, the last one before it): the observations of the last minutes, with
no work per token and a bounded history. Quantiles are interpolated within their bucket, as
Prometheus's `histogram_quantile` does.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Callable, Sequence

from prometheus_client import Histogram


def cumulative_buckets(histogram: Histogram) -> tuple[list[float], list[float]]:
    """(upper bounds, cumulative counts) of the histogram's series summed over its labels; the last
    bound is +Inf."""
    counts: dict[float, float] = {}
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_bucket"):
                le = float(sample.labels["le"])
                counts[le] = counts.get(le, 0.0) + sample.value
    bounds = sorted(counts)
    return bounds, [counts[b] for b in bounds]


def quantile(q: float, bounds: Sequence[float], cumulative: Sequence[float]) -> float | None:
    """The q-quantile (0-1) of bucketed observations, None when there are none. Within a bucket the
    observations are taken as spread evenly; past the last finite bound, that bound is the answer."""
    total = cumulative[-1] if cumulative else 0
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in zip(bounds, cumulative):
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            in_bucket = count - lower_count
            share = (rank - lower_count) / in_bucket if in_bucket else 1.0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return lower_bound


class HistogramWindow:
    """The observations of the last `window_s` of one histogram, snapshot by snapshot."""

    def __init__(self, histogram: Histogram, window_s: float = 300.0, every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.histogram = histogram
        self.window_s = window_s
        self.every_s = every_s
        self._clock = clock
        bounds, counts = cumulative_buckets(histogram)
        # (time, cumulative counts); the first is the start, so a young server's window is its life.
        self._snapshots: deque[tuple[float, list[float]]] = deque(
            [(clock(), [0.0] * len(counts))], maxlen=int(window_s / every_s) + 2)

    def summary(self, quantiles: Sequence[float] = (0.5, 0.9, 0.99)) -> dict[str, float | int | None]:
        """`count` in the window, `p50_ms`... for each quantile (None when there was nothing)."""
        now = self._clock()
        bounds, counts = cumulative_buckets(self.histogram)
        # The oldest earlier snapshot inside the window; when none is (the first read after a pause
        # longer than the window), the last one before it: what came since cannot be told apart,
        # and counting it beats a window that would read as empty.
        base = next((c for t, c in self._snapshots if t >= now - self.window_s), self._snapshots[-1][1])
        if now - self._snapshots[-1][0] >= self.every_s:
            self._snapshots.append((now, counts))
        if len(base) != len(counts):  # the series appeared since the start snapshot
            base = [0.0] * len(counts)
        delta = [c - b for c, b in zip(counts, base)]
        out: dict[str, float | int | None] = {"count": int(delta[-1]) if delta else 0}
        for q in quantiles:
            value = quantile(q, bounds, delta)
            out[f"p{round(q * 100):d}_ms"] = None if value is None else round(value * 1e3, 3)
        return out
