"""OpenTelemetry export against a real OTLP/HTTP receiver: a server started with
--otlp-traces-endpoint sends one root span per request with a child per stage edge, whose structure
and times match /debug/traces for the same request; a caller's W3C traceparent puts the spans in its
trace (and its unsampled flag keeps them out); a collector that is down leaves serving unaffected and
the log quiet."""
from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
pytest.importorskip("opentelemetry.proto", reason="opentelemetry-proto is not installed")

from live_server import free_port  # noqa: E402
from otlp_receiver import OtlpReceiver  # noqa: E402

from observe.span_plan import PHASES, ROOT_NAME  # noqa: E402
from stages.trace import EDGES  # noqa: E402

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
FAST_BATCHES = {"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_SERVICE_NAME": "ttft-under-test"}


@pytest.fixture(scope="module")
def receiver():
    r = OtlpReceiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def servers(launch, receiver):
    """(exporting to the receiver, exporting to a port nobody listens on)."""
    base = ("--model", "dummy:tiny", "--max-model-len", "512")
    dead = f"http://127.0.0.1:{free_port()}"
    return launch.many([((*base, "--otlp-traces-endpoint", receiver.url), FAST_BATCHES),
                        ((*base, "--otlp-traces-endpoint", dead), FAST_BATCHES)])


def complete(server, request_id: str, headers: dict | None = None, **body) -> dict:
    r = server.http("POST", "/v1/completions", headers={"X-Request-Id": request_id, **(headers or {})},
                    json={"model": "dummy:tiny", "prompt": "hello there", "max_tokens": 4, **body})
    assert r.status_code == 200, r.text
    return r


def debug_trace(server, request_id: str) -> dict:
    traces = server.http("GET", f"/debug/traces?request_id={request_id}").json()["traces"]
    assert len(traces) == 1
    return traces[0]


def test_one_root_span_per_request_with_a_child_per_stage_edge_timed_as_debug_traces(servers, receiver) -> None:
    server, _ = servers
    complete(server, "otel-edges", {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}, stream=True)
    spans = receiver.request_spans("otel-edges")
    root, children = spans[0], spans[1:]
    trace = debug_trace(server, "otel-edges")
    edges = trace["edges_ms"]
    # The caller's trace, under the caller's span.
    assert (root.name, root.trace_id, root.parent_span_id) == (ROOT_NAME, CALLER_TRACE, CALLER_SPAN)
    assert all(c.trace_id == CALLER_TRACE for c in children)
    assert root.resource["service.name"] == "ttft-under-test"
    # One child per marked edge after the first (in the pipeline's order), plus prefill and decode.
    marked = [(edges[edge], edge) for edge in EDGES if edge in edges]
    expected = {edge for _, edge in marked[1:]} | {name for name, _, _ in PHASES}
    assert sorted(c.name for c in children) == sorted(expected)
    assert {"parsed", "tokenized", "queued", "first_scheduled", "first_token_sampled", "first_token_written",
            "finished"} <= expected
    # Times: each edge's child spans from the previous marked edge to it, as /debug/traces says.
    by_name = {c.name: c for c in children}
    for (prev_ms, _), (ms, edge) in zip(marked, marked[1:]):
        span = by_name[edge]
        assert (span.end_ns - span.start_ns) / 1e6 == pytest.approx(ms - prev_ms, abs=2e-3), edge
        assert (span.start_ns - root.start_ns) / 1e6 == pytest.approx(prev_ms, abs=2e-3), edge
        assert root.start_ns <= span.start_ns <= span.end_ns <= root.end_ns
    assert (root.end_ns - root.start_ns) / 1e6 == pytest.approx(edges["finished"], abs=2e-3)
    prefill = by_name["prefill"]
    assert (prefill.end_ns - prefill.start_ns) / 1e6 == pytest.approx(
        edges["first_token_sampled"] - edges["first_scheduled"], abs=2e-3)
    # What an operator filters on.
    attrs, info = root.attributes, trace["info"]
    assert attrs["gen_ai.usage.input_tokens"] == info["num_prompt_tokens"] > 0
    assert attrs["gen_ai.usage.output_tokens"] == info["num_output_tokens"] == 4
    assert attrs["ttft.lane"] == info["lane"] in ("short", "long") and attrs["ttft.preemptions"] == 0
    assert attrs["ttft.cached_tokens"] == info["num_cached_tokens"] and attrs["ttft.kv_cache_dtype"] == "float32"
    assert attrs["gen_ai.response.finish_reasons"] == "length" and root.status_code != 2  # not ERROR
    assert attrs["ttft.time_to_first_token_ms"] == pytest.approx(edges["first_token_written"], abs=2e-3)


def test_without_traceparent_a_request_starts_its_own_trace(servers, receiver) -> None:
    server, _ = servers
    complete(server, "otel-own")
    complete(server, "otel-bad-parent", {"traceparent": "00-not-a-traceparent-01"})
    for rid in ("otel-own", "otel-bad-parent"):
        root = receiver.request_spans(rid)[0]
        assert root.parent_span_id == "" and root.trace_id not in ("", CALLER_TRACE)


def test_a_caller_that_does_not_sample_keeps_the_spans_out(servers, receiver) -> None:
    server, _ = servers
    complete(server, "otel-unsampled", {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-00"})
    complete(server, "otel-after")  # exported after the unsampled one: by then it would have arrived
    receiver.request_spans("otel-after")
    assert not [s for s in receiver.spans if s.attributes.get("ttft.request_id") == "otel-unsampled"]


def test_a_dead_collector_leaves_serving_unaffected_and_the_log_quiet(servers) -> None:
    _, server = servers
    for i in range(6):
        reply = complete(server, f"dead-{i}", stream=bool(i % 2))
        assert reply.headers["x-ttft-first-token-ms"]
    assert server.http("GET", "/health").status_code == 200
    assert len(server.http("GET", "/debug/traces").json()["traces"]) == 6
    otel_lines = [line for line in server.log().splitlines() if "opentelemetry" in line]
    assert len(otel_lines) <= 1, otel_lines
