"""SSE framing: exact bytes, one event per payload, error events."""
from __future__ import annotations

import orjson
import pytest

from protocol.responses.sse import SSE_DONE, error_payload, sse_error, sse_event


def parse_sse(stream: bytes) -> list[bytes]:
    """What a client sees: the data of each event (events end with a blank line)."""
    assert stream.endswith(b"\n\n")
    events = stream[:-2].split(b"\n\n")
    out = []
    for ev in events:
        assert ev.startswith(b"data: ") and b"\n" not in ev
        out.append(ev[len(b"data: "):])
    return out


def test_event_framing_is_exact():
    assert sse_event(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert SSE_DONE == b"data: [DONE]\n\n"


def test_payload_with_newlines_in_strings_stays_one_event():
    payload = orjson.dumps({"text": "line1\nline2\r\n\n"})
    stream = sse_event(payload) + sse_event(orjson.dumps({"text": "x"})) + SSE_DONE
    events = parse_sse(stream)
    assert events[-1] == b"[DONE]"
    assert orjson.loads(events[0]) == {"text": "line1\nline2\r\n\n"}
    assert orjson.loads(events[1]) == {"text": "x"}


def test_a_raw_newline_in_a_payload_is_a_bug():
    for payload in (b'{"a":\n1}', b'{"a":\r1}', b'{"a":1}\r\n'):
        with pytest.raises(AssertionError):
            sse_event(payload)


def test_error_payload_has_the_openai_shape():
    body = orjson.loads(error_payload("engine failed", "server_error", None, "engine_error"))
    assert body == {
        "error": {"message": "engine failed", "type": "server_error", "param": None, "code": "engine_error"}
    }
    defaults = orjson.loads(error_payload("boom"))["error"]
    assert set(defaults) == {"message", "type", "param", "code"}
    assert defaults["type"] == "server_error" and defaults["param"] is None and defaults["code"] is None


def test_error_event_then_done():
    stream = sse_error("the step failed", code="internal_error") + SSE_DONE
    events = parse_sse(stream)
    err = orjson.loads(events[0])["error"]
    assert err["message"] == "the step failed" and err["code"] == "internal_error"
    assert events[1] == b"[DONE]"
