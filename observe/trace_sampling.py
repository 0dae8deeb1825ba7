"""TraceSampling: whether a finished request's spans are exported, by the OpenTelemetry SDK's own sampler.

The sampler named by OTEL_TRACES_SAMPLER (observe/otlp_settings.py reads and checks it) is the
SDK's object, asked as a tracer would ask it for the request's root span: with the request's trace
id and, when the caller sent a W3C `traceparent`, the caller's span as a remote parent. So
`traceidratio` keeps the same traces as every other service sampling by trace id at that rate, and
the `parentbased_*` samplers follow the caller's sampled flag. The request's child spans go with its
root: one decision per request.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from observe.otlp_settings import SamplerChoice
from observe.span_plan import ROOT_NAME
from observe.traceparent import ParentSpan

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.sampling import Sampler


def sdk_sampler(choice: SamplerChoice) -> Sampler:
    """The SDK's sampler for `choice` (the same objects the SDK builds from the environment)."""
    from opentelemetry.sdk.trace import sampling

    if choice.name == "traceidratio":
        return sampling.TraceIdRatioBased(choice.rate)
    if choice.name == "parentbased_traceidratio":
        return sampling.ParentBasedTraceIdRatio(choice.rate)
    return {"always_on": sampling.ALWAYS_ON, "always_off": sampling.ALWAYS_OFF,
            "parentbased_always_on": sampling.DEFAULT_ON,
            "parentbased_always_off": sampling.DEFAULT_OFF}[choice.name]


class TraceSampling:
    def __init__(self, choice: SamplerChoice) -> None:
        self.choice = choice
        self.sampler = sdk_sampler(choice)

    def sampled(self, trace_id: int, parent: ParentSpan | None) -> bool:
        """The sampler's decision for a request's root span in trace `trace_id`."""
        from opentelemetry import trace as otel_trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        context = None
        if parent is not None:
            flags = TraceFlags(TraceFlags.SAMPLED if parent.sampled else TraceFlags.DEFAULT)
            caller = SpanContext(parent.trace_id, parent.span_id, is_remote=True, trace_flags=flags)
            context = otel_trace.set_span_in_context(NonRecordingSpan(caller))
        result = self.sampler.should_sample(context, trace_id, ROOT_NAME, otel_trace.SpanKind.SERVER)
        return result.decision.is_sampled()
