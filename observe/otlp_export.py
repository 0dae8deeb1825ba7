"""OtlpTraceExport: finished requests' traces as OpenTelemetry spans, sent to an OTLP/HTTP collector.

The event loop's only cost is `submit`: one `put_nowait` on a bounded queue when a request ends
(never per token, never in the GPU step). A thread of its own wakes once per OTEL_BSP_SCHEDULE_DELAY
(default 5 s; sooner when the queue is a quarter full), takes every trace waiting, turns each into
finished spans (observe/span_plan.py), moving the trace's monotonic times to the wall clock, and
posts them in batches of OTEL_BSP_MAX_EXPORT_BATCH_SIZE spans with the SDK's OTLP/HTTP exporter.
It wakes per batch, not per request: each wake-up takes the interpreter lock, and on a host whose
cores are busy a thread that holds the lock when the OS takes its core away makes the event loop and
the GPU stage wait until it runs again. The spans are built as the SDK's finished
`ReadableSpan`s directly: going through a tracer (`start_span`/`end`: context, sampler, processors for
every span) costs several times more CPU for spans whose times are all known already.

A full queue (a collector far behind, or down and retried) drops the trace and counts it; a collector
that is down costs this thread its retries and the log one line a minute (observe/log_limit.py),
never a request. A request that came with a W3C `traceparent` (observe/traceparent.py) gets its root
span as a child of the caller's span, in the caller's trace. Which requests are exported is the
sampler's word (OTEL_TRACES_SAMPLER, observe/trace_sampling.py; by default the caller's sampled
flag, and every request that came without one), asked on this thread, never on the event loop.
"""
from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
from typing import TYPE_CHECKING

from observe.log_limit import limit_loggers
from observe.otlp_settings import sampler_choice
from observe.span_plan import PlannedSpan, plan_spans
from observe.trace_sampling import TraceSampling
from observe.traceparent import parse_traceparent
from stages.trace import RequestTrace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from pipeline.build import BuiltModel

log = logging.getLogger("ttft.otlp")

MAX_PENDING_TRACES = 4096
CLOSE_TIMEOUT_S = 2.0
# The loggers a failing export writes to, every batch (the exporter's retries and its last word).
EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",
)


def _env_int(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


class OtlpTraceExport:
    def __init__(self, endpoint: str, server_attributes: dict[str, str] | None = None,
                 max_pending: int = MAX_PENDING_TRACES) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.endpoint = endpoint
        self.server_attributes = dict(server_attributes or {})
        self.delay_s = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1e3  # the SDK's batching variables
        self.max_batch_spans = _env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
        self.num_submitted = 0
        self.num_done = 0  # traces exported, skipped (unsampled) or failed
        self.num_unsampled = 0  # traces the sampler left out
        self.num_dropped = 0  # traces the full queue turned away
        self.num_exported_traces = 0
        self._queue: queue.Queue = queue.Queue(maxsize=max_pending)
        self._wake_at = max(1, max_pending // 4)  # queued traces that wake the thread before its time
        self._wake = threading.Event()
        self._stopping = False
        self.sampling = TraceSampling(sampler_choice())
        self._resource = _resource()
        self._scope = InstrumentationScope("ttft")
        self._exporter = OTLPSpanExporter(endpoint=endpoint)
        self.log_limit = limit_loggers(EXPORT_LOGGERS + ("ttft.otlp",))
        self._thread = threading.Thread(target=self._run, name="ttft-otlp-spans", daemon=True)
        self._thread.start()

    def submit(self, trace: RequestTrace) -> None:
        """A finished request's trace (called on the event loop: never blocks)."""
        try:
            self._queue.put_nowait(trace)
        except queue.Full:
            self.num_dropped += 1
            return
        self.num_submitted += 1
        if self.num_submitted - self.num_done >= self._wake_at:
            self._wake.set()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Send every submitted trace now and wait until they are done (tests, a run's end)."""
        deadline = time.monotonic() + timeout_s
        while self.num_done < self.num_submitted and time.monotonic() < deadline:
            self._wake.set()
            time.sleep(0.005)
        return self.num_done >= self.num_submitted

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Send what waits and stop, waiting at most `timeout_s` (a collector that is down would
        otherwise hold a shutdown for the exporter's whole retry time)."""
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout_s)
        self._exporter.shutdown()  # ends a retry wait in progress

    def _run(self) -> None:
        while True:
            self._wake.wait(self.delay_s)
            self._wake.clear()
            stopping = self._stopping
            traces = []
            while True:
                try:
                    traces.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            batch: list[ReadableSpan] = []
            for trace in traces:
                batch += self._spans(trace)
                if len(batch) >= self.max_batch_spans:
                    self._send(batch)
                    batch = []
            if batch:
                self._send(batch)
            self.num_done += len(traces)
            if stopping:
                return

    def _send(self, spans: list[ReadableSpan]) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            ok = self._exporter.export(spans) is SpanExportResult.SUCCESS
        except Exception:  # an exporter bug must not end the thread: the next batch may go
            log.exception("OpenTelemetry: a batch of spans could not be sent")
            return
        if ok:
            self.num_exported_traces += sum(1 for s in spans if s.parent is None or s.parent.is_remote)

    def _spans(self, trace: RequestTrace) -> list[ReadableSpan]:
        """The trace's spans, finished; [] when there is nothing to show or the caller does not sample."""
        try:
            parent = parse_traceparent(trace.info.get("traceparent"))  # type: ignore[arg-type]
            trace_id = parent.trace_id if parent is not None else random.getrandbits(128)
            if not self.sampling.sampled(trace_id, parent):  # before planning: a dropped trace costs little
                self.num_unsampled += 1
                return []
            plans = plan_spans(trace, self.server_attributes)
            if not plans:
                return []
            return self._build(trace, plans, trace_id, parent)
        except Exception:  # a trace that cannot be turned into spans must not end the thread
            log.exception("OpenTelemetry: a request's spans could not be built")
            return []

    def _build(self, trace: RequestTrace, plans: list[PlannedSpan], trace_id: int, parent) -> list[ReadableSpan]:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        to_wall_ns = time.time_ns() - time.perf_counter_ns()  # the trace's clock to the epoch
        flags = TraceFlags(TraceFlags.SAMPLED)  # ours: the sampler said yes (always_on may overrule the caller)
        caller = None if parent is None else SpanContext(
            parent.trace_id, parent.span_id, True, TraceFlags(TraceFlags.SAMPLED if parent.sampled else TraceFlags.DEFAULT))
        root_plan, children = plans[0], plans[1:]
        root_ctx = SpanContext(trace_id, random.getrandbits(64), False, flags)
        failed = trace.info.get("error") is not None or trace.info.get("finish_reason") == "error"
        status = Status(StatusCode.ERROR, str(trace.info.get("error") or "error")) if failed else Status(StatusCode.UNSET)
        common = {"resource": self._resource, "instrumentation_scope": self._scope}
        spans = [ReadableSpan(root_plan.name, root_ctx, caller, attributes=root_plan.attributes, kind=SpanKind.SERVER,
                              status=status, start_time=root_plan.start_ns + to_wall_ns,
                              end_time=root_plan.end_ns + to_wall_ns, **common)]
        for plan in children:
            spans.append(ReadableSpan(plan.name, SpanContext(trace_id, random.getrandbits(64), False, flags), root_ctx,
                                      start_time=plan.start_ns + to_wall_ns, end_time=plan.end_ns + to_wall_ns,
                                      **common))
        return spans


def _resource():
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create({})  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, if set
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "ttft"}))
    return resource


def server_span_attributes(built: BuiltModel, model_name: str) -> dict[str, str]:
    """What every request's root span carries about the server: the model and the KV pool's format."""
    return {"gen_ai.request.model": model_name, "gen_ai.system": "ttft",
            "ttft.kv_cache_dtype": built.runner.kv_cache.kv_format.name}
