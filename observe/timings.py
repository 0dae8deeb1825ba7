"""A request's own stage timings, from its trace: as response headers, and as the `timings` object a
client asks for with `"return_timings": true`.

Each timing is the time between two edges of the trace (stages/trace.py), in milliseconds, and is
given only when both edges are marked by then: a streamed reply's headers leave with its first token,
so they hold what was known up to the first token's sampling; a whole reply's hold the request's end
too. The header names carry the unit, as TGI's `x-queue-time` / `x-inference-time` do not.
"""
from __future__ import annotations

from stages.trace import RequestTrace

# (name, from edge, to edge): the header is `x-ttft-<name with dashes>-ms`, the object's key `<name>_ms`.
TIMINGS: tuple[tuple[str, str, str], ...] = (
    ("parse", "received", "parsed"),
    ("tokenize", "parsed", "tokenized"),
    ("queue", "queued", "first_scheduled"),
    ("prefill", "first_scheduled", "first_token_sampled"),
    ("first_token", "received", "first_token_sampled"),
    ("time_to_first_token", "received", "first_token_written"),  # its bytes handed to the transport
    ("decode", "first_token_sampled", "finished"),
    ("total", "received", "finished"),
)


def timings_ms(trace: RequestTrace) -> dict[str, float]:
    """`<name>_ms` for each timing whose edges are both marked."""
    out = {}
    for name, first, last in TIMINGS:
        span_s = trace.span_s(first, last)
        if span_s is not None:
            out[f"{name}_ms"] = round(max(span_s, 0.0) * 1e3, 3)
    return out


def timing_headers(trace: RequestTrace) -> dict[str, str]:
    """`x-ttft-<name>-ms` headers for what the trace holds now."""
    return {f"x-ttft-{key[:-3].replace('_', '-')}-ms": f"{value:.3f}" for key, value in timings_ms(trace).items()}
