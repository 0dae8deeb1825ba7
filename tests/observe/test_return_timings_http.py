"""`"return_timings": true` (both endpoints): the body, or the stream's last chunk before [DONE], carries
the request's stage timings in ms, the same spans as /debug/traces and the x-ttft-*-ms headers; a
value that is not a boolean is a 400 naming the field."""
from __future__ import annotations

import json

import pytest

CHAT = {"model": "dummy:tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
COMPLETION = {"model": "dummy:tiny", "prompt": "hi there", "max_tokens": 3}


def edges_of(server, request_id: str) -> dict:
    return server.http("GET", f"/debug/traces?request_id={request_id}").json()["traces"][0]["edges_ms"]


def sse_chunks(text: str) -> list:
    events = [line[len("data: "):] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_a_whole_reply_carries_every_timing_up_to_its_end(tiny_server) -> None:
    r = tiny_server.http("POST", "/v1/completions", headers={"X-Request-Id": "rt-whole"},
                         json={**COMPLETION, "return_timings": True})
    assert r.status_code == 200
    timings, edges = r.json()["timings"], edges_of(tiny_server, "rt-whole")
    assert timings["queue_ms"] == pytest.approx(edges["first_scheduled"] - edges["queued"], abs=2e-3)
    assert timings["first_token_ms"] == pytest.approx(edges["first_token_sampled"], abs=2e-3)
    assert timings["total_ms"] == pytest.approx(edges["finished"], abs=2e-3)
    assert float(r.headers["x-ttft-first-token-ms"]) == pytest.approx(timings["first_token_ms"], abs=1e-3)


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)])
def test_a_stream_ends_with_a_timings_chunk(tiny_server, path: str, body: dict) -> None:
    rid = "rt-stream-" + path.strip("/").replace("/", "-")
    r = tiny_server.http("POST", path, headers={"X-Request-Id": rid},
                         json={**body, "stream": True, "stream_options": {"include_usage": True}, "return_timings": True})
    chunks = sse_chunks(r.text)
    last = chunks[-1]
    assert last["choices"] == [] and last["id"] == rid and "usage" in chunks[-2]
    assert all("timings" not in c for c in chunks[:-1])
    edges = edges_of(tiny_server, rid)
    assert last["timings"]["time_to_first_token_ms"] == pytest.approx(edges["first_token_written"], abs=2e-3)
    assert last["timings"]["prefill_ms"] == pytest.approx(edges["first_token_sampled"] - edges["first_scheduled"],
                                                          abs=2e-3)


def test_without_the_field_there_are_no_timings(tiny_server) -> None:
    assert "timings" not in tiny_server.http("POST", "/v1/chat/completions", json=CHAT).json()
    r = tiny_server.http("POST", "/v1/completions", json={**COMPLETION, "stream": True, "return_timings": False})
    assert all("timings" not in c for c in sse_chunks(r.text))


@pytest.mark.parametrize("value", ["yes", 1, 0, [], {}, 1.0])
def test_a_value_that_is_not_a_boolean_is_a_400(tiny_server, value) -> None:
    for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
        r = tiny_server.http("POST", path, json={**body, "return_timings": value})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "return_timings"
    assert tiny_server.http("POST", "/v1/completions", json=COMPLETION).status_code == 200
