"""The periodic stats line: read from the same families as /metrics, rates over the interval, and
only when the server worked."""
from __future__ import annotations

import asyncio
import logging

from pipeline import Engine, EngineConfig
from pipeline.metric_families import ModelFamilies
from pipeline.stats_logger import StatsLogger, StatsSnapshot, snapshot, stats_line, worth_a_line
from stages.sampling import SamplingParams


def families(prompt: float, generation: float, running: float, waiting: float, usage: float, hits: float):
    fam = ModelFamilies("m")
    return [fam.counter("ttft_prompt_tokens", "", prompt), fam.counter("ttft_generation_tokens", "", generation),
            fam.gauge_by("ttft_requests_in_flight", "", "state", {"running": running, "waiting": waiting}),
            fam.gauge("ttft_kv_cache_usage_perc", "", usage), fam.gauge("ttft_prefix_cache_hit_rate", "", hits),
            fam.gauge_by("ttft_kv_blocks", "", "state", {"running": 99})]  # another family's "running": ignored


def test_a_snapshot_reads_the_families_it_names():
    snap = snapshot(families(100, 40, 3, 2, 0.25, 0.5), at_s=7.0)
    assert snap == StatsSnapshot(7.0, 100, 40, 3, 2, 0.25, 0.5)


def test_the_line_gives_rates_over_the_interval():
    before = snapshot(families(100, 40, 0, 0, 0.0, 0.0), at_s=10.0)
    now = snapshot(families(300, 90, 4, 1, 0.125, 0.5), at_s=20.0)
    assert stats_line(before, now) == ("prompt throughput 20.0 tok/s, generation throughput 5.0 tok/s, running 4, "
                                       "waiting 1, KV cache 12.5% used, prefix cache hit rate 50.0%")


def test_only_intervals_with_work_are_worth_a_line():
    idle = snapshot(families(100, 40, 0, 0, 0.0, 0.0), at_s=0.0)
    assert not worth_a_line(idle, snapshot(families(100, 40, 0, 0, 0.0, 0.0), at_s=10.0))
    assert worth_a_line(idle, snapshot(families(100, 41, 0, 0, 0.0, 0.0), at_s=10.0))  # tokens came out
    assert worth_a_line(idle, snapshot(families(100, 40, 0, 1, 0.0, 0.0), at_s=10.0))  # one waits
    busy = snapshot(families(100, 40, 1, 0, 0.1, 0.0), at_s=0.0)
    assert worth_a_line(busy, snapshot(families(100, 40, 0, 0, 0.0, 0.0), at_s=10.0))  # work ended in it


async def test_on_an_engine_it_counts_what_ran_and_logs_it(caplog):
    async with Engine(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256)) as engine:
        logger = StatsLogger(engine, interval_s=0.05)
        before = logger.read()
        params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
        with caplog.at_level(logging.INFO, logger="ttft.stats"):
            task = asyncio.create_task(logger.run())
            await asyncio.sleep(0.1)
            async for _ in engine.generate([5, 6, 7], params):
                pass
            await asyncio.sleep(0.2)
            task.cancel()
        now = logger.read()
    assert now.generation_tokens - before.generation_tokens == 6
    assert now.prompt_tokens - before.prompt_tokens == 3
    assert now.running == now.waiting == 0
    lines = [r.message for r in caplog.records if r.name == "ttft.stats"]
    assert lines and all(line.startswith("prompt throughput ") for line in lines)


def test_nothing_is_read_before_the_engine_is_ready():
    assert StatsLogger(Engine(EngineConfig(model="dummy:tiny")), 1.0).read() is None
