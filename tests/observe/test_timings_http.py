"""Per-request timings over HTTP: `x-ttft-*-ms` headers on streamed and whole replies (what is known
when they leave), and `/debug/traces?request_id=` (400 on a malformed value)."""
from __future__ import annotations

import pytest


def post(server, request_id: str, **body):
    return server.http("POST", "/v1/completions", headers={"X-Request-Id": request_id},
                       json={"model": "dummy:tiny", "prompt": "hi there", "max_tokens": 3, **body})


def edges_of(server, request_id: str) -> dict:
    traces = server.http("GET", "/debug/traces", params={"request_id": request_id}).json()["traces"]
    assert [t["request_id"] for t in traces] == [request_id]
    return traces[0]["edges_ms"]


def test_a_whole_reply_carries_every_timing_up_to_its_end(tiny_server) -> None:
    r = post(tiny_server, "t-whole")
    assert r.status_code == 200
    edges = edges_of(tiny_server, "t-whole")
    h = r.headers
    assert float(h["x-ttft-queue-ms"]) == pytest.approx(edges["first_scheduled"] - edges["queued"], abs=2e-3)
    assert float(h["x-ttft-prefill-ms"]) == pytest.approx(edges["first_token_sampled"] - edges["first_scheduled"],
                                                          abs=2e-3)
    assert float(h["x-ttft-first-token-ms"]) == pytest.approx(edges["first_token_sampled"], abs=2e-3)
    assert float(h["x-ttft-total-ms"]) == pytest.approx(edges["finished"], abs=2e-3)


def test_a_streamed_reply_carries_what_was_known_at_its_first_token(tiny_server) -> None:
    r = post(tiny_server, "t-stream", stream=True)
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    edges = edges_of(tiny_server, "t-stream")
    assert float(r.headers["x-ttft-first-token-ms"]) == pytest.approx(edges["first_token_sampled"], abs=2e-3)
    assert "x-ttft-total-ms" not in r.headers and "x-ttft-decode-ms" not in r.headers


def test_the_filter_finds_a_requests_sequences_and_nothing_else(tiny_server) -> None:
    assert post(tiny_server, "t-n2", n=2).status_code == 200
    traces = tiny_server.http("GET", "/debug/traces?request_id=t-n2").json()["traces"]
    assert sorted(t["request_id"] for t in traces) == ["t-n2-0", "t-n2-1"]
    assert tiny_server.http("GET", "/debug/traces?request_id=nobody").json() == {"traces": []}
    perfetto = tiny_server.http("GET", "/debug/traces?request_id=t-n2&format=perfetto").json()
    assert {e["name"] for e in perfetto["traceEvents"] if e["ph"] == "X"} == {"t-n2-0", "t-n2-1"}


@pytest.mark.parametrize("value", ["", "x" * 129, "bad\x01id", "tab\tid"])
def test_a_malformed_request_id_is_a_400_naming_it(tiny_server, value: str) -> None:
    r = tiny_server.http("GET", "/debug/traces", params={"request_id": value})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "request_id" and "printable" in r.json()["error"]["message"]
    assert post(tiny_server, "t-after-400").status_code == 200
