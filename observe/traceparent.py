"""W3C Trace Context: the `traceparent` header a caller sends, so that ttft's spans join its trace.

`00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>`. The recommendation says a server that
cannot parse the header ignores it and starts a trace of its own: a malformed value is never an
error to the client. Version 00 is read exactly; a later version is read by its first four fields,
as the recommendation asks of a server that knows only 00.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_HEADER = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
MAX_HEADER_CHARS = 512  # what the recommendation lets a vendor extension grow to, with room


@dataclass(frozen=True, slots=True)
class ParentSpan:
    trace_id: int
    span_id: int
    sampled: bool


def parse_traceparent(value: str | None) -> ParentSpan | None:
    """The caller's span, or None when there is none or the header is not a valid traceparent."""
    if not value or len(value) > MAX_HEADER_CHARS:
        return None
    match = _HEADER.fullmatch(value.strip())
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return ParentSpan(trace_id, span_id, bool(int(flags_hex, 16) & 1))


def valid_traceparent(value: str | None) -> str | None:
    """The header's value when it is a valid traceparent (what a trace keeps), else None."""
    return value.strip() if parse_traceparent(value) is not None else None
