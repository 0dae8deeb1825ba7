"""OtlpTraceExport: finished requests' traces as OpenTelemetry spans, sent to an OTLP/HTTP collector.

The event loop's only cost is `submit`: one `put_nowait` on a bounded queue when a request ends
(never per token, never in the GPU step). A thread of its own turns each trace into spans
(observe/span_plan.py) with the SDK, moving the trace's monotonic times to the wall clock, and the
SDK's BatchSpanProcessor sends them in batches from its own thread. A queue that is full (a
collector far behind) drops the trace and counts it; a collector that is down costs the export
threads their retries and the log one line a minute (observe/log_limit.py), never a request.

A request that came with a W3C `traceparent` (observe/traceparent.py) gets its root span as a child
of the caller's span, in the caller's trace, and keeps the caller's sampling decision.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING

from observe.log_limit import limit_loggers
from observe.span_plan import plan_spans
from observe.traceparent import parse_traceparent
from stages.trace import RequestTrace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from pipeline.build import BuiltModel

log = logging.getLogger("ttft.otlp")

MAX_PENDING_TRACES = 4096
CLOSE_TIMEOUT_S = 2.0
# The loggers a failing export writes to, every batch (the exporter's retries and its last word).
EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk._shared_internal",
)
_STOP = object()


class OtlpTraceExport:
    def __init__(self, endpoint: str, server_attributes: dict[str, str] | None = None,
                 max_pending: int = MAX_PENDING_TRACES) -> None:
        self.endpoint = endpoint
        self.server_attributes = dict(server_attributes or {})
        self.num_dropped = 0  # traces the full queue turned away
        self.num_exported_traces = 0  # traces turned into spans and handed to the batcher
        self._queue: queue.Queue = queue.Queue(maxsize=max_pending)
        self._provider = _new_provider(endpoint)
        self._tracer = self._provider.get_tracer("ttft")
        self.log_limit = limit_loggers(EXPORT_LOGGERS)
        self._thread = threading.Thread(target=self._run, name="ttft-otlp-spans", daemon=True)
        self._thread.start()

    def submit(self, trace: RequestTrace) -> None:
        """A finished request's trace (called on the event loop: never blocks)."""
        try:
            self._queue.put_nowait(trace)
        except queue.Full:
            self.num_dropped += 1

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until every submitted trace is built and sent (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)
        left_ms = max(0, int((deadline - time.monotonic()) * 1e3))
        return self._provider.force_flush(left_ms) and not self._queue.unfinished_tasks

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Stop the thread and send what is batched, waiting at most `timeout_s` (a collector that is
        down would otherwise hold a shutdown for the exporter's whole retry time)."""
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            pass
        self._thread.join(timeout_s)
        closer = threading.Thread(target=self._provider.shutdown, name="ttft-otlp-close", daemon=True)
        closer.start()
        closer.join(timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._export(item)
            except Exception:  # a trace that cannot be turned into spans must not end the thread
                log.exception("OpenTelemetry: a request's spans could not be built")
            finally:
                self._queue.task_done()

    def _export(self, trace: RequestTrace) -> None:
        from opentelemetry import trace as otel_trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

        spans = plan_spans(trace, self.server_attributes)
        if not spans:
            return
        to_wall_ns = time.time_ns() - time.perf_counter_ns()  # the trace's clock to the epoch
        parent = parse_traceparent(trace.info.get("traceparent"))  # type: ignore[arg-type]
        context = None
        if parent is not None:
            caller = SpanContext(parent.trace_id, parent.span_id, is_remote=True,
                                 trace_flags=TraceFlags(TraceFlags.SAMPLED if parent.sampled else 0))
            context = otel_trace.set_span_in_context(NonRecordingSpan(caller))
        root_plan, children = spans[0], spans[1:]
        root = self._tracer.start_span(root_plan.name, context=context, kind=SpanKind.SERVER,
                                       attributes=root_plan.attributes, start_time=root_plan.start_ns + to_wall_ns)
        if not root.is_recording():  # the caller's trace is not sampled
            return
        in_root = otel_trace.set_span_in_context(root)
        for plan in children:
            span = self._tracer.start_span(plan.name, context=in_root, start_time=plan.start_ns + to_wall_ns)
            span.end(end_time=plan.end_ns + to_wall_ns)
        if trace.info.get("error") is not None or trace.info.get("finish_reason") == "error":
            root.set_status(Status(StatusCode.ERROR, str(trace.info.get("error") or "error")))
        root.end(end_time=root_plan.end_ns + to_wall_ns)
        self.num_exported_traces += 1


def _new_provider(endpoint: str) -> TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({})  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, if set
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "ttft"}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


def server_span_attributes(built: BuiltModel, model_name: str) -> dict[str, str]:
    """What every request's root span carries about the server: the model and the KV pool's format."""
    return {"gen_ai.request.model": model_name, "gen_ai.system": "ttft",
            "ttft.kv_cache_dtype": built.runner.kv_cache.kv_format.name}
