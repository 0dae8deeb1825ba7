"""StatsLogger: a one-line summary of the server's work every `--log-stats-interval-s` seconds.

As vLLM's periodic line: prompt and generation throughput over the interval, requests running and
waiting, the share of the KV pool requests hold, and the prefix-cache hit rate. The figures are
read from the same scrape-time families as /metrics (pipeline/metrics_gauges.py), so the line and
a dashboard never disagree, and the hot path does nothing for it. An interval with no work, after
one with none either, logs nothing.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from prometheus_client.core import Metric

from pipeline.engine import Engine
from pipeline.metrics_gauges import EngineGauges

log = logging.getLogger("ttft.stats")


@dataclass(frozen=True)
class StatsSnapshot:
    at_s: float
    prompt_tokens: float
    generation_tokens: float
    running: float
    waiting: float
    kv_usage: float  # 0 to 1
    prefix_hit_rate: float  # 0 to 1

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)


def snapshot(families: Iterable[Metric], at_s: float) -> StatsSnapshot:
    """The figures of one scrape of the gauges' families."""
    values: dict[tuple[str, str], float] = {}
    for family in families:
        for sample in family.samples:
            values[(sample.name, sample.labels.get("state", ""))] = sample.value
    return StatsSnapshot(
        at_s, values.get(("ttft_prompt_tokens_total", ""), 0.0), values.get(("ttft_generation_tokens_total", ""), 0.0),
        values.get(("ttft_requests_in_flight", "running"), 0.0), values.get(("ttft_requests_in_flight", "waiting"), 0.0),
        values.get(("ttft_kv_cache_usage_perc", ""), 0.0), values.get(("ttft_prefix_cache_hit_rate", ""), 0.0))


def stats_line(before: StatsSnapshot, now: StatsSnapshot) -> str:
    span_s = max(now.at_s - before.at_s, 1e-9)
    prompt_rate = (now.prompt_tokens - before.prompt_tokens) / span_s
    generation_rate = (now.generation_tokens - before.generation_tokens) / span_s
    return (f"prompt throughput {prompt_rate:.1f} tok/s, generation throughput {generation_rate:.1f} tok/s, "
            f"running {now.running:.0f}, waiting {now.waiting:.0f}, KV cache {now.kv_usage:.1%} used, "
            f"prefix cache hit rate {now.prefix_hit_rate:.1%}")


def worth_a_line(before: StatsSnapshot, now: StatsSnapshot) -> bool:
    """Something ran during the interval, or is running or waiting now."""
    return now.busy or before.busy or now.generation_tokens != before.generation_tokens \
        or now.prompt_tokens != before.prompt_tokens


class StatsLogger:
    def __init__(self, engine: Engine, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.clock = clock

    def read(self) -> StatsSnapshot | None:
        """The current figures; None until the engine is ready."""
        if not self.engine.health.ready:
            return None
        return snapshot(EngineGauges(self.engine).collect(), self.clock())

    async def run(self) -> None:
        """Log a line every interval in which the server worked (cancel it to stop)."""
        before = None
        while True:
            await asyncio.sleep(self.interval_s)
            now = self.read()
            if now is None:
                continue
            if before is not None and worth_a_line(before, now):
                log.info(stats_line(before, now))
            before = now
