"""Device time of a callable: CUDA events around each call, the median of `reps` after 3 warm-ups."""
from __future__ import annotations

import statistics
from typing import Callable

import torch


def median_ms(fn: Callable[[], object], reps: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
