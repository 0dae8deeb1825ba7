"""The TTFT histogram holds each request's time to its first token, streamed or not: a whole
(non-streamed) reply counts from its body's arrival to its first token's sampling, as vLLM does,
and its whole latency goes to the end-to-end histogram only."""
from __future__ import annotations

import httpx

from bench.prom_text import parse_metrics
from pipeline import Engine, EngineConfig
from pipeline.app import create_app

BODY = {"prompt": [5, 6, 7, 8], "max_tokens": 48, "temperature": 0, "ignore_eos": True}


async def test_a_whole_reply_counts_its_first_token_not_its_end():
    config = EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, max_num_batched_tokens=16)
    async with Engine(config) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
            reply = await client.post("/v1/completions", json=BODY, headers={"X-Request-Id": "whole"})
            assert reply.status_code == 200
            assert reply.json()["usage"]["completion_tokens"] == 48
        m = parse_metrics(engine.metrics.render().decode())
        trace = next(t for t in engine.traces if t.request_id == "whole")
    assert m["ttft_time_to_first_token_seconds_count"] == 1
    assert m["ttft_inter_token_latency_seconds_count"] == 0  # one write: no gaps between writes
    first_token_s = trace.span_s("received", "first_token_sampled")
    assert abs(m["ttft_time_to_first_token_seconds_sum"] - first_token_s) < 1e-6
    # 47 decode steps came after the first token: the whole latency is well past it.
    assert m["ttft_e2e_request_latency_seconds_sum"] > 2 * m["ttft_time_to_first_token_seconds_sum"]


async def test_a_streamed_reply_counts_its_first_write():
    config = EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256)
    async with Engine(config) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
            reply = await client.post("/v1/completions", json={**BODY, "max_tokens": 6, "stream": True},
                                      headers={"X-Request-Id": "streamed"})
            assert reply.status_code == 200 and reply.text.endswith("data: [DONE]\n\n")
        m = parse_metrics(engine.metrics.render().decode())
        trace = next(t for t in engine.traces if t.request_id == "streamed")
    assert m["ttft_time_to_first_token_seconds_count"] == 1
    assert abs(m["ttft_time_to_first_token_seconds_sum"] - trace.ttft_s()) < 1e-6  # to first_token_written
    assert m["ttft_inter_token_latency_seconds_count"] >= 1
