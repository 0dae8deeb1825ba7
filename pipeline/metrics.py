"""EngineMetrics: Prometheus export, one registry per engine (no globals: two engines can coexist).

Histograms are observed as requests progress; gauges (queue depths, KV blocks) are read from the
stages at scrape time by a collector, so the hot path never updates them. The collector reads the
engine through GaugedEngine, which names what it reads (pipeline/engine.py's Engine is one).
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from pipeline.health import EngineHealth
from pipeline.metrics_kv import kv_cache_metrics
from pipeline.metrics_tiers import tier_metrics
from stages.trace import RequestTrace

if TYPE_CHECKING:
    from pipeline.build import BuiltModel

LATENCY_BUCKETS_S = (
    0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
STAGE_BUCKETS_S = (
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0,
)


class GaugedEngine(Protocol):
    """What the scrape-time gauges read of an engine, once it has started."""
    built: BuiltModel | None
    health: EngineHealth

    @property
    def stages(self) -> list: ...  # the running actors (each has an `inbox`)

    @property
    def num_active(self) -> int: ...  # requests admitted whose reply has not ended


class EngineMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.ttft = Histogram(
            "ttft_time_to_first_token_seconds", "Body complete to first token bytes written",
            buckets=LATENCY_BUCKETS_S, registry=self.registry,
        )
        self.itl = Histogram(
            "ttft_inter_token_latency_seconds", "Gap between consecutive writes of one stream",
            buckets=LATENCY_BUCKETS_S, registry=self.registry,
        )
        self.stage = Histogram(
            "ttft_stage_seconds", "Time from the previous edge of a request's trace to this one",
            ["stage"], buckets=STAGE_BUCKETS_S, registry=self.registry,
        )
        self.host = Histogram(
            "ttft_host_overhead_seconds", "A request's own host work (parse, tokenize, schedule, emit)",
            buckets=STAGE_BUCKETS_S, registry=self.registry,
        )
        self.requests = Counter(
            "ttft_requests", "Requests by outcome (finish reason or rejection)", ["outcome"],
            registry=self.registry,
        )
        # process_resident_memory_bytes & co: a soak checks memory growth through /metrics alone.
        ProcessCollector(registry=self.registry)

    def bind(self, engine: GaugedEngine) -> None:
        self.registry.register(_EngineGauges(engine))

    def count_outcome(self, outcome: str) -> None:
        self.requests.labels(outcome=outcome).inc()

    def observe_write(self, trace: RequestTrace, now_ns: int) -> None:
        if trace.last_write_ns == 0:
            received = trace.marks_ns.get("received")
            if received is not None:
                self.ttft.observe((now_ns - received) / 1e9)
        else:
            self.itl.observe((now_ns - trace.last_write_ns) / 1e9)
        trace.last_write_ns = now_ns

    def observe_finished(self, trace: RequestTrace, outcome: str) -> None:
        self.count_outcome(outcome)
        for edge, start_ns, end_ns in trace.stage_spans():
            self.stage.labels(stage=edge).observe((end_ns - start_ns) / 1e9)
        self.host.observe(trace.host_overhead_s())

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineGauges:
    """Read at scrape time: queue depth per channel, KV blocks by state, requests in flight."""

    def __init__(self, engine: GaugedEngine) -> None:
        self.engine = engine

    def describe(self):
        return []

    def collect(self):
        e = self.engine
        depth = GaugeMetricFamily("ttft_queue_depth", "Messages waiting per channel", labels=["channel"])
        peak = GaugeMetricFamily("ttft_queue_peak_depth", "Peak depth per channel", labels=["channel"])
        for stage in e.stages:
            st = stage.inbox.stats()
            depth.add_metric([st.name], st.depth)
            peak.add_metric([st.name], st.peak_depth)
        yield depth
        yield peak
        st = e.built.scheduler.stats()
        kv = GaugeMetricFamily("ttft_kv_blocks", "KV blocks of the device pool by state", labels=["state"])
        kv.add_metric(["free"], st.num_free_blocks)
        kv.add_metric(["used"], st.num_used_blocks)
        kv.add_metric(["cached"], st.num_cached_blocks)
        yield kv
        yield from kv_cache_metrics(e.built.runner.kv_cache)
        reqs = GaugeMetricFamily("ttft_requests_in_flight", "Requests by state", labels=["state"])
        reqs.add_metric(["waiting"], st.num_waiting)
        reqs.add_metric(["running"], st.num_running)
        yield reqs
        yield GaugeMetricFamily("ttft_kv_reserved_blocks", "Blocks reserved at arrival for waiting requests",
                                value=st.num_reserved_blocks)
        yield CounterMetricFamily("ttft_preemptions", "Preemptions (by recompute)", value=st.num_preemptions)
        yield CounterMetricFamily("ttft_decodes_ahead", "Decodes built before their input token was sampled "
                                  "(async scheduling)", value=st.num_decodes_ahead)
        yield CounterMetricFamily("ttft_kv_evictions", "Cached blocks evicted from the device pool",
                                  value=st.num_evictions)
        yield GaugeMetricFamily("ttft_prefix_cache_hit_rate", "Prompt tokens served from the prefix cache "
                                "over prompt tokens looked up", value=st.prefix_hit_rate)
        yield from tier_metrics(e.built.scheduler.tiers)
        lanes = CounterMetricFamily("ttft_admitted_requests", "Requests admitted, by lane", labels=["lane"])
        lanes.add_metric(["short"], st.num_admitted_short)
        lanes.add_metric(["long"], st.num_admitted_long)
        yield lanes
        # Leak checks (a soak, the reliability tests): streams whose reply has not ended, and tasks
        # alive on the event loop (connections, watches, stages); both return to their idle level.
        yield GaugeMetricFamily("ttft_open_streams", "Requests admitted whose reply has not ended",
                                value=e.num_active)
        try:
            num_tasks = len(asyncio.all_tasks())
        except RuntimeError:  # scraped off the event loop (an embedder): not known here
            num_tasks = -1
        yield GaugeMetricFamily("ttft_event_loop_tasks", "Tasks alive on the event loop", value=num_tasks)
        yield GaugeMetricFamily("ttft_healthy", "1 when /health answers 200", value=int(e.health.ready))
