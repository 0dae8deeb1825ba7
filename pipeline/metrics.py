"""EngineMetrics: Prometheus export, one registry per engine (no globals: two engines can coexist).

Histograms are observed as requests progress: a write's TTFT or inter-token gap (a whole,
non-streamed reply's TTFT is its first token's sampling, as vLLM's), and once per
request at its end, from its trace and its last output (stage spans, host work, end-to-end latency,
time per output token, queue time, token counts). Gauges and running counts (queue depths, KV
blocks, tokens, prefix-cache lookups) are read from the stages at scrape time by EngineGauges
(pipeline/metrics_gauges.py), so the hot path never updates them. Every series is labelled with
`model_name`, as vLLM's are; `bind` (at start, once the model is known) fixes it.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest

from pipeline.metric_families import MODEL_LABEL
from pipeline.metrics_gauges import EngineGauges, GaugedEngine
from stages.messages import RequestOutput
from stages.trace import RequestTrace

LATENCY_BUCKETS_S = (
    0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
STAGE_BUCKETS_S = (
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0,
)
# A whole request: vLLM's request latency buckets, with a few below 0.3 s (a short reply on a GPU).
REQUEST_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)
TPOT_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2,
    0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
)
TOKEN_BUCKETS = tuple(m * 10**e for e in range(7) for m in (1, 2, 5))  # 1, 2, 5, ... 5,000,000


class EngineMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        per_model = [MODEL_LABEL]
        self.ttft = Histogram("ttft_time_to_first_token_seconds", "Body complete to first token bytes written",
                              per_model, buckets=LATENCY_BUCKETS_S, registry=r)
        self.itl = Histogram("ttft_inter_token_latency_seconds", "Gap between consecutive writes of one stream",
                             per_model, buckets=LATENCY_BUCKETS_S, registry=r)
        self.stage = Histogram("ttft_stage_seconds", "Time from the previous edge of a request's trace to this one",
                               [MODEL_LABEL, "stage"], buckets=STAGE_BUCKETS_S, registry=r)
        self.host = Histogram("ttft_host_overhead_seconds", "A request's own host work (parse, tokenize, "
                              "schedule, emit)", per_model, buckets=STAGE_BUCKETS_S, registry=r)
        self.requests = Counter("ttft_requests", "Requests by outcome (finish reason or rejection)",
                                [MODEL_LABEL, "outcome"], registry=r)
        self.e2e = Histogram("ttft_e2e_request_latency_seconds", "Body complete to the request's end",
                             per_model, buckets=REQUEST_BUCKETS_S, registry=r)
        self.tpot = Histogram("ttft_request_time_per_output_token_seconds", "A request's decode time over its "
                              "output tokens after the first", per_model, buckets=TPOT_BUCKETS_S, registry=r)
        self.queue = Histogram("ttft_request_queue_time_seconds", "Queued to first scheduled",
                               per_model, buckets=LATENCY_BUCKETS_S, registry=r)
        self.prompt_len = Histogram("ttft_request_prompt_tokens", "Prompt tokens per finished request",
                                    per_model, buckets=TOKEN_BUCKETS, registry=r)
        self.output_len = Histogram("ttft_request_generation_tokens", "Output tokens per finished request",
                                    per_model, buckets=TOKEN_BUCKETS, registry=r)
        # process_resident_memory_bytes & co: a soak checks memory growth through /metrics alone.
        ProcessCollector(registry=r)
        self.model_name = ""

    def bind(self, engine: GaugedEngine) -> None:
        """At start, once the model is known and before any request: label the series with its
        name and register the scrape-time gauges."""
        self.model_name = name = engine.model_name
        self._ttft, self._itl, self._host = self.ttft.labels(name), self.itl.labels(name), self.host.labels(name)
        self._e2e, self._tpot, self._queue = self.e2e.labels(name), self.tpot.labels(name), self.queue.labels(name)
        self._prompt_len, self._output_len = self.prompt_len.labels(name), self.output_len.labels(name)
        self.registry.register(EngineGauges(engine))

    def count_outcome(self, outcome: str) -> None:
        self.requests.labels(self.model_name, outcome).inc()

    def observe_write(self, trace: RequestTrace, now_ns: int, whole_reply: bool = False) -> None:
        """A write of a request's output: its first gives the TTFT, each later one an inter-token
        gap. `whole_reply`: a non-streamed reply, written once at its end, whose TTFT is (as vLLM
        counts it) the time its first token was sampled; its whole latency is the e2e histogram's."""
        if trace.last_write_ns == 0:
            received = trace.marks_ns.get("received")
            first_ns = trace.marks_ns.get("first_token_sampled", now_ns) if whole_reply else now_ns
            if received is not None:
                self._ttft.observe((first_ns - received) / 1e9)
        elif not whole_reply:
            self._itl.observe((now_ns - trace.last_write_ns) / 1e9)
        trace.last_write_ns = now_ns

    def observe_finished(self, trace: RequestTrace, out: RequestOutput) -> None:
        """Once per request, at its end (`out` its last output; `trace` marked "finished")."""
        self.count_outcome(out.finish_reason or "unknown")
        for edge, start_ns, end_ns in trace.stage_spans():
            self.stage.labels(self.model_name, edge).observe((end_ns - start_ns) / 1e9)
        self._host.observe(trace.host_overhead_s())
        self._prompt_len.observe(out.num_prompt_tokens)
        self._output_len.observe(out.num_output_tokens)
        if (e2e_s := trace.span_s("received", "finished")) is not None:
            self._e2e.observe(e2e_s)
        if (queue_s := trace.span_s("queued", "first_scheduled")) is not None:
            self._queue.observe(queue_s)
        # vLLM's per-request TPOT: the decode (first token sampled to the end) over the tokens after
        # the first. Both marks are the server's own, so streamed and whole replies compare.
        decode_s = trace.span_s("first_token_sampled", "finished")
        if decode_s is not None and out.num_output_tokens > 1:
            self._tpot.observe(decode_s / (out.num_output_tokens - 1))

    def render(self) -> bytes:
        return generate_latest(self.registry)
