"""Windowed percentiles from a histogram's buckets: interpolated as Prometheus does, and only the
observations of the window counted."""
from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram

from observe.histogram_window import HistogramWindow, quantile

INF = float("inf")


def test_quantiles_interpolate_within_their_bucket() -> None:
    bounds, cumulative = [0.1, 0.2, 0.4, INF], [0, 10, 20, 20]
    assert quantile(0.5, bounds, cumulative) == pytest.approx(0.2)
    assert quantile(0.25, bounds, cumulative) == pytest.approx(0.15)
    assert quantile(0.99, bounds, cumulative) == pytest.approx(0.396)
    assert quantile(0.5, bounds, [0, 0, 0, 0]) is None
    assert quantile(0.9, [0.1, INF], [1, 10]) == 0.1  # past the last finite bound: that bound


def test_the_window_counts_only_its_own_observations() -> None:
    now = [0.0]
    hist = Histogram("h_seconds", "h", ["m"], buckets=(0.01, 0.1, 1.0), registry=CollectorRegistry())
    child = hist.labels("x")
    window = HistogramWindow(hist, window_s=60.0, every_s=5.0, clock=lambda: now[0])
    for _ in range(4):
        child.observe(0.5)
    now[0] = 10.0
    assert window.summary()["count"] == 4  # a snapshot taken now, the start one still inside the window
    now[0] = 30.0
    for _ in range(2):
        child.observe(0.005)
    summary = window.summary((0.5,))
    assert summary["count"] == 6 and summary["p50_ms"] == pytest.approx(325.0)  # rank 3 of 6: a quarter into (0.1, 1]
    now[0] = 65.0  # the start snapshot has left the window: counted from the one at 10 s
    assert window.summary()["count"] == 2
    now[0] = 200.0
    assert window.summary() == {"count": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None}


def test_a_first_read_after_a_pause_longer_than_the_window_counts_what_came_since_the_last_snapshot() -> None:
    now = [0.0]
    hist = Histogram("h_seconds", "h", buckets=(0.01, 0.1, 1.0), registry=CollectorRegistry())
    window = HistogramWindow(hist, window_s=60.0, every_s=5.0, clock=lambda: now[0])
    for _ in range(3):
        hist.observe(0.05)
    now[0] = 400.0  # nobody read the window meanwhile: no snapshot between the start and now
    assert window.summary()["count"] == 3  # not an empty window
    hist.observe(0.05)
    now[0] = 401.0
    assert window.summary()["count"] == 1  # from the snapshot taken at 400 s, inside the window
