"""Drive a workload: closed loop at a fixed concurrency, or open loop with Poisson arrivals.

As in `vllm bench serve`, a request held back by the concurrency limit takes its t_send when it
actually goes out, so TTFT never includes client-side queueing; the run's duration spans from the
first dispatch to the last completion, and warm-up requests (run first, with a different seed so they
cannot warm a prefix cache for the measured prompts) are not part of it.
"""
from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Sequence

import numpy as np

from bench.sample import RequestSample
from bench.workloads import BenchRequest

SendFn = Callable[[BenchRequest], Awaitable[RequestSample]]
# Warm-up prompts come from another seed, so they cannot warm the prefix cache for measured ones;
# short replies, since only the server's first calls at each shape need warming.
WARMUP_SEED_OFFSET = 1_000_003
MAX_WARMUP_OUTPUT_TOKENS = 16


@dataclass
class RunResult:
    samples: list[RequestSample]  # in workload order; t_send_s relative to the run's start
    duration_s: float
    max_in_flight: int
    arrival_times_s: list[float] = field(default_factory=list)  # scheduled offsets (open loop only)


def poisson_arrival_times(num_requests: int, rate: float, seed: int) -> np.ndarray:
    """Scheduled send offsets in seconds: exponential gaps of mean 1/rate, the first at 0.

    `rate = inf` sends everything at t0 (then only a concurrency limit spaces the requests).
    """
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s (inf for all at once), got {rate}")
    if math.isinf(rate) or num_requests == 0:
        return np.zeros(num_requests)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=num_requests)
    gaps[0] = 0.0
    return np.cumsum(gaps)


class _InFlight:
    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    async def run(self, send: SendFn, req: BenchRequest) -> RequestSample:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await send(req)
        finally:
            self.now -= 1


def _finish(samples: list[RequestSample], t0: float, t_end: float, peak: int, arrivals: list[float]) -> RunResult:
    for s in samples:
        s.t_send_s -= t0
    return RunResult(samples, t_end - t0, peak, arrivals)


async def run_closed_loop(send: SendFn, requests: Sequence[BenchRequest], concurrency: int) -> RunResult:
    """`concurrency` workers, each sending its next request as soon as its previous one ends."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    samples: list[RequestSample | None] = [None] * len(requests)
    flight = _InFlight()
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(requests):
            i = next_index
            next_index += 1
            samples[i] = await flight.run(send, requests[i])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(requests)))))
    return _finish(samples, t0, time.perf_counter(), flight.peak, [])  # type: ignore[arg-type]


async def run_open_loop(
    send: SendFn, requests: Sequence[BenchRequest], rate: float, seed: int, max_concurrency: int | None = None
) -> RunResult:
    """Each request dispatched at its Poisson arrival time; past `max_concurrency` it waits for a slot."""
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    arrivals = poisson_arrival_times(len(requests), rate, seed)
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    flight = _InFlight()

    async def one(req: BenchRequest) -> RequestSample:
        if limit is None:
            return await flight.run(send, req)
        async with limit:
            return await flight.run(send, req)

    t0 = time.perf_counter()
    tasks = []
    for req, offset in zip(requests, arrivals):
        delay = t0 + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(req)))
    samples = await asyncio.gather(*tasks)
    return _finish(list(samples), t0, time.perf_counter(), flight.peak, arrivals.tolist())


async def run_warmup(send: SendFn, requests: Sequence[BenchRequest], concurrency: int) -> list[RequestSample]:
    """Run requests whose results are not measured; any failure stops the run at once (a server
    that fails its warm-up would only fail the measured requests too)."""
    if not requests:
        return []
    samples = (await run_closed_loop(send, requests, concurrency)).samples
    if bad := [s for s in samples if not s.success]:
        raise RuntimeError(f"{len(bad)} of {len(requests)} warm-up requests failed, e.g.: {bad[0].error}")
    return samples
