"""Device time of a callable: CUDA events around each call, the median of `reps` after 3 warm-ups
(`device` cpu: wall-clock time instead, for benchmarks' CPU smoke runs)."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def median_ms(fn: Callable[[], object], reps: int = 20, device: str = "cuda") -> float:
    for _ in range(3):
        fn()
    if device == "cpu":
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
