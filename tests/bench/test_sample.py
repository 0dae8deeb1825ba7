"""StreamRecorder: which chunks count as tokens, usage, in-stream errors, success rules."""
from __future__ import annotations

import orjson
import pytest

from bench.sample import RequestSample, StreamRecorder


def feed(chat: bool, events: list[tuple[object, float]], status: int = 200) -> RequestSample:
    rec = StreamRecorder(RequestSample("r", 3, 4, t_send_s=10.0), chat=chat)
    for payload, t in events:
        rec.on_event(payload if isinstance(payload, bytes) else orjson.dumps(payload), t)
    return rec.finish(status, t_end=11.0)


def test_chat_role_delta_and_empty_chunks_are_not_tokens():
    s = feed(True, [
        ({"choices": [{"delta": {"role": "assistant", "content": ""}}]}, 10.01),
        ({"choices": [{"delta": {"content": "Hel"}}]}, 10.10),
        ({"choices": [{"delta": {"content": "lo"}}]}, 10.15),
        ({"choices": [{"delta": {}, "finish_reason": "stop"}]}, 10.16),
        ({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}, 10.20),
        (b"[DONE]", 10.21),
    ])
    assert s.success and s.ttft_s == approx(0.10)
    assert s.chunk_times_s == [approx(0.10), approx(0.15)]
    assert s.latency_s == approx(0.16)  # last chunk with choices, as vLLM
    assert (s.output_tokens, s.prompt_tokens, s.finish_reason, s.output_chars) == (2, 9, "stop", 5)


def test_without_usage_chunks_are_counted():
    s = feed(False, [({"choices": [{"text": "a"}]}, 10.1), ({"choices": [{"text": "b"}]}, 10.2)])
    assert s.success and s.output_tokens == 2 and s.prompt_tokens is None


def test_failures():
    err = feed(False, [({"choices": [{"text": "a"}]}, 10.1), ({"error": {"message": "oom"}}, 10.2)])
    assert not err.success and "oom" in err.error
    empty = feed(False, [({"choices": [{"text": ""}]}, 10.1)])
    assert not empty.success and "TTFT undefined" in empty.error and empty.ttft_s is None
    bad = feed(False, [(b"{nope", 10.1)])
    assert not bad.success and "bad JSON" in bad.error
    http = feed(False, [], status=503)
    assert not http.success and http.status == 503 and http.latency_s == approx(1.0)


def approx(x: float):
    return pytest.approx(x, abs=1e-9)


def test_cached_tokens_and_kept_reply():
    rec = StreamRecorder(RequestSample("r", 3, 2, t_send_s=10.0), chat=False, keep_reply=True)
    for payload in ({"choices": [{"text": "Hel", "token_ids": [7]}]}, {"choices": [{"text": "lo", "token_ids": [8]}]},
                    {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2,
                                              "prompt_tokens_details": {"cached_tokens": 8}}}):
        rec.on_event(orjson.dumps(payload), 10.1)
    s = rec.finish(200, t_end=11.0)
    assert s.cached_tokens == 8 and rec.reply_parts == ["Hel", "lo"] and rec.reply_token_ids == [7, 8]
    plain = feed(False, [({"choices": [{"text": "a"}]}, 10.1)])
    assert plain.cached_tokens is None  # not reported: unknown, not zero
