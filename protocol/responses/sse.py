"""Server-sent events framing for OpenAI-style streams.

Each event is one `data:` line and a blank line. The payloads are orjson output, which escapes
control characters inside strings and never emits a raw newline, so one line is always enough.
A failure mid-stream is reported as an error event (then `[DONE]`), since the 200 status and
headers are already on the wire.
"""
from __future__ import annotations

import orjson

SSE_DONE = b"data: [DONE]\n\n"


def sse_event(payload: bytes) -> bytes:
    """Frame one JSON payload as an SSE event."""
    # Bytes searched by int (a memchr) rather than by b"\n" (the general substring search costs
    # ~10x more, and this runs for every token of every stream).
    assert 10 not in payload and 13 not in payload, "SSE payload must be a single line"  # \n, \r
    return b"data: " + payload + b"\n\n"


def error_payload(
    message: str,
    type: str = "server_error",  # noqa: A002 - the OpenAI field name
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    """The OpenAI error object: {"error": {"message", "type", "param", "code"}}."""
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


def sse_error(
    message: str,
    type: str = "server_error",  # noqa: A002
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    """An error event for a stream that fails after it started."""
    return sse_event(error_payload(message, type, param, code))
