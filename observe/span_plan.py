"""The spans of one finished request, planned from its RequestTrace (no OpenTelemetry needed).

One root span covers the request, from its body complete (`received`) to its end (`finished`).
Under it, one child per stage edge the request crossed, named as the edge in the order the trace
defines (`/debug/traces`, the Perfetto tracks and `ttft_stage_seconds{stage=...}` use the same names),
each spanning from the previous marked edge to this one, so the children tile the root with no gap.
Two spans are added for what an operator looks for first: `prefill`, from the first scheduled step
to the first token sampled (every prefill chunk of the prompt), and `decode`, from the first token
sampled to the end. Times stay on the trace's monotonic clock; the exporter moves them to the wall
clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from stages.trace import RequestTrace

ROOT_NAME = "ttft.request"
# Spans over several edges: (name, from edge, to edge).
PHASES: tuple[tuple[str, str, str], ...] = (
    ("prefill", "first_scheduled", "first_token_sampled"),
    ("decode", "first_token_sampled", "finished"),
)
# trace.info keys an operator filters on -> attribute names (OpenTelemetry's gen_ai.* where one exists).
INFO_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("num_prompt_tokens", "gen_ai.usage.input_tokens"),
    ("num_output_tokens", "gen_ai.usage.output_tokens"),
    ("num_cached_tokens", "ttft.cached_tokens"),
    ("lane", "ttft.lane"),
    ("num_preemptions", "ttft.preemptions"),
    ("finish_reason", "gen_ai.response.finish_reasons"),
    ("error", "error.type"),
)


@dataclass(slots=True)
class PlannedSpan:
    name: str
    start_ns: int  # the trace's monotonic clock
    end_ns: int
    is_root: bool = False
    attributes: dict[str, str | int | float | bool] = field(default_factory=dict)


def plan_spans(trace: RequestTrace, server_attributes: dict[str, str] | None = None) -> list[PlannedSpan]:
    """The root span first, then its children in time order; [] for a trace with no `received`
    mark (a request refused before its body was read has nothing to show)."""
    marks = trace.marks_ns
    start = marks.get("received")
    if start is None:
        return []
    end = max(marks.values())
    root = PlannedSpan(ROOT_NAME, start, end, True, root_attributes(trace, server_attributes or {}))
    children = [PlannedSpan(edge, a, b) for edge, a, b in trace.stage_spans()]
    for name, first, last in PHASES:
        a, b = marks.get(first), marks.get(last)
        if a is not None and b is not None:
            children.append(PlannedSpan(name, a, max(a, b)))
    children.sort(key=lambda s: (s.start_ns, s.end_ns))
    return [root, *children]


def root_attributes(trace: RequestTrace, server_attributes: dict[str, str]) -> dict[str, str | int | float | bool]:
    attrs: dict[str, str | int | float | bool] = {"ttft.request_id": trace.request_id, **server_attributes}
    info = trace.info
    for key, name in INFO_ATTRIBUTES:
        value = info.get(key)
        if isinstance(value, (str, int, float, bool)):
            attrs[name] = value
    ttft_s = trace.ttft_s()
    if ttft_s is not None:
        attrs["ttft.time_to_first_token_ms"] = round(ttft_s * 1e3, 4)
    return attrs
