"""The embedded API's trace context: `Engine.generate(..., traceparent=...)` puts the request's
exported spans in the caller's trace under the caller's span, as an HTTP caller's header does; an
unsampled caller keeps them out (the default sampler); a malformed value is ignored (a trace of the
request's own) and a value that is not text is a TypeError."""
from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
pytest.importorskip("opentelemetry.proto", reason="opentelemetry-proto is not installed")

from otlp_receiver import OtlpReceiver  # noqa: E402

from pipeline import Engine, EngineConfig  # noqa: E402
from stages.sampling import SamplingParams  # noqa: E402

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
PARAMS = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)


async def test_generate_joins_the_callers_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # only the flush below sends
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    receiver = OtlpReceiver()
    config = EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, otlp_traces_endpoint=receiver.url)
    try:
        async with Engine(config) as engine:
            calls = {"joined": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01", "unsampled": f"00-{CALLER_TRACE}-{CALLER_SPAN}-00",
                     "malformed": f"00-{CALLER_TRACE}-{CALLER_SPAN}", "none": None}
            for rid, traceparent in calls.items():
                outs = [o async for o in engine.generate("hello", PARAMS, f"emb-{rid}", traceparent=traceparent)]
                assert outs[-1].finish_reason == "length"
            with pytest.raises(TypeError, match="traceparent is the header's text"):
                [o async for o in engine.generate("hello", PARAMS, "emb-bytes", traceparent=b"00-ab")]
            assert engine.trace_export.flush(10.0)
            assert engine.trace_export.num_unsampled == 1
        root = receiver.request_spans("emb-joined")[0]
        assert (root.trace_id, root.parent_span_id) == (CALLER_TRACE, CALLER_SPAN)
        for rid in ("malformed", "none"):
            root = receiver.request_spans(f"emb-{rid}")[0]
            assert root.parent_span_id == "" and root.trace_id != CALLER_TRACE
        roots = {s.attributes.get("ttft.request_id") for s in receiver.spans if s.name == "ttft.request"}
        assert roots == {"emb-joined", "emb-malformed", "emb-none"}
    finally:
        receiver.close()
