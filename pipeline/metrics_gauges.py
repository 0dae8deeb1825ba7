"""EngineGauges: the families read from the stages at scrape time, so the hot path never updates them.

Queue depths, KV blocks, request states, the scheduler's and the emitter's running counts (tokens,
prefix-cache lookups, preemptions), the KV tiers, and the leak checks. Every series carries the
`model_name` label (pipeline/metric_families.py). The collector reads the engine through
GaugedEngine, which names what it reads (pipeline/engine.py's Engine is one). Each section is one
function of what it reads; a new source of counters (speculative decoding's: metrics_spec.py) is
one more section in `collect`.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Iterator, Protocol

from prometheus_client.core import Metric

from pipeline.health import EngineHealth
from pipeline.metric_families import ModelFamilies
from pipeline.metrics_cpu import cpu_path_metrics, cpu_thread_metrics
from pipeline.metrics_kv import kv_cache_metrics
from pipeline.metrics_spec import spec_metrics
from pipeline.metrics_structured import structured_metrics
from pipeline.metrics_tiers import tier_metrics
from scheduler.invariants import SchedulerStats

if TYPE_CHECKING:
    from emitter.stage import EmitterStage
    from pipeline.build import BuiltModel


class GaugedEngine(Protocol):
    """What the scrape-time gauges read of an engine, once it has started."""
    built: BuiltModel | None
    health: EngineHealth
    emitter_stage: EmitterStage

    @property
    def model_name(self) -> str: ...

    @property
    def stages(self) -> list: ...  # the running actors (each has an `inbox`)

    @property
    def num_active(self) -> int: ...  # requests admitted whose reply has not ended


class EngineGauges:
    def __init__(self, engine: GaugedEngine) -> None:
        self.engine = engine
        self.families = ModelFamilies(engine.model_name)

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Metric]:
        e, fam = self.engine, self.families
        st = e.built.scheduler.stats()
        yield from queue_metrics(e.stages, fam)
        yield from scheduler_metrics(st, fam)
        yield from token_metrics(e.emitter_stage, fam)
        yield from tier_metrics(e.built.scheduler.tiers, fam)
        yield from spec_metrics(e.built.scheduler.hooks, fam)
        yield from structured_metrics(e.built.grammars, e.built.runner, e.built.scheduler.gates, fam)
        yield from cpu_path_metrics(e.stages, fam)
        yield from cpu_thread_metrics(e.stages, fam)
        yield from kv_cache_metrics(e.built.runner.kv_cache, fam)
        yield from liveness_metrics(e, fam)


def queue_metrics(stages: list, fam: ModelFamilies) -> Iterator[Metric]:
    stats = [stage.inbox.stats() for stage in stages]
    yield fam.gauge_by("ttft_queue_depth", "Messages waiting per channel", "channel",
                       {st.name: st.depth for st in stats})
    yield fam.gauge_by("ttft_queue_peak_depth", "Peak depth per channel", "channel",
                       {st.name: st.peak_depth for st in stats})


def scheduler_metrics(st: SchedulerStats, fam: ModelFamilies) -> Iterator[Metric]:
    yield fam.gauge_by("ttft_kv_blocks", "KV blocks of the device pool by state", "state",
                       {"free": st.num_free_blocks, "used": st.num_used_blocks, "cached": st.num_cached_blocks})
    # vLLM's kv_cache_usage_perc: blocks held by requests over the pool (cached, idle blocks are free).
    usage = st.num_used_blocks / st.num_usable_blocks if st.num_usable_blocks else 0.0
    yield fam.gauge("ttft_kv_cache_usage_perc", "Device KV pool in use by requests, as a fraction (0-1)", usage)
    yield fam.gauge_by("ttft_requests_in_flight", "Requests by state", "state",
                       {"waiting": st.num_waiting, "running": st.num_running})
    yield fam.gauge("ttft_kv_reserved_blocks", "Blocks reserved at arrival for waiting requests",
                    st.num_reserved_blocks)
    yield fam.counter("ttft_preemptions", "Preemptions (by recompute)", st.num_preemptions)
    yield fam.counter("ttft_decodes_ahead", "Decodes built before their input token was sampled "
                      "(async scheduling)", st.num_decodes_ahead)
    yield fam.counter("ttft_kv_evictions", "Cached blocks evicted from the device pool", st.num_evictions)
    yield fam.counter("ttft_prefix_cache_queries", "Prompt tokens looked up in the prefix cache at first "
                      "admission", st.num_prefix_query_tokens)
    yield fam.counter("ttft_prefix_cache_hits", "Of those, prompt tokens served from the prefix cache",
                      st.num_prefix_hit_tokens)
    yield fam.gauge("ttft_prefix_cache_hit_rate", "Prompt tokens served from the prefix cache over prompt "
                    "tokens looked up", st.prefix_hit_rate)
    yield fam.counter_by("ttft_admitted_requests", "Requests admitted, by lane", "lane",
                         {"short": st.num_admitted_short, "long": st.num_admitted_long})


def token_metrics(emitter: EmitterStage, fam: ModelFamilies) -> Iterator[Metric]:
    yield fam.counter("ttft_prompt_tokens", "Prompt tokens of requests that got their first token",
                      emitter.num_prompt_tokens)
    yield fam.counter("ttft_generation_tokens", "Tokens generated", emitter.num_generation_tokens)


def liveness_metrics(e: GaugedEngine, fam: ModelFamilies) -> Iterator[Metric]:
    """Leak checks (a soak, the reliability tests): streams whose reply has not ended, and tasks
    alive on the event loop (connections, watches, stages); both return to their idle level."""
    yield fam.gauge("ttft_open_streams", "Requests admitted whose reply has not ended", e.num_active)
    try:
        num_tasks = len(asyncio.all_tasks())
    except RuntimeError:  # scraped off the event loop (an embedder): not known here
        num_tasks = -1
    yield fam.gauge("ttft_event_loop_tasks", "Tasks alive on the event loop", num_tasks)
    yield fam.gauge("ttft_healthy", "1 when /health answers 200", int(e.health.ready))
