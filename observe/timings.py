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


# (object key, header name, from edge, to edge), named once: a streamed reply's headers are built
# between its first token's sampling and its first write.
_NAMED = tuple((f"{name}_ms", f"x-ttft-{name.replace('_', '-')}-ms", first, last) for name, first, last in TIMINGS)


def timings_ms(trace: RequestTrace) -> dict[str, float]:
    """`<name>_ms` for each timing whose edges are both marked."""
    marks = trace.marks_ns
    out = {}
    for key, _, first, last in _NAMED:
        start, end = marks.get(first), marks.get(last)
        if start is not None and end is not None:
            out[key] = round(max(end - start, 0) / 1e6, 3)
    return out


def timing_headers(trace: RequestTrace) -> dict[str, str]:
    """`x-ttft-<name>-ms` headers for what the trace holds now (the values of `timings_ms`)."""
    marks = trace.marks_ns
    out = {}
    for _, header, first, last in _NAMED:
        start, end = marks.get(first), marks.get(last)
        if start is not None and end is not None:
            out[header] = f"{round(max(end - start, 0) / 1e6, 3):.3f}"
    return out
