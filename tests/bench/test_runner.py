"""Closed and open loops with a fake `send`: concurrency limits, arrival times, rebased send times."""
from __future__ import annotations

import asyncio
import math
import time

import numpy as np
import pytest

from bench.runner import poisson_arrival_times, run_closed_loop, run_open_loop, run_warmup
from bench.sample import RequestSample
from bench.workloads import random_workload


def test_poisson_arrivals_mean_and_determinism():
    t = poisson_arrival_times(20000, rate=50.0, seed=7)
    assert np.array_equal(t, poisson_arrival_times(20000, 50.0, 7))
    assert not np.array_equal(t, poisson_arrival_times(20000, 50.0, 8))
    gaps = np.diff(t)
    assert t[0] == 0.0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.03)
    assert gaps.std() == pytest.approx(1 / 50, rel=0.05)  # exponential: std == mean
    assert np.array_equal(poisson_arrival_times(5, math.inf, 0), np.zeros(5))
    with pytest.raises(ValueError):
        poisson_arrival_times(5, 0.0, 0)


class FakeSend:
    def __init__(self, service_s: float) -> None:
        self.service_s = service_s
        self.now = self.peak = 0
        self.sent_at: list[float] = []

    async def __call__(self, req) -> RequestSample:
        self.now += 1
        self.peak = max(self.peak, self.now)
        s = RequestSample(req.request_id, req.prompt_len, req.max_tokens, t_send_s=time.perf_counter())
        self.sent_at.append(s.t_send_s)
        await asyncio.sleep(self.service_s)
        s.success = True
        self.now -= 1
        return s


def test_closed_loop_keeps_concurrency():
    reqs = random_workload(12, 4, 1)
    send = FakeSend(0.02)
    run = asyncio.run(run_closed_loop(send, reqs, concurrency=3))
    assert [s.request_id for s in run.samples] == [r.request_id for r in reqs]
    assert send.peak == run.max_in_flight == 3
    assert 4 * 0.02 <= run.duration_s < 12 * 0.02  # 12 requests, 3 at a time: well under one at a time
    assert all(0 <= s.t_send_s < run.duration_s for s in run.samples)  # rebased on the run's start


def test_open_loop_follows_arrivals_and_caps_concurrency():
    reqs = random_workload(40, 4, 1)
    send = FakeSend(0.05)
    run = asyncio.run(run_open_loop(send, reqs, rate=200.0, seed=1, max_concurrency=2))
    assert send.peak == 2
    # with the cap, each send happens no earlier than its scheduled arrival
    sends = sorted(s.t_send_s for s in run.samples)
    assert all(s >= a - 1e-3 for s, a in zip(sends, run.arrival_times_s))
    assert run.duration_s >= 20 * 0.05  # 40 requests of 50 ms, 2 at a time

    uncapped = FakeSend(0.001)
    run = asyncio.run(run_open_loop(uncapped, random_workload(30, 4, 1), rate=300.0, seed=2))
    arrivals = np.array(run.arrival_times_s)
    lateness = np.array([s.t_send_s for s in run.samples]) - arrivals
    assert np.all(lateness > -1e-3) and np.median(lateness) < 0.03  # loose: a busy shared machine
    assert run.arrival_times_s == poisson_arrival_times(30, 300.0, 2).tolist()


def test_rate_inf_sends_all_at_once():
    send = FakeSend(0.1)
    run = asyncio.run(run_open_loop(send, random_workload(10, 4, 1), rate=math.inf, seed=0))
    assert send.peak == 10 and run.duration_s < 0.5  # one at a time would take 1 s


def test_warmup_runs_requests():
    send = FakeSend(0.0)
    assert len(asyncio.run(run_warmup(send, random_workload(3, 4, 1), 2))) == 3
    assert asyncio.run(run_warmup(send, [], 2)) == []


def test_a_failed_warmup_stops_the_run():
    async def second_fails(req) -> RequestSample:
        ok = req.request_id.endswith("0")
        return RequestSample(req.request_id, req.prompt_len, req.max_tokens, success=ok,
                             error="" if ok else "HTTP 400: bad ids")

    requests = random_workload(2, 4, 1)
    assert [r.request_id[-1] for r in requests] == ["0", "1"]
    with pytest.raises(RuntimeError, match="1 of 2 warm-up requests failed, e.g.: HTTP 400: bad ids"):
        asyncio.run(run_warmup(second_fails, requests, 2))
