"""The head limits' arithmetic and the refusal's bytes (pipeline/http_head.py)."""
from __future__ import annotations

import orjson

from pipeline.http_head import ConnectionLimits, head_refusal, raw_error_response
from protocol.errors import overloaded

LIMITS = ConnectionLimits(max_headers=3, max_header_bytes=40, max_url_bytes=10)


def test_a_head_at_each_limit_passes_and_one_past_it_is_refused() -> None:
    at_bytes = [(b"a", b"x" * 15), (b"b", b"y" * 15)]  # (1 + 15 + 4) * 2 = 40
    assert head_refusal(b"/" + b"u" * 9, at_bytes, LIMITS) is None
    assert head_refusal(b"/" + b"u" * 10, [], LIMITS).status == 414
    assert head_refusal(b"/", [(b"h", b"")] * 4, LIMITS).message.endswith("more than 3 headers.")
    past = head_refusal(b"/", [(b"a", b"x" * 16), (b"b", b"y" * 15)], LIMITS)
    assert past.status == 431 and past.code == "request_header_fields_too_large" and "40 bytes" in past.message


def test_the_raw_limit_holds_the_url_the_headers_and_a_request_line() -> None:
    assert LIMITS.max_head_bytes > LIMITS.max_url_bytes + LIMITS.max_header_bytes
    assert LIMITS.min_checked_head_bytes == 10


def test_the_refusal_is_a_whole_response_that_closes_the_connection() -> None:
    raw = raw_error_response(overloaded(2.5), [(b"server", b"uvicorn")])
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 503 Service Unavailable"
    assert set(lines[1:]) == {b"server: uvicorn", b"retry-after: 3", b"content-type: application/json",
                              b"content-length: %d" % len(body), b"connection: close"}
    assert orjson.loads(body)["error"]["type"] == "overloaded_error"
