"""The served API through the official `openai` client and raw HTTP, against SmolLM2 on loopback."""
from __future__ import annotations

import time

import httpx
import openai
import pytest

from bench.prom_text import parse_metrics, parse_series


@pytest.fixture(scope="module")
def client(smollm_server):
    return openai.OpenAI(base_url=f"{smollm_server.base_url}/v1", api_key="unused", max_retries=0)


def model_name(client) -> str:
    return client.models.list().data[0].id


def test_chat_stream_answers_paris(client):
    stream = client.chat.completions.create(
        model=model_name(client), stream=True, temperature=0, max_tokens=24,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals in (["stop"], ["length"])
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert 1 <= usage.completion_tokens <= 24


def test_completion_stream_and_usage_counts(client, smollm_server):
    prompt = "The capital of France is"
    stream = client.completions.create(
        model=model_name(client), prompt=prompt, stream=True, temperature=0, max_tokens=8,
        extra_body={"ignore_eos": True}, stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert usage.completion_tokens == 8
    # prompt_tokens is the tokenizer's own count of the prompt
    ids = httpx.post(f"{smollm_server.base_url}/v1/completions", json={
        "prompt": prompt, "max_tokens": 1, "temperature": 0}).json()["usage"]["prompt_tokens"]
    assert usage.prompt_tokens == ids == 5
    whole = client.completions.create(model=model_name(client), prompt=prompt, temperature=0,
                                      max_tokens=8, extra_body={"ignore_eos": True})
    assert whole.choices[0].text == text  # streamed and whole replies are the same greedy text
    assert whole.usage.completion_tokens == 8


def test_stop_string_is_honoured_and_never_sent(client):
    base = client.completions.create(model=model_name(client), prompt="1, 2, 3, 4,", temperature=0,
                                     max_tokens=16, extra_body={"ignore_eos": True})
    full = base.choices[0].text
    assert " 7" in full, full  # the model counts on
    stopped = client.completions.create(model=model_name(client), prompt="1, 2, 3, 4,", temperature=0,
                                        max_tokens=16, stop=[" 7"], stream=True)
    chunks = list(stopped)
    text = "".join(c.choices[0].text for c in chunks)
    assert text == full[: full.index(" 7")]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_emoji_and_cjk_round_trip_when_streamed(client):
    prompt = "🎉你好世界🎉你好世界🎉你好世界🎉你好世界🎉你好世界"
    kwargs = dict(model=model_name(client), prompt=prompt, temperature=0, max_tokens=24,
                  extra_body={"ignore_eos": True})
    whole = client.completions.create(**kwargs).choices[0].text
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kwargs))
    assert streamed == whole
    # The reply carries 4-byte (emoji) and 3-byte (CJK / full-width) characters, each split over
    # several byte-level tokens: streaming must reassemble them exactly as the whole reply does.
    assert any(len(ch.encode()) == 4 for ch in whole), whole
    assert any(len(ch.encode()) == 3 for ch in whole), whole
    assert "\ufffd" not in whole


def test_client_disconnect_mid_stream_frees_blocks(smollm_server):
    url = f"{smollm_server.base_url}/v1/completions"
    body = {"prompt": "Once upon a time", "max_tokens": 400, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", url, json=body, timeout=30) as resp:
        got = 0
        for line in resp.iter_lines():
            if line.startswith("data: "):
                got += 1
            if got == 3:
                break  # leave mid-stream: the context manager closes the connection
    deadline = time.monotonic() + 1.0
    used = None
    while time.monotonic() < deadline:
        used = smollm_server.metric("ttft_kv_blocks", 'state="used"')
        if used == 0:
            break
        time.sleep(0.05)
    assert used == 0
    values = parse_metrics(httpx.get(f"{smollm_server.base_url}/metrics").text)
    assert values['ttft_requests_total{outcome="abort"}'] >= 1


def test_request_id_is_echoed_and_traced(smollm_server):
    r = httpx.post(f"{smollm_server.base_url}/v1/completions", headers={"X-Request-Id": "trace-me-1"},
                   json={"prompt": "Hi", "max_tokens": 2})
    assert r.status_code == 200 and r.headers["x-request-id"] == "trace-me-1"
    traces = httpx.get(f"{smollm_server.base_url}/debug/traces?limit=50").json()["traces"]
    mine = [t for t in traces if t["request_id"] == "trace-me-1"]
    assert mine and set(mine[0]["edges_ms"]) >= {"received", "parsed", "tokenized", "queued",
                                                  "first_scheduled", "first_token_sampled", "finished"}
    perfetto = httpx.get(f"{smollm_server.base_url}/debug/traces?format=perfetto").json()
    assert any(e.get("name") == "trace-me-1" and e["ph"] == "X" for e in perfetto["traceEvents"])


def test_metrics_exports_the_named_families(smollm_server):
    series = parse_series(httpx.get(f"{smollm_server.base_url}/metrics").text)
    names = {s.name for s in series}
    for family in ("ttft_time_to_first_token_seconds_bucket", "ttft_inter_token_latency_seconds_bucket",
                   "ttft_stage_seconds_bucket", "ttft_queue_depth", "ttft_requests_total"):
        assert family in names, family
    assert 'ttft_kv_blocks{state="free"}' in {s.key() for s in series}
    # Every series of ours carries the served model's name, as vLLM's do.
    ours = [s for s in series if s.name.startswith("ttft_")]
    model = httpx.get(f"{smollm_server.base_url}/v1/models").json()["data"][0]["id"]
    assert ours and all(dict(s.labels).get("model_name") == model for s in ours)
