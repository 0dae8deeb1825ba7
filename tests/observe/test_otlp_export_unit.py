"""OtlpTraceExport on its own, against a real OTLP/HTTP receiver: every submitted trace arrives once
flushed; a full queue drops and counts instead of blocking; an unsampled caller gets nothing unless
OTEL_TRACES_SAMPLER says always_on, and always_off sends nothing; a dead collector neither blocks
`submit` nor holds `close` past its timeout."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
pytest.importorskip("opentelemetry.proto", reason="opentelemetry-proto is not installed")

from live_server import free_port  # noqa: E402
from otlp_receiver import OtlpReceiver  # noqa: E402

from observe.otlp_export import OtlpTraceExport  # noqa: E402
from stages.trace import RequestTrace  # noqa: E402

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"  # not sampled
SAMPLED_PARENT = PARENT[:-2] + "01"


def finished(rid: str, traceparent: str | None = None) -> RequestTrace:
    trace = RequestTrace(rid)
    for edge in ("received", "parsed", "tokenized", "queued", "first_scheduled", "first_token_sampled",
                 "first_token_written", "finished"):
        trace.mark(edge)
    if traceparent:
        trace.info["traceparent"] = traceparent
    return trace


@pytest.fixture
def receiver():
    r = OtlpReceiver()
    yield r
    r.close()


@pytest.fixture(autouse=True)
def slow_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # only a flush (or a full queue) sends
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")


def test_every_trace_arrives_once_flushed_in_batches(receiver) -> None:
    export = OtlpTraceExport(f"{receiver.url}/v1/traces", {"ttft.kv_cache_dtype": "bf16"})
    try:
        for i in range(20):
            export.submit(finished(f"u-{i}"))
        time.sleep(0.2)
        assert receiver.spans == []  # nothing before the batch's time
        assert export.flush(10.0)
        roots = [s for s in receiver.spans if s.parent_span_id == ""]
        assert sorted(s.attributes["ttft.request_id"] for s in roots) == sorted(f"u-{i}" for i in range(20))
        # a batch closes with the trace that takes it to 16 spans: two traces of 10 spans each
        assert len(receiver.spans) == 20 * 10 and receiver.num_posts == 10
        assert export.num_exported_traces == 20 and export.num_dropped == 0
    finally:
        export.close()


def test_a_full_queue_drops_and_counts_and_an_unsampled_caller_gets_nothing(receiver) -> None:
    export = OtlpTraceExport(f"{receiver.url}/v1/traces", max_pending=8)
    try:
        export._wake_at = 10**9  # hold the thread asleep: the queue fills
        for i in range(12):
            export.submit(finished(f"q-{i}", PARENT if i == 0 else None))
        assert export.num_dropped == 4 and export.num_submitted == 8
        assert export.flush(10.0)
        ids = {s.attributes.get("ttft.request_id") for s in receiver.spans if s.parent_span_id in ("",)}
        assert ids == {f"q-{i}" for i in range(1, 8)}
    finally:
        export.close()


def test_a_dead_collector_blocks_neither_submit_nor_close() -> None:
    export = OtlpTraceExport(f"http://127.0.0.1:{free_port()}/v1/traces")
    t0 = time.perf_counter()
    for i in range(200):
        export.submit(finished(f"d-{i}"))
    assert time.perf_counter() - t0 < 0.5
    export._wake.set()  # the thread starts sending (and retrying)
    time.sleep(0.3)
    t0 = time.perf_counter()
    export.close(timeout_s=1.0)
    assert time.perf_counter() - t0 < 3.0


def test_the_sampler_variables_decide_which_traces_go(receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    export = OtlpTraceExport(f"{receiver.url}/v1/traces")
    try:
        for i in range(5):
            export.submit(finished(f"off-{i}", SAMPLED_PARENT if i == 0 else None))
        assert export.flush(10.0)
        assert receiver.spans == [] and export.num_unsampled == 5 and export.num_exported_traces == 0
    finally:
        export.close()
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")  # overrules a caller that does not sample
    export = OtlpTraceExport(f"{receiver.url}/v1/traces")
    try:
        export.submit(finished("on-0", PARENT))
        assert export.flush(10.0)
        root = receiver.request_spans("on-0")[0]
        assert root.trace_id == PARENT.split("-")[1] and root.parent_span_id == PARENT.split("-")[2]
        assert export.num_unsampled == 0 and export.num_exported_traces == 1
    finally:
        export.close()
